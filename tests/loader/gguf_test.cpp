// The GGUF reader against what gguf-py wrote and read (tests/data/gguf/golden.json and
// model_golden.json, made by tools/golden/gguf/make_goldens.py), and its errors on malformed
// images built here byte by byte from the GGUF specification.
#include "ctxpar/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gguf_test_data.h"

namespace ctxpar {
namespace {

using nlohmann::json;

const std::string& kDir = testing::kGgufDataDir;

using testing::Image;
using testing::ReadBytes;
using testing::ReadFloats;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

json ToJson(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<GgufValue>>) {
          json out = json::array();
          for (const GgufValue& e : x) out.push_back(ToJson(e));
          return out;
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          json out = json::array();
          for (bool b : x) out.push_back(b);
          return out;
        } else if constexpr (std::is_same_v<T, float>) {
          return static_cast<double>(x);
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          json out = json::array();
          for (float f : x) out.push_back(static_cast<double>(f));
          return out;
        } else {
          return json(x);
        }
      },
      v.data());
}

void ExpectNearRow(const float* got, const std::vector<float>& want, size_t first, size_t n,
                   const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    const float w = want[first + i];
    EXPECT_NEAR(got[i], w, 1e-6 * std::fabs(w) + 1e-30) << what << " element " << i;
  }
}

void CheckFixture(const GgufFile& f, const json& want) {
  EXPECT_EQ(f.version(), want.at("version").get<uint32_t>());
  EXPECT_EQ(f.alignment(), want.at("alignment").get<uint32_t>());
  EXPECT_EQ(f.data_offset(), want.at("data_offset").get<uint64_t>());

  const json& metadata = want.at("metadata");
  ASSERT_EQ(f.metadata().size(), metadata.size());
  for (size_t i = 0; i < metadata.size(); ++i) {
    const std::string key = metadata[i].at("key");
    EXPECT_EQ(f.metadata()[i].key, key) << "metadata entry " << i;
    const GgufValue* v = f.Find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->TypeName(), metadata[i].at("type").get<std::string>()) << key;
    EXPECT_EQ(ToJson(*v), metadata[i].at("value")) << key;
  }

  const std::vector<float> golden = ReadFloats(kDir + want.at("tensor_data").get<std::string>());
  const json& tensors = want.at("tensors");
  ASSERT_EQ(f.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& w = tensors[i];
    const GgufTensor& t = f.tensors()[i];
    const std::string name = w.at("name");
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(GgmlTypeName(t.type), w.at("type").get<std::string>()) << name;
    EXPECT_EQ(t.shape, w.at("shape").get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(f.data_offset() + t.offset, w.at("offset").get<uint64_t>()) << name;
    EXPECT_EQ(t.size_bytes, w.at("nbytes").get<uint64_t>()) << name;
    EXPECT_EQ(t.data - f.tensors()[0].data,
              static_cast<ptrdiff_t>(t.offset - f.tensors()[0].offset))
        << name;
    auto found = f.FindTensor(name);
    ASSERT_TRUE(found.ok()) << name;
    EXPECT_EQ(*found, &t);

    if (!w.contains("golden_first")) {
      EXPECT_EQ(DequantizeTensor(t).status().code(), StatusCode::kUnimplemented) << name;
      continue;
    }
    const size_t first = w.at("golden_first");
    auto all = DequantizeTensor(t);
    ASSERT_TRUE(all.ok()) << name << ": " << all.status().ToString();
    ASSERT_EQ(static_cast<int64_t>(all->size()), t.num_elements());
    ExpectNearRow(all->data(), golden, first, all->size(), name);
    // The last row alone, as a tensor-parallel shard reads it.
    const int64_t last = t.num_rows() - 1;
    std::vector<float> row(static_cast<size_t>(t.row_length()));
    ASSERT_TRUE(DequantizeRows(t, last, 1, row.data()).ok());
    ExpectNearRow(row.data(), golden, first + last * t.row_length(), row.size(),
                  name + " last row");
    EXPECT_EQ(DequantizeRows(t, last, 2, row.data()).code(), StatusCode::kOutOfRange) << name;
  }
}

TEST(GgufFixtureTest, OpenMatchesGgufPy) {
  const json manifest = ReadJson(kDir + "golden.json");
  ASSERT_EQ(manifest.at("fixtures").size(), 2u);
  for (const json& fixture : manifest.at("fixtures")) {
    SCOPED_TRACE(fixture.at("file").get<std::string>());
    auto f = GgufFile::Open(kDir + fixture.at("file").get<std::string>());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    CheckFixture(*f, fixture);
  }
}

TEST(GgufFixtureTest, FromBytesMatchesGgufPy) {
  const json manifest = ReadJson(kDir + "golden.json");
  for (const json& fixture : manifest.at("fixtures")) {
    SCOPED_TRACE(fixture.at("file").get<std::string>());
    auto f = GgufFile::FromBytes(ReadBytes(kDir + fixture.at("file").get<std::string>()));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    CheckFixture(*f, fixture);
    // Copies share the bytes: tensor data stays valid after the original is gone.
    std::optional<GgufFile> copy(*f);
    f = Status(InvalidArgument("dropped"));
    EXPECT_TRUE(DequantizeTensor(*copy->FindTensor("f32.vector").value()).ok());
  }
}

TEST(GgufFixtureTest, TypedGetters) {
  auto f = GgufFile::Open(kDir + "fixture_v3.gguf.bin");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f->GetString("general.architecture"), "testarch");
  EXPECT_EQ(*f->GetU32("test.u32"), 4000000000u);
  EXPECT_EQ(*f->GetI32("test.i32"), -2000000000);
  EXPECT_EQ(*f->GetU64("test.u64"), 18000000000000000000ull);
  EXPECT_EQ(*f->GetF32("test.f32"), 3.14159f);
  EXPECT_EQ(*f->GetBool("test.bool_true"), true);
  EXPECT_EQ(*f->GetInteger("test.u8"), 200);
  EXPECT_EQ(*f->GetInteger("test.i64"), -9000000000000000000ll);
  EXPECT_EQ(*f->GetFloat("test.f32"), static_cast<double>(3.14159f));
  EXPECT_EQ(*f->GetFloat("test.f64"), -2.718281828459045e-300);
  EXPECT_EQ(*f->GetArray<std::string>("test.array.string"),
            (std::vector<std::string>{"<s>", "", "\xC4\xA0the", "a b"}));
  EXPECT_EQ(*f->GetArray<int32_t>("test.array.i32"),
            (std::vector<int32_t>{-2147483648, 0, 2147483647}));
  EXPECT_EQ((*f->GetArrayRef<bool>("test.array.bool"))->size(), 3u);

  // Lookup errors name the file and carry their catalog IDs.
  const std::string file = "The model file '" + kDir + "fixture_v3.gguf.bin' ";
  auto missing = f->GetU32("no.such.key");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().error_id(), "CTXPAR-GGUF-004");
  EXPECT_EQ(missing.status().message(), file + "has no metadata key no.such.key.");
  auto wrong = f->GetU32("test.string");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.status().error_id(), "CTXPAR-GGUF-005");
  EXPECT_EQ(wrong.status().message(), file + "stores test.string as string, but it must be u32.");
  EXPECT_EQ(f->GetArray<float>("test.array.i32").status().message(),
            file + "stores test.array.i32 as array[i32], but it must be array[f32].");
  EXPECT_EQ(f->GetInteger("test.u64").status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(f->GetInteger("test.u64").status().error_id(), "CTXPAR-GGUF-006");
  EXPECT_EQ(f->GetInteger("test.f32").status().message(),
            file + "stores test.f32 as f32, but it must be an integer.");
  EXPECT_EQ(f->FindTensor("nope").status().error_id(), "CTXPAR-GGUF-007");
  EXPECT_EQ(f->FindTensor("nope").status().message(), file + "has no tensor nope.");
}

TEST(GgufOpenTest, MissingFileAndDirectory) {
  auto missing = GgufFile::Open(kDir + "does-not-exist.gguf");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().error_id(), "CTXPAR-GGUF-001");
  EXPECT_EQ(missing.status().message(), "Cannot open the model file '" + kDir +
                                            "does-not-exist.gguf': No such file or directory.");
  auto directory = GgufFile::Open(kDir);
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(directory.status().message(),
            "Cannot open the model file '" + kDir + "': it is a directory.");
}

Status Parse(const Image& image) { return GgufFile::FromBytes(image.bytes()).status(); }

void ExpectDataLoss(const Image& image, const std::string& message) {
  const Status s = Parse(image);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_EQ(s.message(), message);
}

TEST(GgufMalformedTest, HeaderErrors) {
  ExpectDataLoss(Image(), "magic at offset 0 needs 4 bytes but only 0 remain (file size 0)");
  ExpectDataLoss(Image().Raw("GGUG").Put<uint32_t>(3),
                 "magic at offset 0 is 47 47 55 47, not 'GGUF'");
  ExpectDataLoss(Image().Raw("GGUF").Put<uint16_t>(3),
                 "version at offset 4 needs 4 bytes but only 2 remain (file size 6)");
  ExpectDataLoss(Image().Header(7, 0, 0),
                 "version at offset 4 is 7; GGUF versions 2 and 3 are supported");
  EXPECT_EQ(Parse(Image().Header(1, 0, 0)).code(), StatusCode::kUnimplemented);
  const Status big_endian = Parse(Image().Raw("GGUF").Put<uint32_t>(0x03000000));
  EXPECT_EQ(big_endian.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(big_endian.message(),
            "GGUF version field at offset 4 reads 3 as big-endian: big-endian GGUF files are not "
            "supported");
  ExpectDataLoss(Image().Header(3, 0, 1ull << 60),
                 "metadata key count 1152921504606846976 at offset 16 exceeds what the 0 bytes "
                 "remaining can hold");
  ExpectDataLoss(Image().Header(3, 5, 0),
                 "tensor count 5 at offset 8 exceeds what the 0 bytes remaining after the "
                 "metadata can hold");
  EXPECT_TRUE(Parse(Image().Header(2, 0, 0)).ok());
}

TEST(GgufMalformedTest, MetadataErrors) {
  Image huge_key;
  huge_key.Header(3, 0, 1).Put<uint64_t>(9000000000000000000ull).Raw("xxxxx");
  ExpectDataLoss(huge_key,
                 "metadata key #0 name string length 9000000000000000000 at offset 24 exceeds "
                 "the 5 bytes remaining (file size 37)");

  Image bad_type;
  bad_type.Header(3, 0, 1).Str("k").Put<uint32_t>(13).Put<uint8_t>(0);
  ExpectDataLoss(bad_type,
                 "metadata key #0 ('k') value type 13 at offset 33 is not a GGUF type (0..12)");

  Image truncated_value;
  truncated_value.Header(3, 0, 1).Str("k").Put<uint32_t>(4).Put<uint16_t>(1);
  ExpectDataLoss(truncated_value,
                 "metadata key #0 ('k') at offset 37 needs 4 bytes but only 2 remain (file size "
                 "39)");

  Image huge_array;
  huge_array.Header(3, 0, 1).Str("arr").Put<uint32_t>(9).Put<uint32_t>(8).Put<uint64_t>(1ull << 62);
  huge_array.Str("a");
  ExpectDataLoss(huge_array,
                 "metadata key #0 ('arr') array count 4611686018427387904 of string at offset 43 "
                 "exceeds the 9 bytes remaining (file size 60)");

  Image huge_element;
  huge_element.Header(3, 0, 1).Str("arr").Put<uint32_t>(9).Put<uint32_t>(8).Put<uint64_t>(2);
  huge_element.Str("a").Put<uint64_t>(~0ull);
  ExpectDataLoss(huge_element,
                 "metadata key #0 ('arr') element 1 string length 18446744073709551615 at offset "
                 "60 exceeds the 0 bytes remaining (file size 68)");

  Image bad_bool;
  bad_bool.Header(3, 0, 1).Str("b").Put<uint32_t>(7).Put<uint8_t>(2);
  ExpectDataLoss(bad_bool, "metadata key #0 ('b') bool at offset 37 is 2, not 0 or 1");

  Image duplicate;
  duplicate.Header(3, 0, 2).Str("k").Put<uint32_t>(0).Put<uint8_t>(1);
  duplicate.Str("k").Put<uint32_t>(0).Put<uint8_t>(2);
  ExpectDataLoss(duplicate, "metadata key #1 ('k') at offset 47 repeats an earlier key");

  Image deep;
  deep.Header(3, 0, 1).Str("d").Put<uint32_t>(9);
  for (int i = 0; i < 9; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  deep.Put<uint32_t>(0).Put<uint64_t>(0);
  const Status s = Parse(deep);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("nests arrays deeper than 8"), std::string::npos) << s.message();

  Image alignment;
  alignment.Header(3, 0, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(48);
  ExpectDataLoss(alignment, "general.alignment is 48; it must be a power of two");
  Image alignment_type;
  alignment_type.Header(3, 0, 1).Str("general.alignment").Put<uint32_t>(10).Put<uint64_t>(64);
  ExpectDataLoss(alignment_type, "general.alignment has type u64; it must be u32");
}

// One tensor info, then the data section at the default alignment (32).
Image OneTensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                size_t data_bytes) {
  Image img;
  img.Header(3, 1, 0).Str(name).Put<uint32_t>(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) img.Put(d);
  img.Put(type).Put(offset);
  while (img.size() % 32 != 0) img.Put<uint8_t>(0);
  for (size_t i = 0; i < data_bytes; ++i) img.Put<uint8_t>(0);
  return img;
}

TEST(GgufMalformedTest, TensorErrors) {
  // Header 24 + name 8+5 + n_dims 4 + 2 dims 16 + type 4 + offset 8 = 69, data at 96.
  EXPECT_TRUE(Parse(OneTensor("w.q41", {64, 2}, 3, 0, 80)).ok());
  ExpectDataLoss(OneTensor("w.q41", {64, 2}, 3, 0, 79),
                 "tensor 'w.q41' data [96, 176) past end of file (size 175)");
  ExpectDataLoss(OneTensor("w.q41", {64, 2}, 3, 32, 80),
                 "tensor 'w.q41' data [128, 208) past end of file (size 176)");
  ExpectDataLoss(OneTensor("w.q41", {64, 2}, 3, 3, 80),
                 "tensor #0 ('w.q41') data offset 3 at offset 61 is not a multiple of the "
                 "alignment 32");
  ExpectDataLoss(OneTensor("w.q41", {48, 2}, 3, 0, 80),
                 "tensor #0 ('w.q41') ne[0] = 48 is not a multiple of the Q4_1 block size 32");
  ExpectDataLoss(OneTensor("w.q41", {64, 2}, 99, 0, 80),
                 "tensor #0 ('w.q41') type id 99 at offset 57 is not a ggml type");
  ExpectDataLoss(OneTensor("w.q41", {1, 1, 1, 1, 1}, 0, 0, 0),
                 "tensor #0 ('w.q41') dimension count 5 at offset 37 exceeds 4");
  ExpectDataLoss(OneTensor("w.q41", {1ull << 63, 2}, 0, 0, 0),
                 "tensor #0 ('w.q41') ne[0] = 9223372036854775808 at offset 41 exceeds int64");
  ExpectDataLoss(OneTensor("w.q41", {1ull << 40, 1ull << 40}, 0, 0, 0),
                 "tensor #0 ('w.q41') element count overflows int64 at ne[1] = 1099511627776 "
                 "(offset 49)");
  ExpectDataLoss(OneTensor("w.f32", {1ull << 62, 1}, 0, 0, 0),
                 "tensor #0 ('w.f32') byte size overflows int64 (4611686018427387904 elements of "
                 "F32)");
  ExpectDataLoss(OneTensor("w.f32", {1ull << 60}, 0, ~0ull << 5, 0),
                 "tensor 'w.f32' data at 64 + 18446744073709551584 (4611686018427387904 bytes) "
                 "overflows the file offsets (size 64)");
}

// The real model: skipped unless CTXPAR_MODEL names SmolLM2-135M-Instruct.Q4_1.gguf.
TEST(GgufModelTest, SmolLm2MatchesGgufPy) {
  const char* path = std::getenv("CTXPAR_MODEL");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "CTXPAR_MODEL is not set (scripts/test.sh sets it; scripts/fetch-model.sh "
                    "downloads the model and prints its path)";
  }
  const json want = ReadJson(kDir + "model_golden.json");
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->file_size(), want.at("size").get<uint64_t>()) << "not the file of the goldens";
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(f->version(), want.at("version").get<uint32_t>());
  EXPECT_EQ(f->alignment(), want.at("alignment").get<uint32_t>());
  EXPECT_EQ(f->data_offset(), want.at("data_offset").get<uint64_t>());
  EXPECT_EQ(f->metadata().size(), want.at("metadata_count").get<size_t>());
  for (const auto& [key, w] : want.at("scalars").items()) {
    const GgufValue* v = f->Find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->TypeName(), w.at("type").get<std::string>()) << key;
    EXPECT_EQ(ToJson(*v), w.at("value")) << key;
  }
  for (const auto& [key, w] : want.at("arrays").items()) {
    const GgufValue* v = f->Find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->TypeName(), w.at("type").get<std::string>()) << key;
    const json all = ToJson(*v);
    ASSERT_EQ(all.size(), w.at("size").get<size_t>()) << key;
    const json& first = w.at("first");
    const json& last = w.at("last");
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(all[i], first[i]) << key << "[" << i << "]";
    for (size_t i = 0; i < last.size(); ++i) {
      EXPECT_EQ(all[all.size() - last.size() + i], last[i]) << key << " tail " << i;
    }
  }
  EXPECT_EQ(f->GetU32("llama.attention.head_count").value(), 9u);
  EXPECT_EQ(f->GetU32("llama.attention.head_count_kv").value(), 3u);
  EXPECT_EQ(f->GetU32("llama.block_count").value(), 30u);

  const json& tensors = want.at("tensors");
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensor& t = f->tensors()[i];
    EXPECT_EQ(t.name, tensors[i].at("name").get<std::string>());
    EXPECT_EQ(GgmlTypeName(t.type), tensors[i].at("type").get<std::string>()) << t.name;
    EXPECT_EQ(t.shape, tensors[i].at("shape").get<std::vector<int64_t>>()) << t.name;
    EXPECT_EQ(f->data_offset() + t.offset, tensors[i].at("offset").get<uint64_t>()) << t.name;
    EXPECT_EQ(t.size_bytes, tensors[i].at("nbytes").get<uint64_t>()) << t.name;
  }
  for (const json& r : want.at("rows")) {
    const std::string name = r.at("tensor");
    const int64_t row = r.at("row");
    auto t = f->FindTensor(name);
    ASSERT_TRUE(t.ok()) << name;
    const std::vector<float> values = r.at("values").get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(values.size()), (*t)->row_length()) << name;
    std::vector<float> got(values.size());
    ASSERT_TRUE(DequantizeRows(**t, row, 1, got.data()).ok()) << name;
    ExpectNearRow(got.data(), values, 0, values.size(), name + " row " + std::to_string(row));
  }
}

}  // namespace
}  // namespace ctxpar
