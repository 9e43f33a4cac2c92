// What the loader refuses beyond a malformed byte stream: tensors whose data overlap, files that
// Open reports with their catalog IDs and names, and hyperparameters that are not numbers or out
// of their range (a NaN RoPE base, a negative RMS epsilon), read through gguf_hparams.h.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ctxpar/gguf.h"
#include "ctxpar/gguf_hparams.h"
#include "gguf_test_data.h"

namespace ctxpar {
namespace {

using testing::Image;

constexpr uint32_t kF32Type = 0;  // ggml type id

// Two F32 tensors: "a" of `a_len` floats at offset 0, "b" of 8 floats at `b_offset`, then the
// data section (at the default alignment, 32) of `data_bytes`.
Image TwoTensors(uint64_t a_len, uint64_t b_offset, size_t data_bytes) {
  Image img;
  img.Header(3, 2, 0);
  img.Str("a").Put<uint32_t>(1).Put<uint64_t>(a_len).Put(kF32Type).Put<uint64_t>(0);
  img.Str("b").Put<uint32_t>(1).Put<uint64_t>(8).Put(kF32Type).Put<uint64_t>(b_offset);
  while (img.size() % 32 != 0) img.Put<uint8_t>(0);
  for (size_t i = 0; i < data_bytes; ++i) img.Put<uint8_t>(0);
  return img;
}

TEST(GgufChecksTest, TensorsMayNotOverlap) {
  EXPECT_TRUE(GgufFile::FromBytes(TwoTensors(8, 32, 64).bytes()).ok());
  const Status same = GgufFile::FromBytes(TwoTensors(8, 0, 64).bytes()).status();
  EXPECT_EQ(same.code(), StatusCode::kDataLoss);
  EXPECT_EQ(same.message(),
            "tensor 'b' data [0, 32) overlaps tensor 'a' data [0, 32) (offsets in the data "
            "section); each tensor needs bytes of its own");
  const Status partial = GgufFile::FromBytes(TwoTensors(16, 32, 96).bytes()).status();
  EXPECT_EQ(partial.code(), StatusCode::kDataLoss);
  EXPECT_EQ(partial.message(),
            "tensor 'b' data [32, 64) overlaps tensor 'a' data [0, 64) (offsets in the data "
            "section); each tensor needs bytes of its own");
}

std::string WriteTemp(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = ::testing::TempDir() + name + "_" + std::to_string(getpid());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Open names the file and gives the catalog entry of what is wrong with it.
TEST(GgufChecksTest, OpenErrorsNameTheFile) {
  const std::string overlapping = WriteTemp("overlap.gguf", TwoTensors(8, 0, 64).bytes());
  const std::string truncated = WriteTemp("truncated.gguf", {'G', 'G', 'U', 'F', 3, 0});
  const std::string version1 = WriteTemp("v1.gguf", Image().Header(1, 0, 0).bytes());
  auto f = GgufFile::Open(overlapping);
  EXPECT_EQ(f.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(f.status().error_id(), "CTXPAR-GGUF-002");
  EXPECT_EQ(f.status().message(), "The model file '" + overlapping +
                                      "' is not a valid GGUF file: tensor 'b' data [0, 32) "
                                      "overlaps tensor 'a' data [0, 32) (offsets in the data "
                                      "section); each tensor needs bytes of its own.");
  f = GgufFile::Open(truncated);
  EXPECT_EQ(f.status().error_id(), "CTXPAR-GGUF-002");
  EXPECT_EQ(f.status().message(), "The model file '" + truncated +
                                      "' is not a valid GGUF file: version at offset 4 needs 4 "
                                      "bytes but only 2 remain (file size 6).");
  f = GgufFile::Open(version1);
  EXPECT_EQ(f.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(f.status().error_id(), "CTXPAR-GGUF-003");
  EXPECT_NE(f.status().message().find("'" + version1 + "' is a GGUF file that ctxpar cannot read"),
            std::string::npos);
  for (const std::string& p : {overlapping, truncated, version1}) std::remove(p.c_str());
}

// A GGUF image of metadata keys only; each writes its type id and value.
Image Keys(const std::vector<std::pair<std::string, std::function<void(Image&)>>>& keys) {
  Image img;
  img.Header(3, 0, keys.size());
  for (const auto& [name, put] : keys) {
    img.Str(name);
    put(img);
  }
  return img;
}

GgufFile Hparams() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto f = GgufFile::FromBytes(
      Keys({{"x.nan", [&](Image& i) { i.Put<uint32_t>(6).Put(nan); }},
            {"x.negative", [](Image& i) { i.Put<uint32_t>(6).Put(-1e-5f); }},
            {"x.inf", [&](Image& i) { i.Put<uint32_t>(12).Put(inf); }},
            {"x.huge_f64", [](Image& i) { i.Put<uint32_t>(12).Put(1e300); }},
            {"x.eps", [](Image& i) { i.Put<uint32_t>(6).Put(1e-5f); }},
            {"x.base", [](Image& i) { i.Put<uint32_t>(12).Put(500000.0); }},
            {"x.zero", [](Image& i) { i.Put<uint32_t>(4).Put<uint32_t>(0); }},
            {"x.big", [](Image& i) { i.Put<uint32_t>(11).Put<int64_t>(int64_t{1} << 40); }},
            {"x.count", [](Image& i) { i.Put<uint32_t>(4).Put<uint32_t>(576); }},
            {"x.text", [](Image& i) { i.Put<uint32_t>(8).Str("1e4"); }}})
          .bytes());
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(*f);
}

void ExpectRefused(const Status& s, const std::string& message) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.error_id(), "CTXPAR-GGUF-006");
  EXPECT_EQ(s.message(), "The model file '(in-memory GGUF)' has " + message);
}

TEST(GgufChecksTest, FloatHyperparametersMustBeFiniteAndInRange) {
  const GgufFile f = Hparams();
  ExpectRefused(ReadFloatHparam(f, "x.nan", kRopeFreqBaseRange).status(),
                "x.nan = nan, but it must be a finite number in (1, 1e12].");
  ExpectRefused(ReadFloatHparam(f, "x.negative", kRmsEpsilonRange).status(),
                "x.negative = -9.999999747378752e-06, but it must be a finite number in (0, 1).");
  ExpectRefused(ReadFloatHparam(f, "x.inf", kRmsEpsilonRange).status(),
                "x.inf = inf, but it must be a finite number in (0, 1).");
  ExpectRefused(ReadFloatHparam(f, "x.huge_f64", kRopeFreqBaseRange).status(),
                "x.huge_f64 = 1e+300, but it must be a finite number in (1, 1e12].");
  EXPECT_FLOAT_EQ(*ReadFloatHparam(f, "x.eps", kRmsEpsilonRange), 1e-5f);
  EXPECT_EQ(*ReadFloatHparam(f, "x.base", kRopeFreqBaseRange), 500000.0f);
  EXPECT_EQ(*ReadFloatHparam(f, "x.absent", kRopeFreqBaseRange, 10000.0f), 10000.0f);
  const Status absent = ReadFloatHparam(f, "x.absent", kRopeFreqBaseRange).status();
  EXPECT_EQ(absent.error_id(), "CTXPAR-GGUF-004");
  EXPECT_EQ(ReadFloatHparam(f, "x.text", kRopeFreqBaseRange).status().error_id(),
            "CTXPAR-GGUF-005");
}

TEST(GgufChecksTest, IntegerHyperparametersMustBeInRange) {
  const GgufFile f = Hparams();
  ExpectRefused(ReadIntHparam(f, "x.zero", 1, 1 << 30).status(),
                "x.zero = 0, but it must be in [1, 1073741824].");
  ExpectRefused(ReadIntHparam(f, "x.big", 1, 1 << 30).status(),
                "x.big = 1099511627776, but it must be in [1, 1073741824].");
  EXPECT_EQ(*ReadIntHparam(f, "x.count", 1, 1 << 30), 576);
  EXPECT_EQ(*ReadIntHparam(f, "x.absent", 1, 1 << 30, 64), 64);
  ExpectRefused(HparamError(f, "x.count", 576, "it must be divisible by x.heads (7)"),
                "x.count = 576, but it must be divisible by x.heads (7).");
}

}  // namespace
}  // namespace ctxpar
