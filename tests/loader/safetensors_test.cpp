// The safetensors reader: values of every dtype it reads, the header rules with the message each
// breach gives, sharded checkpoints, and the tiny DeepSeek-V3 reference checkpoint read in place.
#include "ctxpar/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loader/safetensors_builder.h"

namespace ctxpar {
namespace {

using testing::AsBytes;
using testing::SafetensorsHeader;
using testing::SafetensorsImage;
using testing::TensorBytes;
using Json = nlohmann::json;

const std::string kReference = std::string(CTXPAR_REFERENCE_DIR) + "/deepseek_v3_tiny";

// Values with exact bf16 and f16 encodings, their bit patterns written by hand.
std::vector<TensorBytes> EveryDtype() {
  return {
      {"f32", "F32", {2, 2}, AsBytes(std::vector<float>{1.0f, -2.5f, 3.25e-7f, 65504.0f})},
      // bf16 0x3fc0 = 1.5, 0xc2f7 = -123.5, 0x0001 = the smallest subnormal 2^-133.
      {"bf16", "BF16", {3}, AsBytes(std::vector<uint16_t>{0x3fc0, 0xc2f7, 0x0001})},
      // f16 0x3c00 = 1, 0xc500 = -5, 0x0001 = 2^-24, 0x7bff = 65504.
      {"f16", "F16", {4, 1}, AsBytes(std::vector<uint16_t>{0x3c00, 0xc500, 0x0001, 0x7bff})},
      {"f64", "F64", {2}, AsBytes(std::vector<double>{0.1, -1e300})},
      {"empty", "F32", {0, 5}, {}},
      {"scalar", "F32", {}, AsBytes(std::vector<float>{7.0f})},
  };
}

TEST(SafetensorsTest, ReadsEveryDtypeExactly) {
  auto f = SafetensorsFile::FromBytes(SafetensorsImage(EveryDtype(), Json{{"format", "pt"}}));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  ASSERT_EQ(f->tensors().size(), 6u);
  // Data-section order, which is the order written.
  EXPECT_EQ(f->tensors()[0].name, "f32");
  EXPECT_EQ(f->tensors()[3].name, "f64");

  std::vector<float> out(4);
  ASSERT_TRUE(CopyElements(**f->Find("f32"), 0, 4, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.5f, 3.25e-7f, 65504.0f}));
  const SafetensorsTensor* bf16 = *f->Find("bf16");
  EXPECT_EQ(bf16->dtype, DataType::kBF16);
  EXPECT_EQ(bf16->shape, (std::vector<int64_t>{3}));
  ASSERT_TRUE(CopyElements(*bf16, 0, 3, out.data()).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -123.5f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -133));
  ASSERT_TRUE(CopyElements(**f->Find("f16"), 0, 4, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -5.0f, std::ldexp(1.0f, -24), 65504.0f}));
  std::vector<double> wide(2);
  ASSERT_TRUE(CopyElements(**f->Find("f64"), 0, 2, wide.data()).ok());
  EXPECT_EQ(wide, (std::vector<double>{0.1, -1e300}));
  ASSERT_TRUE(CopyElements(**f->Find("f64"), 0, 2, out.data()).ok());
  EXPECT_EQ(out[0], 0.1f);
  EXPECT_TRUE(std::isinf(out[1]));
  EXPECT_EQ((*f->Find("empty"))->num_elements(), 0);
  EXPECT_EQ((*f->Find("scalar"))->num_elements(), 1);

  // Sub-ranges, and ranges outside the tensor.
  ASSERT_TRUE(CopyElements(**f->Find("f16"), 2, 2, out.data()).ok());
  EXPECT_EQ(out[1], 65504.0f);
  Status outside = CopyElements(*bf16, 2, 2, out.data());
  EXPECT_EQ(outside.code(), StatusCode::kOutOfRange);
  EXPECT_NE(outside.message().find("'bf16'"), std::string::npos) << outside.message();
  EXPECT_EQ(CopyElements(*bf16, -1, 1, out.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(f->Find("nope").status().code(), StatusCode::kNotFound);
}

struct Malformed {
  const char* what;
  std::function<void(Json&)> edit;
  StatusCode code;
  const char* message;  // a part of the message
};

// Each breach of the header rules, made on a valid header, and what the reader says.
TEST(SafetensorsTest, RefusesEachHeaderBreachByName) {
  const std::vector<TensorBytes> tensors = EveryDtype();
  const Malformed cases[] = {
      {"overlap",
       [](Json& h) {
         h["bf16"]["data_offsets"] = {14, 20};
       },
       StatusCode::kDataLoss, "overlaps tensor 'f32'"},
      {"size",
       [](Json& h) {
         h["f16"]["shape"] = {4, 2};
       },
       StatusCode::kDataLoss,
       "tensor 'f16': data_offsets [22, 30] hold 8 bytes, but shape [4,2] of F16 needs 16"},
      {"end before begin",
       [](Json& h) {
         h["f64"]["data_offsets"] = {46, 30};
       },
       StatusCode::kDataLoss, "tensor 'f64': data_offsets [46, 30] end before begin"},
      {"past the end",
       [](Json& h) {
         h["scalar"]["shape"] = {2};
         h["scalar"]["data_offsets"] = {46, 54};
       },
       StatusCode::kDataLoss, "tensor 'scalar': data_offsets [46, 54] run past the end"},
      {"negative dim",
       [](Json& h) {
         h["f32"]["shape"] = {-2, -2};
       },
       StatusCode::kDataLoss, "tensor 'f32': shape[0] = -2 is not a non-negative integer"},
      {"float dim",
       [](Json& h) {
         h["f32"]["shape"] = {2.0, 2};
       },
       StatusCode::kDataLoss, "tensor 'f32': shape[0] = 2.0 is not a non-negative integer"},
      {"overflow",
       [](Json& h) {
         h["f32"]["shape"] = {1ull << 40, 1ull << 40};
       },
       StatusCode::kDataLoss, "tensor 'f32': shape [1099511627776,1099511627776] overflows"},
      {"unknown dtype", [](Json& h) { h["f32"]["dtype"] = "F33"; }, StatusCode::kDataLoss,
       "tensor 'f32': dtype 'F33' is not a safetensors dtype"},
      {"unread dtype", [](Json& h) { h["f32"]["dtype"] = "I32"; }, StatusCode::kUnimplemented,
       "tensor 'f32': dtype I32 is not one ctxpar reads"},
      {"extra field", [](Json& h) { h["f64"]["stride"] = 1; }, StatusCode::kDataLoss,
       "tensor 'f64': unknown field 'stride'"},
      {"missing field", [](Json& h) { h["f64"].erase("shape"); }, StatusCode::kDataLoss,
       "tensor 'f64': no 'shape' field"},
      {"offsets", [](Json& h) { h["f64"]["data_offsets"] = {30}; }, StatusCode::kDataLoss,
       "tensor 'f64': data_offsets [30] is not [begin, end]"},
      {"gap", [](Json& h) { h.erase("f16"); }, StatusCode::kDataLoss,
       "tensor 'f64' at [30, 46) leaves the bytes [22, 30) unused"},
      {"uncovered tail", [](Json& h) { h.erase("scalar"); }, StatusCode::kDataLoss,
       "the tensors cover 46 bytes of the 50-byte data section"},
      {"metadata",
       [](Json& h) {
         h["__metadata__"] = {{"format", 1}};
       },
       StatusCode::kDataLoss, "__metadata__ 'format' is not a string"},
      {"entry type", [](Json& h) { h["f64"] = 3; }, StatusCode::kDataLoss,
       "tensor 'f64': the entry is not a JSON object"},
  };
  for (const Malformed& c : cases) {
    Json header = SafetensorsHeader(tensors);
    c.edit(header);
    auto f = SafetensorsFile::FromBytes(SafetensorsImage(header.dump(), tensors));
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_EQ(f.status().code(), c.code) << c.what << ": " << f.status().ToString();
    EXPECT_NE(f.status().message().find(c.message), std::string::npos)
        << c.what << ": " << f.status().message();
  }
}

TEST(SafetensorsTest, RefusesBrokenFraming) {
  const std::vector<TensorBytes> tensors = EveryDtype();
  const std::string good = SafetensorsHeader(tensors).dump();
  auto message = [&](const std::string& header) {
    return SafetensorsFile::FromBytes(SafetensorsImage(header, tensors)).status().message();
  };
  EXPECT_NE(message("[1, 2]").find("does not start with '{'"), std::string::npos);
  EXPECT_NE(message(good.substr(0, good.size() - 1)).find("is not one JSON object"),
            std::string::npos);
  // A key twice: JSON parsers keep one silently; the format forbids it.
  std::string twice = good;
  twice.insert(1, R"("scalar":{"dtype":"F32","shape":[],"data_offsets":[46,50]},)");
  EXPECT_EQ(message(twice), "the header repeats the key 'scalar'");

  std::vector<uint8_t> image = SafetensorsImage(good, tensors);
  const uint64_t too_long = image.size();
  std::memcpy(image.data(), &too_long, 8);
  EXPECT_NE(SafetensorsFile::FromBytes(image).status().message().find("runs past the end of file"),
            std::string::npos);
  const uint64_t huge = SafetensorsFile::kMaxHeaderBytes + 1;
  std::memcpy(image.data(), &huge, 8);
  EXPECT_NE(SafetensorsFile::FromBytes(image).status().message().find("exceeds the limit"),
            std::string::npos);
  EXPECT_EQ(SafetensorsFile::FromBytes({1, 2, 3}).status().code(), StatusCode::kDataLoss);
}

class SafetensorsDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ctxpar_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream(dir_ / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  void WriteText(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(SafetensorsDirTest, OpensShardedCheckpointsByTheirIndex) {
  Write("a.safetensors", SafetensorsImage({{"x", "F32", {1}, AsBytes(std::vector<float>{1})}}));
  Write("b.safetensors", SafetensorsImage({{"y", "F32", {1}, AsBytes(std::vector<float>{2})},
                                           {"z", "F32", {1}, AsBytes(std::vector<float>{3})}}));
  WriteText("model.safetensors.index.json",
            R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors",
                "z": "b.safetensors"}})");
  auto c = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tensors().size(), 3u);
  float v = 0;
  ASSERT_TRUE(CopyElements(**c->Find("z"), 0, 1, &v).ok());
  EXPECT_EQ(v, 3.0f);
  EXPECT_EQ(c->Find("w").status().code(), StatusCode::kNotFound);

  WriteText(
      "model.safetensors.index.json",
      R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}})");
  auto moved = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_EQ(moved.status().error_id(), "CTXPAR-ST-004");
  EXPECT_NE(moved.status().message().find("tensor 'y' is not where"), std::string::npos)
      << moved.status().message();
  WriteText("model.safetensors.index.json",
            R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors", "z": "b.safetensors",
                "w": "a.safetensors"}})");
  auto missing = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_EQ(missing.status().error_id(), "CTXPAR-ST-004");
  EXPECT_NE(missing.status().message().find("puts tensor 'w' in a.safetensors, which does not"),
            std::string::npos)
      << missing.status().message();
  WriteText("model.safetensors.index.json", R"({"weight_map": {"x": "../a.safetensors"}})");
  EXPECT_NE(SafetensorsCheckpoint::Open(dir_.string())
                .status()
                .message()
                .find("which is not a file of the directory"),
            std::string::npos);
}

TEST_F(SafetensorsDirTest, OpensASingleFileAndSaysWhatIsMissing) {
  auto none = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().error_id(), "CTXPAR-ST-001");
  EXPECT_NE(none.status().message().find("model.safetensors"), std::string::npos);
  Write("model.safetensors", {8, 0, 0, 0, 0, 0, 0, 0, '[', ']'});
  auto garbled = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_EQ(garbled.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(garbled.status().error_id(), "CTXPAR-ST-002");
  Write("model.safetensors", SafetensorsImage({{"i", "I32", {1}, {1, 0, 0, 0}}}));
  auto ints = SafetensorsCheckpoint::Open(dir_.string());
  EXPECT_EQ(ints.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ints.status().error_id(), "CTXPAR-ST-003");
  Write("model.safetensors",
        SafetensorsImage({{"x", "BF16", {1}, AsBytes(std::vector<uint16_t>{0x4000})}}));
  auto one = SafetensorsCheckpoint::Open(dir_.string());
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  float v = 0;
  ASSERT_TRUE(CopyElements(**one->Find("x"), 0, 1, &v).ok());
  EXPECT_EQ(v, 2.0f);
}

// The reference checkpoint made by HF transformers, and its golden logits (F64), whose standard
// deviation golden.json states as torch computed it.
TEST(SafetensorsReferenceTest, ReadsTheTinyDeepseekCheckpointInPlace) {
  if (!std::filesystem::exists(kReference + "/model.safetensors")) {
    GTEST_SKIP() << "the tiny DeepSeek-V3 reference checkpoint is not at " << kReference;
  }
  auto c = SafetensorsCheckpoint::Open(kReference);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tensors().size(), 129u);
  const SafetensorsTensor* kv_b = *c->Find("model.layers.2.self_attn.kv_b_proj.weight");
  EXPECT_EQ(kv_b->dtype, DataType::kBF16);
  EXPECT_EQ(kv_b->shape, (std::vector<int64_t>{512, 64}));

  auto golden = SafetensorsFile::Open(kReference + "/golden.safetensors");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const Json meta = Json::parse(std::ifstream(kReference + "/golden.json"));
  for (int i = 0; i < 4; ++i) {
    const SafetensorsTensor* t = *golden->Find("logits_" + std::to_string(i));
    EXPECT_EQ(t->dtype, DataType::kF64);
    std::vector<double> v(t->num_elements());
    ASSERT_TRUE(CopyElements(*t, 0, t->num_elements(), v.data()).ok());
    double mean = 0, var = 0;
    for (double x : v) mean += x;
    mean /= double(v.size());
    for (double x : v) var += (x - mean) * (x - mean);
    const double std_dev = std::sqrt(var / double(v.size() - 1));
    EXPECT_NEAR(std_dev, meta["prompts"][i]["logits_std"].get<double>(), 1e-12) << i;
  }
}

}  // namespace
}  // namespace ctxpar
