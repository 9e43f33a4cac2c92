// PartialAttentionCpu against a float64 reference, on every SIMD path this CPU has, for both page
// formats (attention.h): kRows for GQA, MHA and MLA, kTiles16 for GQA and MHA.
//
// Tolerances: O is a convex combination of V rows, so its error is measured against the largest
// |V| (1 here): within 1e-5, except bf16 KV on the avx512_bf16 and amx paths within 1e-2 (they
// round Q and the softmax weights to bf16, attention.h; the errors seen are 3e-4..2e-3). The lse is
// compared with the same bounds relative to max(1, |lse|). fp8 KV (e4m3fn and e5m2) is widened
// exactly on every path, so the reference reads the same fp8 values and the bound is fp32's 1e-5;
// the widening itself is held bitwise to dtype.h's conversions for all 256 codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "attention/attention_problem.h"
#include "ctxpar/attention.h"
#include "ctxpar/cpu_features.h"
#include "ctxpar/dtype.h"

namespace ctxpar {
namespace {

using testing::Problem;
using testing::Shape;

constexpr KvPageFormat kTiles16 = KvPageFormat::kTiles16;
constexpr DataType kE4M3 = DataType::kF8E4M3;
constexpr DataType kE5M2 = DataType::kF8E5M2;
const std::initializer_list<DataType> kKvTypes = {DataType::kF32, DataType::kBF16, kE4M3, kE5M2};

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> out;
  const CpuIsa best = BestCpuIsa(DetectCpuFeatures());
  for (CpuIsa isa :
       {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (isa <= best) out.push_back(isa);
  }
  return out;
}

class PartialAttention : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    setenv("CTXPAR_CPU_ISA", std::string(CpuIsaName(GetParam())).c_str(), 1);
  }
  void TearDown() override { unsetenv("CTXPAR_CPU_ISA"); }

  // Only the avx512_bf16 and amx paths round (Q and P to bf16), for bf16 KV and for fp8 KV in
  // kTiles16 pages; the others widen the KV exactly.
  double Tol(const Shape& s) const {
    const bool rounds = s.dtype == DataType::kBF16 ||
                        (s.dtype != DataType::kF32 && s.format == KvPageFormat::kTiles16);
    return rounds && GetParam() >= CpuIsa::kAvx512Bf16 ? 1e-2 : 1e-5;
  }

  // Decode rows, one per sequence, on one thread and on three, with split-KV off and on: chunks
  // of whole 16-key tiles (16, 48) and chunks that end inside one (24, 40).
  void CheckDecode(Problem& prob) {
    prob.DecodeRows();
    for (int split : {0, 16, 24, 40, 48}) {
      for (int threads : {1, 3}) {
        const std::string what =
            "split " + std::to_string(split) + " threads " + std::to_string(threads);
        PartialAttentionParams p = prob.Params();
        p.num_threads = threads;
        p.split_kv_keys = split;
        const Status st = PartialAttentionCpu(p);
        ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
        prob.Check(p, Tol(prob.shape()), what);
      }
    }
  }
  void RunDecode(const Shape& shape, const std::vector<int>& lens, uint32_t seed) {
    Problem prob(shape, lens, seed);
    CheckDecode(prob);
  }

  // Three sequences; every token of the last two is a row that sees the keys up to itself.
  void RunPrefill(const Shape& shape, std::initializer_list<int> splits, uint32_t seed) {
    Problem prob(shape, {10, 23, 9}, seed);
    prob.AddRow(0, 10);
    for (int t = 1; t <= 23; ++t) prob.AddRow(1, t);
    for (int t = 0; t <= 9; ++t) prob.AddRow(2, t);
    for (int split : splits) {
      PartialAttentionParams p = prob.Params();
      p.num_threads = 2;
      p.split_kv_keys = split;
      const Status st = PartialAttentionCpu(p);
      ASSERT_TRUE(st.ok()) << st.ToString();
      prob.Check(p, Tol(shape), "prefill split " + std::to_string(split));
    }
  }

  // One sequence of 3000 keys: split-KV chosen automatically over all hardware threads.
  void RunLongSequence(const Shape& shape, uint32_t seed) {
    Problem prob(shape, {3000}, seed);
    prob.DecodeRows();
    PartialAttentionParams p = prob.Params();
    p.num_threads = 0;
    const Status st = PartialAttentionCpu(p);
    ASSERT_TRUE(st.ok()) << st.ToString();
    prob.Check(p, Tol(shape), "all threads");
  }
};

const std::vector<int> kMixedLens = {0, 1, 5, 16, 37, 100, 300};

// O and lse of row `row` of p computed alone (a one-row call on one thread).
std::vector<float> RowAlone(const PartialAttentionParams& p, int row, int heads, int dqk, int dv) {
  std::vector<float> out(static_cast<size_t>(heads) * (dv + 1));
  PartialAttentionParams one = p;
  one.q = p.q + static_cast<int64_t>(row) * heads * dqk;
  one.o = out.data();
  one.lse = out.data() + static_cast<size_t>(heads) * dv;
  one.row_seq = p.row_seq + row;
  one.row_kv_len = p.row_kv_len + row;
  if (p.row_kv_start != nullptr) one.row_kv_start = p.row_kv_start + row;
  one.num_rows = 1;
  one.num_threads = 1;
  EXPECT_TRUE(PartialAttentionCpu(one).ok());
  return out;
}

// Bitwise: every row of a call with split_kv_keys > 0 equals the same row computed alone, so
// the other rows, the thread count and whether the row is a decode row or one token of a causal
// prefill (rows 0-5 decode, then every token of sequence 6) change no bit; nor do the rows of a
// DCP rank's prefill (sequence 7: lengths that repeat, as a rank's local rows do, then fall),
// which kTiles16 takes several at a time.
void CheckRowsAreBatchInvariant(const Shape& shape, int split, uint32_t seed) {
  Problem prob(shape, {0, 1, 37, 100, 300, 1000, 90, 70}, seed);
  for (int s = 0; s < 6; ++s) prob.AddRow(s, std::vector<int>{0, 1, 37, 100, 300, 1000}[s]);
  for (int t = 0; t <= 90; ++t) prob.AddRow(6, t);
  for (int len : {20, 20, 21, 21, 22, 23, 23, 23, 47, 48, 48, 41, 70, 70}) prob.AddRow(7, len);
  const int heads = shape.num_q_heads, dqk = shape.head_dim_qk, dv = shape.head_dim_v;
  for (int threads : {1, 2, 3}) {
    PartialAttentionParams p = prob.Params();
    p.num_threads = threads;
    p.split_kv_keys = split;
    ASSERT_TRUE(PartialAttentionCpu(p).ok());
    for (int row = 0; row < p.num_rows; ++row) {
      const std::vector<float> alone = RowAlone(p, row, heads, dqk, dv);
      const float* o = p.o + static_cast<int64_t>(row) * heads * dv;
      const float* lse = p.lse + static_cast<int64_t>(row) * heads;
      const std::string what = "split " + std::to_string(split) + " threads " +
                               std::to_string(threads) + " row " + std::to_string(row);
      ASSERT_EQ(std::memcmp(o, alone.data(), sizeof(float) * heads * dv), 0) << what;
      ASSERT_EQ(std::memcmp(lse, alone.data() + heads * dv, sizeof(float) * heads), 0) << what;
    }
  }
}

TEST_P(PartialAttention, RowsAreBatchInvariant) {
  for (int split : {16, 40, 64}) {
    CheckRowsAreBatchInvariant({9, 3, 64, 64, false, DataType::kF32, 16, kTiles16}, split, 40);
    CheckRowsAreBatchInvariant({8, 2, 128, 128, false, DataType::kBF16, 16, kTiles16}, split, 41);
    // amx's blocks of (row, head) pairs: 5 rows of 3 heads in one; 4 rows of 7 in 16 and 12.
    CheckRowsAreBatchInvariant({9, 3, 64, 64, false, DataType::kBF16, 16, kTiles16}, split, 45);
    CheckRowsAreBatchInvariant({14, 2, 64, 64, false, DataType::kBF16, 16, kTiles16}, split, 46);
    CheckRowsAreBatchInvariant({6, 2, 64, 64, false, DataType::kF32, 8}, split, 42);
    CheckRowsAreBatchInvariant({9, 3, 64, 64, false, kE4M3, 16, kTiles16}, split, 43);
    CheckRowsAreBatchInvariant({6, 2, 64, 64, false, kE5M2, 8}, split, 44);
  }
}

// Bitwise: a decode row on 2-4 threads equals the row on one. Its few tasks (one per chunk) split
// by KV heads there, heads dividing unevenly among the threads; each head's arithmetic is its
// own, so no bit may move: every KV type, both page formats, contexts of one chunk and of many.
TEST_P(PartialAttention, DecodeRowSplitByKvHeadsIsBitwise) {
  for (const Shape& shape :
       {Shape{9, 3, 64, 64, false, DataType::kBF16, 16, kTiles16},
        Shape{32, 8, 128, 128, false, DataType::kBF16, 16, kTiles16},
        Shape{10, 5, 64, 64, false, DataType::kF32, 16, kTiles16},
        Shape{9, 3, 64, 64, false, kE4M3, 16, kTiles16},
        Shape{8, 2, 64, 64, false, kE5M2, 32, kTiles16},
        Shape{9, 3, 64, 64, false, DataType::kF32, 8},
        Shape{6, 2, 64, 64, false, DataType::kBF16, 16}, Shape{8, 4, 64, 64, false, kE4M3, 16}}) {
    const int heads = shape.num_q_heads, dqk = shape.head_dim_qk, dv = shape.head_dim_v;
    for (int len : {120, 300, 1000}) {
      Problem prob(shape, {len}, 70 + len);
      prob.DecodeRows();
      for (int split : {64, 256}) {
        for (int threads : {2, 3, 4}) {
          PartialAttentionParams p = prob.Params();
          p.split_kv_keys = split;
          p.num_threads = threads;
          ASSERT_TRUE(PartialAttentionCpu(p).ok());
          const std::vector<float> alone = RowAlone(p, 0, heads, dqk, dv);
          const std::string what = std::string(DataTypeName(shape.dtype)) + " kv heads " +
                                   std::to_string(shape.num_kv_heads) + " len " +
                                   std::to_string(len) + " split " + std::to_string(split) +
                                   " threads " + std::to_string(threads);
          ASSERT_EQ(std::memcmp(p.o, alone.data(), sizeof(float) * heads * dv), 0) << what;
          ASSERT_EQ(std::memcmp(p.lse, alone.data() + heads * dv, sizeof(float) * heads), 0)
              << what;
        }
      }
    }
  }
}

TEST_P(PartialAttention, GqaD64F32) {
  RunDecode({8, 2, 64, 64, false, DataType::kF32, 16}, kMixedLens, 1);
}

TEST_P(PartialAttention, GqaD128F32ThreeHeadsPerKvHead) {
  RunDecode({9, 3, 128, 128, false, DataType::kF32, 7}, kMixedLens, 2);
}

TEST_P(PartialAttention, GqaD64Bf16) {
  RunDecode({9, 3, 64, 64, false, DataType::kBF16, 16}, kMixedLens, 3);
}

TEST_P(PartialAttention, GqaD128Bf16) {
  RunDecode({32, 8, 128, 128, false, DataType::kBF16, 5}, {0, 1, 33, 250}, 4);
}

TEST_P(PartialAttention, MhaOneHeadPerKvHead) {
  RunDecode({4, 4, 128, 128, false, DataType::kF32, 3}, {1, 2, 70}, 5);
}

TEST_P(PartialAttention, Mla16HeadsF32) {
  RunDecode({16, 1, 576, 512, true, DataType::kF32, 16}, {0, 1, 40, 130}, 6);
}

TEST_P(PartialAttention, Mla16HeadsBf16) {
  RunDecode({16, 1, 576, 512, true, DataType::kBF16, 64}, {0, 1, 40, 130}, 7);
}

TEST_P(PartialAttention, Mla128HeadsF32) {
  RunDecode({128, 1, 576, 512, true, DataType::kF32, 32}, {1, 97}, 8);
}

TEST_P(PartialAttention, Mla128HeadsBf16) {
  RunDecode({128, 1, 576, 512, true, DataType::kBF16, 32}, {0, 97}, 9);
}

TEST_P(PartialAttention, CausalPrefillRows) {
  RunPrefill({6, 2, 64, 64, false, DataType::kF32, 4}, {0, 4}, 10);
}

TEST_P(PartialAttention, LongSingleSequenceAllThreads) {
  RunLongSequence({8, 2, 128, 128, false, DataType::kBF16, 16}, 11);
}

// fp8 K/V on both page formats: GQA with 3 and 4 query heads per KV head, MHA, MLA (kRows), a
// causal prefill (an fp8 V word holds four keys, so rows end inside one at three places) and one
// long sequence over all threads.
TEST_P(PartialAttention, Fp8EveryShape) {
  for (DataType dtype : {kE4M3, kE5M2}) {
    SCOPED_TRACE(std::string(DataTypeName(dtype)));
    RunDecode({9, 3, 64, 64, false, dtype, 16}, kMixedLens, 81);
    RunDecode({9, 3, 64, 64, false, dtype, 16, kTiles16}, kMixedLens, 82);
    RunDecode({32, 8, 128, 128, false, dtype, 64, kTiles16}, {0, 1, 33, 250}, 83);
    RunDecode({4, 4, 64, 64, false, dtype, 64, kTiles16}, {1, 2, 70}, 84);
    RunDecode({16, 1, 576, 512, true, dtype, 64}, {0, 1, 40, 130}, 85);
    RunPrefill({6, 2, 64, 64, false, dtype, 16, kTiles16}, {0, 16, 24}, 86);
    RunPrefill({6, 2, 64, 64, false, dtype, 4}, {0, 4}, 87);
    RunLongSequence({8, 2, 128, 128, false, dtype, 16, kTiles16}, 88);
  }
}

// Each path widens every fp8 code to the bits of dtype.h's Fp8E4M3ToFloat / Fp8E5M2ToFloat. One
// key per sequence makes O that key's V row (weight 1) and, for a one-hot q of head h and scale 1,
// the lse the single product log2(e) * K[h] times ln 2 (log2(e) rounded to bf16 where the path
// rounds Q: the product of two bf16 is exact in fp32): 8 sequences of 32 elements hold all 256
// codes in V and every finite code in K, on both page formats.
TEST_P(PartialAttention, Fp8WideningIsTheScalarConversionBitwise) {
  constexpr int kD = 32;  // vdpbf16ps's paths need head dims of 32
  constexpr int kSeqs = 8;
  constexpr float kLog2e = 1.4426950408889634f;  // the kernels' constants
  constexpr float kLn2 = 0.6931471805599453f;
  for (DataType dtype : {kE4M3, kE5M2}) {
    const auto widen = dtype == kE4M3 ? &Fp8E4M3ToFloat : &Fp8E5M2ToFloat;
    for (KvPageFormat format : {KvPageFormat::kRows, kTiles16}) {
      const std::string what =
          std::string(DataTypeName(dtype)) + (format == kTiles16 ? " tiles16" : " rows");
      PartialAttentionParams p;
      p.kv.dtype = dtype;
      p.kv.page_size = 16;
      p.kv.num_kv_heads = 1;
      p.kv.head_dim_qk = kD;
      p.kv.head_dim_v = kD;
      p.kv.format = format;
      p.kv.max_pages_per_seq = 1;
      p.kv.num_pages = kSeqs;
      std::vector<uint8_t> k(kSeqs * 16 * kD, 0), v(kSeqs * 16 * kD, 0);
      p.kv.k = k.data();
      p.kv.v = v.data();
      for (int s = 0; s < kSeqs; ++s) {
        for (int d = 0; d < kD; ++d) {
          const auto code = static_cast<uint8_t>(s * kD + d);
          v[KvElementOffset(p.kv, true, s, 0, 0, d)] = code;
          k[KvElementOffset(p.kv, false, s, 0, 0, d)] = std::isfinite(widen(code)) ? code : 0;
        }
      }
      std::vector<int32_t> table(kSeqs), lens(kSeqs, 1);
      std::iota(table.begin(), table.end(), 0);
      std::vector<float> q(kSeqs * kD * kD, 0.0f), o(kSeqs * kD * kD), lse(kSeqs * kD);
      for (int s = 0; s < kSeqs; ++s) {
        for (int h = 0; h < kD; ++h) q[(s * kD + h) * kD + h] = 1.0f;
      }
      p.kv.block_table = table.data();
      p.q = q.data();
      p.o = o.data();
      p.lse = lse.data();
      p.num_rows = kSeqs;
      p.num_seqs = kSeqs;
      p.num_q_heads = kD;
      p.row_kv_len = lens.data();
      p.scale = 1.0f;
      p.num_threads = 1;
      ASSERT_TRUE(PartialAttentionCpu(p).ok()) << what;
      const bool rounds_q = format == kTiles16 && GetParam() >= CpuIsa::kAvx512Bf16;
      const float q2 = rounds_q ? Bf16ToFloat(FloatToBf16(kLog2e)) : kLog2e;
      for (int s = 0; s < kSeqs; ++s) {
        for (int h = 0; h < kD; ++h) {
          const float kx = widen(k[KvElementOffset(p.kv, false, s, 0, 0, h)]);
          const float s2 = q2 * kx;
          EXPECT_EQ(lse[s * kD + h], s2 * kLn2) << what << " K code " << s * kD + h;
          for (int d = 0; d < kD; ++d) {
            const float want = widen(static_cast<uint8_t>(s * kD + d));
            const float got = o[(s * kD + h) * kD + d];
            // O = 0 + 1 * v: -0 comes out +0; NaN stays NaN.
            if (std::isnan(want)) {
              EXPECT_TRUE(std::isnan(got)) << what << " V code " << s * kD + d;
            } else {
              EXPECT_EQ(got, want) << what << " V code " << s * kD + d;
            }
          }
        }
      }
    }
  }
}

TEST_P(PartialAttention, LargeScoresStayFinite) {
  // Scores of several hundred: exp overflows without the running max.
  const Shape shape{4, 1, 64, 64, false, DataType::kF32, 8};
  Problem prob(shape, {50, 200}, 12);
  prob.DecodeRows();
  PartialAttentionParams p = prob.Params();
  for (float& x : prob.q()) x *= 300.0f;
  p.num_threads = 2;
  p.split_kv_keys = 32;
  ASSERT_TRUE(PartialAttentionCpu(p).ok());
  prob.Check(p, 1e-4, "large scores");
}

// Gemma 2's attention logit softcapping against float64 with the cap, on both page formats and
// both KV types: decode rows (split-KV off and on, chunks inside a tile), causal prefill rows
// (several to a kTiles16 task) and window rows, with scores of about 3 (up to 15) against a cap of
// 1, so that the cap moves O by more than four times the widest tolerance: the uncapped kernel
// would fail the check.
TEST_P(PartialAttention, SoftcapOnEveryFormatAndKvType) {
  for (DataType dtype : kKvTypes) {
    for (KvPageFormat format : {KvPageFormat::kRows, kTiles16}) {
      const Shape shape{8, 2, 64, 64, false, dtype, 16, format};
      Problem prob(shape, {0, 5, 37, 100, 300}, 70);
      prob.DecodeRows();
      for (int t = 1; t <= 40; ++t) prob.AddRow(3, t);
      for (int t = 60; t <= 100; t += 7) prob.AddRow(4, t, t - 33);
      for (float& x : prob.q()) x *= 8.0f;
      const std::string what =
          std::string(DataTypeName(dtype)) + (format == kTiles16 ? " tiles16" : " rows");
      for (int split : {0, 16, 24}) {
        for (int threads : {1, 3}) {
          PartialAttentionParams p = prob.Params();
          p.softcap = 1.0f;
          p.num_threads = threads;
          p.split_kv_keys = split;
          ASSERT_TRUE(PartialAttentionCpu(p).ok());
          prob.Check(p, Tol(shape), what + " softcap split " + std::to_string(split));
        }
      }
      PartialAttentionParams capped = prob.Params();
      capped.softcap = 1.0f;
      ASSERT_TRUE(PartialAttentionCpu(capped).ok());
      const std::vector<float> o_capped(capped.o, capped.o + capped.num_rows * 8 * 64);
      PartialAttentionParams plain = prob.Params();
      ASSERT_TRUE(PartialAttentionCpu(plain).ok());
      double diff = 0.0;
      for (std::size_t i = 0; i < o_capped.size(); ++i) {
        diff = std::max(diff, double(std::abs(o_capped[i] - plain.o[i])));
      }
      EXPECT_GT(diff, 4e-2) << what;
    }
  }
}

// kTiles16: the GQA cases above on 16-slot tiles (pages of 16 and 64), and query groups of 1, 3,
// 4 and 8 heads per KV head.

TEST_P(PartialAttention, Tiles16GqaD64F32) {
  RunDecode({8, 2, 64, 64, false, DataType::kF32, 16, kTiles16}, kMixedLens, 21);
}

TEST_P(PartialAttention, Tiles16GqaD128F32ThreeHeadsPerKvHead) {
  RunDecode({9, 3, 128, 128, false, DataType::kF32, 64, kTiles16}, kMixedLens, 22);
}

TEST_P(PartialAttention, Tiles16GqaD64Bf16) {
  RunDecode({9, 3, 64, 64, false, DataType::kBF16, 16, kTiles16}, kMixedLens, 23);
}

TEST_P(PartialAttention, Tiles16GqaD128Bf16) {
  RunDecode({32, 8, 128, 128, false, DataType::kBF16, 64, kTiles16}, {0, 1, 33, 250}, 24);
}

TEST_P(PartialAttention, Tiles16GqaD64Bf16EightHeadsPerKvHead) {
  RunDecode({16, 2, 64, 64, false, DataType::kBF16, 64, kTiles16}, kMixedLens, 25);
}

TEST_P(PartialAttention, Tiles16GqaD128F32EightHeadsPerKvHead) {
  RunDecode({8, 1, 128, 128, false, DataType::kF32, 16, kTiles16}, kMixedLens, 26);
}

TEST_P(PartialAttention, Tiles16MhaOneHeadPerKvHead) {
  RunDecode({4, 4, 128, 128, false, DataType::kF32, 16, kTiles16}, {1, 2, 70}, 27);
  RunDecode({4, 4, 64, 64, false, DataType::kBF16, 64, kTiles16}, {1, 2, 70}, 28);
}

// bf16 V words pair keys 2i and 2i+1, so a causal row that ends at an odd key ends inside one.
TEST_P(PartialAttention, Tiles16Bf16SevenHeadsPerKvHead) {
  RunDecode({14, 2, 64, 64, false, DataType::kBF16, 16, kTiles16}, kMixedLens, 32);
  RunPrefill({14, 2, 64, 64, false, DataType::kBF16, 16, kTiles16}, {0, 16, 24}, 33);
}

TEST_P(PartialAttention, Tiles16CausalPrefillRows) {
  RunPrefill({6, 2, 64, 64, false, DataType::kF32, 16, kTiles16}, {0, 16, 24}, 29);
  RunPrefill({6, 2, 64, 64, false, DataType::kBF16, 16, kTiles16}, {0, 16, 24}, 30);
}

TEST_P(PartialAttention, Tiles16LongSingleSequenceAllThreads) {
  RunLongSequence({8, 2, 128, 128, false, DataType::kBF16, 16, kTiles16}, 31);
  RunLongSequence({8, 2, 128, 128, false, DataType::kF32, 64, kTiles16}, 32);
}

// A kernel that reads whole tiles must mask the keys past a sequence's end, not only weight them
// by 0: 0 * NaN is NaN. Every element that is not a key holds NaN here.
TEST_P(PartialAttention, Tiles16NaNOutsideTheSequencesStaysOut) {
  for (DataType dtype : kKvTypes) {
    Problem prob({8, 2, 128, 128, false, dtype, 16, kTiles16}, kMixedLens, 33);
    prob.PoisonUnusedKeys();
    CheckDecode(prob);
  }
}

// Visible ranges [start, end) per row (a sliding window), against float64 with every key no row
// sees set to NaN: decode rows whose window starts inside a page or a tile (W = 1, 7, 33, 256),
// an empty range, a single key (N = 1) and a whole sequence, then every token of a sequence
// prefilled through a window of 13 (rows whose starts move by one, several to a kTiles16 task),
// on one thread and three, split-KV off and on, with chunks that end inside a tile.
void CheckWindowRows(const Shape& shape, uint32_t seed, double tol) {
  Problem prob(shape, {40, 100, 300, 70}, seed);
  for (int w : {1, 7, 33, 256}) {
    prob.AddRow(1, 100, std::max(0, 100 - w));
    prob.AddRow(2, 300, 300 - w);
  }
  prob.AddRow(0, 21, 21);
  prob.AddRow(0, 33, 32);
  prob.AddRow(0, 40, 0);
  for (int t = 0; t < 70; ++t) prob.AddRow(3, t + 1, std::max(0, t + 1 - 13));
  prob.PoisonUnseenKeys();
  for (int split : {0, 16, 40}) {
    for (int threads : {1, 3}) {
      PartialAttentionParams p = prob.Params();
      p.num_threads = threads;
      p.split_kv_keys = split;
      const Status st = PartialAttentionCpu(p);
      ASSERT_TRUE(st.ok()) << st.ToString();
      prob.Check(p, tol,
                 "window split " + std::to_string(split) + " threads " + std::to_string(threads));
    }
  }
}

TEST_P(PartialAttention, WindowRowsEveryKvType) {
  for (DataType dtype : kKvTypes) {
    const Shape rows{6, 2, 64, 64, false, dtype, 16};
    CheckWindowRows(rows, 50, Tol(rows));
    const Shape tiles{4, 1, 256, 256, false, dtype, 16, kTiles16};  // Gemma 3: one KV head of 256
    CheckWindowRows(tiles, 51, Tol(tiles));
    const Shape mla{2, 1, 576, 512, true, dtype, 8};
    CheckWindowRows(mla, 52, Tol(mla));
  }
}

// Bitwise: a window row in a call equals the row alone, whatever the other rows and threads: its
// chunks are the absolute ones [c * split, (c + 1) * split) that meet its range.
TEST_P(PartialAttention, WindowRowsAreBatchInvariant) {
  for (const Shape& shape : {Shape{4, 1, 256, 256, false, DataType::kF32, 16, kTiles16},
                             Shape{6, 2, 64, 64, false, DataType::kBF16, 16, kTiles16},
                             Shape{6, 2, 64, 64, false, kE4M3, 16, kTiles16},
                             Shape{6, 2, 64, 64, false, DataType::kF32, 8}}) {
    Problem prob(shape, {300, 90}, 60);
    for (int w : {5, 40, 100}) prob.AddRow(0, 300, 300 - w);
    for (int t = 0; t < 90; ++t) prob.AddRow(1, t + 1, std::max(0, t + 1 - 37));
    const int heads = shape.num_q_heads, dqk = shape.head_dim_qk, dv = shape.head_dim_v;
    for (int split : {16, 40}) {
      for (int threads : {1, 3}) {
        PartialAttentionParams p = prob.Params();
        p.num_threads = threads;
        p.split_kv_keys = split;
        ASSERT_TRUE(PartialAttentionCpu(p).ok());
        for (int row = 0; row < p.num_rows; ++row) {
          const std::vector<float> alone = RowAlone(p, row, heads, dqk, dv);
          const std::string what = "split " + std::to_string(split) + " threads " +
                                   std::to_string(threads) + " row " + std::to_string(row);
          ASSERT_EQ(std::memcmp(p.o + int64_t{row} * heads * dv, alone.data(),
                                sizeof(float) * heads * dv),
                    0)
              << what;
          ASSERT_EQ(std::memcmp(p.lse + int64_t{row} * heads, alone.data() + heads * dv,
                                sizeof(float) * heads),
                    0)
              << what;
        }
      }
    }
  }
}

// Each bad field is rejected with a Status that names it, its value and the rule.
struct BadCase {
  const char* name;
  void (*mutate)(PartialAttentionParams&);
  const char* want;
};

TEST(PartialAttentionParamsTest, BadFieldsAreRejectedByName) {
  static int32_t bad_len[] = {9, 1000};
  static int32_t bad_seq[] = {0, 5};
  static int32_t bad_table[] = {0, -1, 0, 0};
  static int32_t bad_start[] = {3, 13};
  const BadCase cases[] = {
      {"rows", [](PartialAttentionParams& p) { p.num_rows = -1; },
       "PartialAttentionParams.num_rows = -1: must be >= 0"},
      {"heads", [](PartialAttentionParams& p) { p.num_q_heads = 7; },
       "PartialAttentionParams.num_q_heads = 7: must be a multiple of kv.num_kv_heads = 2"},
      {"kv heads", [](PartialAttentionParams& p) { p.kv.num_kv_heads = 0; },
       "PartialAttentionParams.kv.num_kv_heads = 0: must be >= 1"},
      {"dim", [](PartialAttentionParams& p) { p.kv.head_dim_qk = 72; },
       "PartialAttentionParams.kv.head_dim_qk = 72: must be a multiple of 16 in [16, 1024]"},
      {"mla dim",
       [](PartialAttentionParams& p) {
         p.kv.v = nullptr;
         p.kv.head_dim_v = 128;
       },
       "PartialAttentionParams.kv.head_dim_v = 128: must be <= kv.head_dim_qk = 64 when kv.v is "
       "null (V is the prefix of the K row)"},
      {"page", [](PartialAttentionParams& p) { p.kv.page_size = 0; },
       "PartialAttentionParams.kv.page_size = 0: must be >= 1"},
      {"q", [](PartialAttentionParams& p) { p.q = nullptr; },
       "PartialAttentionParams.q is null: it must point to data"},
      {"table", [](PartialAttentionParams& p) { p.kv.block_table = nullptr; },
       "PartialAttentionParams.kv.block_table is null: it must point to data"},
      {"scale", [](PartialAttentionParams& p) { p.scale = NAN; },
       "PartialAttentionParams.scale = nan: must be finite"},
      {"softcap", [](PartialAttentionParams& p) { p.softcap = -1.0f; },
       "PartialAttentionParams.softcap = -1.000000: must be finite and >= 0 (0: no softcapping)"},
      {"softcap nan", [](PartialAttentionParams& p) { p.softcap = NAN; },
       "PartialAttentionParams.softcap = nan: must be finite and >= 0 (0: no softcapping)"},
      {"split", [](PartialAttentionParams& p) { p.split_kv_keys = -3; },
       "PartialAttentionParams.split_kv_keys = -3: must be >= 0 (0: chosen automatically)"},
      {"len", [](PartialAttentionParams& p) { p.row_kv_len = bad_len; },
       "PartialAttentionParams.row_kv_len[1] = 1000: must be in [0, kv.max_pages_per_seq * "
       "kv.page_size = 16]"},
      {"start", [](PartialAttentionParams& p) { p.row_kv_start = bad_start; },
       "PartialAttentionParams.row_kv_start[1] = 13: must be in [0, row_kv_len[1] = 12]"},
      {"seq", [](PartialAttentionParams& p) { p.row_seq = bad_seq; },
       "PartialAttentionParams.row_seq[1] = 5: a sequence must be in [0, num_seqs = 2)"},
      {"page entry", [](PartialAttentionParams& p) { p.kv.block_table = bad_table; },
       "PartialAttentionParams.kv.block_table[0 * max_pages_per_seq + 1] = -1: a page must be >= "
       "0"},
  };
  for (const BadCase& c : cases) {
    Problem prob({4, 2, 64, 64, false, DataType::kF32, 8}, {9, 12}, 13);
    prob.DecodeRows();
    PartialAttentionParams p = prob.Params();
    p.kv.num_pages = 0;
    c.mutate(p);
    const Status st = PartialAttentionCpu(p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(st.message(), c.want) << c.name;
  }
}

TEST(PartialAttentionParamsTest, PageOutsideThePoolIsRejected) {
  Problem prob({4, 2, 64, 64, false, DataType::kF32, 8}, {9, 12}, 14);
  prob.DecodeRows();
  PartialAttentionParams p = prob.Params();
  p.kv.num_pages = 1;
  const Status st = PartialAttentionCpu(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("a page must be in [0, kv.num_pages = 1)"), std::string::npos)
      << st.message();
}

// kTiles16 tiles V apart from K in whole tiles of 16 slots.
TEST(PartialAttentionParamsTest, Tiles16NeedsASeparateVAndWholeTiles) {
  Problem v_in_k({4, 2, 64, 64, false, DataType::kF32, 16, kTiles16}, {9, 12}, 15);
  v_in_k.DecodeRows();
  PartialAttentionParams p = v_in_k.Params();
  p.kv.v = nullptr;
  Status st = PartialAttentionCpu(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(st.message().starts_with("PartialAttentionParams.kv.format")) << st.message();

  Problem partial_tiles({4, 2, 64, 64, false, DataType::kF32, 8}, {9, 12}, 16);
  partial_tiles.DecodeRows();
  p = partial_tiles.Params();
  p.kv.format = kTiles16;
  st = PartialAttentionCpu(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(st.message().starts_with("PartialAttentionParams.kv.format")) << st.message();
}

TEST(PartialAttentionParamsTest, NoRowsIsANoOp) {
  PartialAttentionParams p;
  p.num_q_heads = 1;
  p.kv.num_kv_heads = 1;
  p.kv.head_dim_qk = 64;
  p.kv.head_dim_v = 64;
  p.kv.page_size = 1;
  p.kv.max_pages_per_seq = 1;
  EXPECT_TRUE(PartialAttentionCpu(p).ok());
}

INSTANTIATE_TEST_SUITE_P(AllPaths, PartialAttention, ::testing::ValuesIn(AvailableIsas()),
                         [](const ::testing::TestParamInfo<CpuIsa>& info) {
                           return std::string(CpuIsaName(info.param));
                         });

}  // namespace
}  // namespace ctxpar
