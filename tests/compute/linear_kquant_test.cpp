// MatMul (src/compute/linear.h) on the weight types of Gemma 3's Q4_K_M file and its kin (Q5_0,
// Q4_K, Q5_K, Q6_K, and Q8_0 beside them), Q4_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4, and
// the unquantized F32, F16 and BF16, on every ISA this CPU runs (CTXPAR_CPU_ISA forces the lower
// ones): each output bitwise equal to the header's fp32 sequence written out here over
// ctxpar::DequantizeRow's weights (gguf-py's, tests/loader/quant_test.cpp), whatever n, the thread
// count or the path (direct, widened, pieces of long rows, fused products); close to a float64
// reference; and the int8 path refused for the types it does not take. Blocks are random bytes with
// valid fp16 scales, and rows of the real Gemma file where it is present.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compute/linear.h"
#include "compute/random_weights.h"
#include "ctxpar/cpu_features.h"
#include "ctxpar/gguf.h"

namespace ctxpar::compute {
namespace {

const WeightType kTypes[] = {WeightType::kQ5_0,   WeightType::kQ4_K,   WeightType::kQ5_K,
                             WeightType::kQ6_K,   WeightType::kQ8_0,   WeightType::kF32,
                             WeightType::kF16,    WeightType::kBF16,   WeightType::kQ4_0,
                             WeightType::kQ5_1,   WeightType::kQ2_K,   WeightType::kQ3_K,
                             WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kMXFP4};

using test_weights::Matrix;
using test_weights::Name;
using test_weights::Normal;
using test_weights::RandomMatrix;

// Row r's weights as gguf-py dequantizes them (quant.cpp, checked against it bit for bit).
std::vector<float> GgufRow(const QuantMatrix& w, int r) {
  std::vector<float> row(w.cols);
  EXPECT_TRUE(ctxpar::DequantizeRow(GgmlTypeOf(w.type), w.data + std::size_t(r) * w.row_stride,
                                    row.data(), w.cols)
                  .ok());
  return row;
}

// linear.h's fp32 sequence, lane by lane: 16 lanes from +0, two fmas per lane per group of 32 in
// order, then the fixed tree.
float Sequence(const float* w, const float* x, int cols) {
  float acc[16] = {};
  for (int g = 0; g < cols; g += 32) {
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(w[g + l], x[g + l], acc[l]);
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(w[g + 16 + l], x[g + 16 + l], acc[l]);
  }
  float r[8];
  for (int l = 0; l < 8; ++l) r[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) r[l] = r[l] + r[l + 4];
  for (int l = 0; l < 2; ++l) r[l] = r[l] + r[l + 2];
  return r[0] + r[1];
}

struct Expectation {
  std::vector<float> bits;    // [n, rows] by Sequence
  std::vector<double> exact;  // [n, rows] in float64
  std::vector<double> scale;  // [n, rows]: sum |w x|, the size of the float32 rounding
};

Expectation Expect(const QuantMatrix& w, const std::vector<float>& x, int n) {
  Expectation e;
  e.bits.resize(std::size_t(n) * w.rows);
  e.exact.resize(e.bits.size());
  e.scale.resize(e.bits.size());
  for (int r = 0; r < w.rows; ++r) {
    const std::vector<float> row = GgufRow(w, r);
    for (int t = 0; t < n; ++t) {
      const float* xt = x.data() + std::size_t(t) * w.cols;
      double acc = 0.0, mag = 0.0;
      for (int c = 0; c < w.cols; ++c) {
        acc += double(row[c]) * xt[c];
        mag += std::fabs(double(row[c]) * xt[c]);
      }
      const std::size_t i = std::size_t(t) * w.rows + r;
      e.bits[i] = Sequence(row.data(), xt, w.cols);
      e.exact[i] = acc;
      e.scale[i] = mag;
    }
  }
  return e;
}

std::vector<std::string> Isas() {
  std::vector<std::string> names = {"scalar"};
  const CpuIsa best = BestCpuIsa(DetectCpuFeatures());
  if (best >= CpuIsa::kAvx2) names.push_back("avx2");
  if (best >= CpuIsa::kAvx512) names.push_back("avx512");
  return names;
}

class KQuantMatMul : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("CTXPAR_CPU_ISA"); }
  static void Force(const std::string& isa) {
    setenv("CTXPAR_CPU_ISA", isa.c_str(), 1);
    ASSERT_EQ(std::string(MatMulIsa()), isa);
  }
};

void ExpectBits(const std::vector<float>& y, const Expectation& e, int rows, int cols,
                const std::string& what) {
  for (std::size_t i = 0; i < y.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(e.bits[i]))
        << what << " token " << i / rows << " row " << i % rows << ": " << y[i] << " vs "
        << e.bits[i];
    // The worst case of the sequence's rounding: each lane sums cols / 16 products, then the
    // tree adds 4 times, each step off by at most 2^-24 of the sum of magnitudes.
    const double bound = (cols / 16 + 4) * 0x1p-24 * e.scale[i];
    ASSERT_LE(std::fabs(y[i] - e.exact[i]), bound) << what << " i " << i;
  }
}

// Every n from 1 to 17 (each register tile of the direct path and of the widened one, partial
// groups), 50 and 100 (token chunks), on 1 and 3 threads: each output has the sequence's bits.
// 37 rows end in a partial row tile; 2048 columns (ffn_down's) go in pieces of the widened path.
TEST_F(KQuantMatMul, EveryOutputIsTheSequence) {
  std::vector<int> ns;
  for (int n = 1; n <= 17; ++n) ns.push_back(n);
  ns.push_back(50);
  ns.push_back(100);
  auto three = ThreadPool::Create(3);
  ASSERT_TRUE(three.ok());
  for (WeightType type : kTypes) {
    for (int cols : {512, 2048}) {
      std::mt19937 rng(3 + int(type) + cols);
      const int rows = 37;
      const Matrix w = RandomMatrix(type, rows, cols, rng);
      const std::vector<float> x = Normal(std::size_t(ns.back()) * cols, rng);
      const Expectation e = Expect(w.m, x, ns.back());
      for (const std::string& isa : Isas()) {
        Force(isa);
        for (int n : ns) {
          Acts a;
          PrepareActs(ActFormat::kF32, type, x.data(), n, cols, cols, &a);
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), three->get()}) {
            std::vector<float> y(std::size_t(n) * rows);
            MatMul(w.m, a, y.data(), rows, pool);
            ExpectBits(y, e, rows, cols,
                       isa + " " + Name(type) + " cols " + std::to_string(cols) + " n " +
                           std::to_string(n) + (pool ? " 3 threads" : " 1 thread"));
          }
        }
      }
    }
  }
}

// The widened path's spans (about 1 MiB of activations: 405 tokens of 640 columns) widen the
// tiles again; a token's bits stay the sequence's across them.
TEST_F(KQuantMatMul, SpansOfAPrefillKeepTheSequence) {
  const int rows = 21, cols = 640, n = 900;
  auto two = ThreadPool::Create(2);
  ASSERT_TRUE(two.ok());
  for (WeightType type : {WeightType::kQ5_0, WeightType::kQ6_K}) {
    std::mt19937 rng(17 + int(type));
    const int c = type == WeightType::kQ5_0 ? cols : 768;
    const Matrix w = RandomMatrix(type, rows, c, rng);
    const std::vector<float> x = Normal(std::size_t(n) * c, rng);
    const Expectation e = Expect(w.m, x, n);
    Force(Isas().back());
    Acts a;
    PrepareActs(ActFormat::kF32, type, x.data(), n, c, c, &a);
    std::vector<float> y(std::size_t(n) * rows);
    MatMul(w.m, a, y.data(), rows, two->get());
    ExpectBits(y, e, rows, c, Isas().back() + " " + Name(type));
  }
}

// q, k, gate-like products of one activation in one MatMulMany give MatMul's bits.
TEST_F(KQuantMatMul, FusedProductsGiveEachMatMulsBits) {
  const int cols = 768;
  for (const std::string& isa : Isas()) {
    Force(isa);
    for (int n : {1, 5, 40}) {
      std::mt19937 rng(29 + n);
      std::vector<Matrix> w;
      w.push_back(RandomMatrix(WeightType::kQ5_0, 40, cols, rng));
      w.push_back(RandomMatrix(WeightType::kQ4_K, 16, cols, rng));
      w.push_back(RandomMatrix(WeightType::kQ6_K, 23, cols, rng));
      const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
      Acts a;
      PrepareActs(ActFormat::kF32, WeightType::kQ5_0, x.data(), n, cols, cols, &a);
      auto pool = ThreadPool::Create(2);
      ASSERT_TRUE(pool.ok());
      std::vector<std::vector<float>> fused(w.size());
      std::vector<MatMulOut> outs;
      for (std::size_t i = 0; i < w.size(); ++i) {
        fused[i].assign(std::size_t(n) * w[i].m.rows, 0.0f);
        outs.push_back({w[i].m, fused[i].data(), w[i].m.rows});
      }
      MatMulMany(outs, a, pool->get());
      for (std::size_t i = 0; i < w.size(); ++i) {
        ExpectBits(fused[i], Expect(w[i].m, x, n), w[i].m.rows, cols,
                   isa + " fused " + Name(w[i].m.type) + " n " + std::to_string(n));
      }
    }
  }
}

// Rows of the real file, where it is present: each of its matrix types (q, k, gate, up and half
// the v in Q5_0, attn_output and half the ffn_down in Q4_K, the other ffn_down in Q6_K, the
// embedding and the other v in Q8_0), leading rows at n = 1 (decode) and 7 (the widened path).
TEST_F(KQuantMatMul, RowsOfGemma3) {
  const char* home = std::getenv("HOME");
  const std::string path =
      std::string(home ? home : ".") + "/.cache/ctxpar/models/gemma-3-270m-q4_k_m.gguf";
  Expected<GgufFile> file = GgufFile::Open(path);
  if (!file.ok()) GTEST_SKIP() << "no Gemma 3 file at " << path << ": " << file.status().message();
  const std::pair<const char*, GgmlType> tensors[] = {
      {"blk.0.attn_q.weight", GgmlType::kQ5_0},    {"blk.3.attn_output.weight", GgmlType::kQ4_K},
      {"blk.0.ffn_down.weight", GgmlType::kQ6_K},  {"blk.2.ffn_down.weight", GgmlType::kQ4_K},
      {"blk.17.ffn_gate.weight", GgmlType::kQ5_0}, {"blk.0.attn_v.weight", GgmlType::kQ8_0},
      {"token_embd.weight", GgmlType::kQ8_0}};
  for (const auto& [name, ggml_type] : tensors) {
    Expected<const GgufTensor*> t = file->FindTensor(name);
    ASSERT_TRUE(t.ok()) << t.status().message();
    ASSERT_EQ((*t)->type, ggml_type) << name;
    Expected<WeightType> type = WeightTypeFor((*t)->type);
    ASSERT_TRUE(type.ok()) << type.status().message();
    const int rows = 24, cols = static_cast<int>((*t)->row_length());
    const QuantMatrix w{*type, (*t)->data, rows, cols, (*t)->row_bytes()};
    std::mt19937 rng(5);
    const std::vector<float> x = Normal(std::size_t(7) * cols, rng);
    const Expectation e = Expect(w, x, 7);
    for (const std::string& isa : Isas()) {
      Force(isa);
      for (int n : {1, 7}) {
        Acts a;
        PrepareActs(ActFormat::kF32, *type, x.data(), n, cols, cols, &a);
        std::vector<float> y(std::size_t(n) * rows);
        MatMul(w, a, y.data(), rows, nullptr);
        ExpectBits(y, e, rows, cols, isa + " " + name + " n " + std::to_string(n));
      }
    }
  }
}

TEST(KQuantTypes, GgufTypesMapToTheKernelsTypes) {
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ5_0), WeightType::kQ5_0);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ4_K), WeightType::kQ4_K);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ5_K), WeightType::kQ5_K);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ6_K), WeightType::kQ6_K);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ4_1), WeightType::kQ4_1);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ8_0), WeightType::kQ8_0);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kF32), WeightType::kF32);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kF16), WeightType::kF16);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kBF16), WeightType::kBF16);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ4_0), WeightType::kQ4_0);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ5_1), WeightType::kQ5_1);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ2_K), WeightType::kQ2_K);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kQ3_K), WeightType::kQ3_K);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kIQ4_NL), WeightType::kIQ4_NL);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kIQ4_XS), WeightType::kIQ4_XS);
  EXPECT_EQ(*WeightTypeFor(GgmlType::kMXFP4), WeightType::kMXFP4);
  for (GgmlType other : {GgmlType::kIQ2_XXS, GgmlType::kIQ3_S, GgmlType::kQ8_1}) {
    const Expected<WeightType> t = WeightTypeFor(other);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(std::string(GgmlTypeName(other))), std::string::npos)
        << t.status().message();
  }
  EXPECT_EQ(BlockSize(WeightType::kQ4_K), 256);
  EXPECT_EQ(BlockSize(WeightType::kQ5_0), 32);
  EXPECT_EQ(BlockBytes(WeightType::kQ5_0), 22u);
  EXPECT_EQ(BlockBytes(WeightType::kQ4_K), 144u);
  EXPECT_EQ(BlockBytes(WeightType::kQ5_K), 176u);
  EXPECT_EQ(BlockBytes(WeightType::kQ6_K), 210u);
  EXPECT_EQ(BlockBytes(WeightType::kQ2_K), 84u);
  EXPECT_EQ(BlockBytes(WeightType::kQ3_K), 110u);
  EXPECT_EQ(BlockSize(WeightType::kQ2_K), 256);
  EXPECT_EQ(BlockBytes(WeightType::kQ4_0), 18u);
  EXPECT_EQ(BlockBytes(WeightType::kQ5_1), 24u);
  EXPECT_EQ(BlockBytes(WeightType::kIQ4_NL), 18u);
  EXPECT_EQ(BlockBytes(WeightType::kIQ4_XS), 136u);
  EXPECT_EQ(BlockSize(WeightType::kIQ4_XS), 256);
  EXPECT_EQ(BlockBytes(WeightType::kMXFP4), 17u);
  EXPECT_EQ(BlockSize(WeightType::kMXFP4), 32);
  EXPECT_EQ(BlockBytes(WeightType::kF32), 128u);
  EXPECT_EQ(BlockBytes(WeightType::kF16), 64u);
  EXPECT_EQ(BlockBytes(WeightType::kBF16), 64u);
}

// The int8 path takes Q4_1 and Q8_0; for the others it is refused with a Status naming the type,
// and a MatMul called regardless gives NaN, never a plausible wrong product.
TEST(KQuantTypes, Int8ActivationsAreRefusedForTheNewTypes) {
  EXPECT_TRUE(CheckActFormat(ActFormat::kQ8, WeightType::kQ4_1).ok());
  EXPECT_TRUE(CheckActFormat(ActFormat::kQ8, WeightType::kQ8_0).ok());
  for (WeightType type :
       {WeightType::kQ5_0, WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K,
        WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ4_0, WeightType::kQ5_1,
        WeightType::kQ2_K, WeightType::kQ3_K, WeightType::kIQ4_NL, WeightType::kIQ4_XS,
        WeightType::kMXFP4}) {
    EXPECT_TRUE(CheckActFormat(ActFormat::kF32, type).ok());
    const Status s = CheckActFormat(ActFormat::kQ8, type);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(Name(type)), std::string::npos) << s.message();
    std::mt19937 rng(1);
    const Matrix w = RandomMatrix(type, 3, 256, rng);
    const std::vector<float> x = Normal(256, rng);
    Acts a;
    PrepareActs(ActFormat::kQ8, type, x.data(), 1, 256, 256, &a);
    std::vector<float> y(3, 0.0f);
    MatMul(w.m, a, y.data(), 3, nullptr);
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << Name(type);
  }
}

// `--dtype auto` (ActFormat::kInt8) on a type without an int8 repacking: the matrix keeps the fp32
// sequence, bit for bit, alone or fused with a matrix that is repacked. F16 and BF16 do too where
// no bf16 path runs (linear_bf16_test.cpp covers them where one does).
TEST(KQuantTypes, TheMatrixUnitPathRunsTheOthersInFp32) {
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ4_0,
                          WeightType::kQ5_1, WeightType::kQ2_K, WeightType::kQ3_K,
                          WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kMXFP4}) {
    EXPECT_FALSE(Int8Takes(type)) << Name(type);
    if (Bf16Takes(type)) continue;
    std::mt19937 rng(2);
    const Matrix w = RandomMatrix(type, 20, 256, rng);
    const std::vector<float> x = Normal(5 * 256, rng);
    const QuantMatrix packed = WithInt8Pack(w.m, ActFormat::kInt8);
    EXPECT_EQ(packed.int8, nullptr) << Name(type);
    Acts f32, int8;
    PrepareActs(ActFormat::kF32, type, x.data(), 5, 256, 256, &f32);
    PrepareActs(ActFormat::kInt8, type, x.data(), 5, 256, 256, &int8);
    EXPECT_EQ(int8.format, ActFormat::kF32) << Name(type);
    std::vector<float> want(5 * 20), got(5 * 20);
    MatMul(w.m, f32, want.data(), 20, nullptr);
    MatMul(packed, int8, got.data(), 20, nullptr);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << Name(type);
  }
  for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0, WeightType::kQ5_0,
                          WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
    EXPECT_TRUE(Int8Takes(type)) << Name(type);
  }
}

}  // namespace
}  // namespace ctxpar::compute
