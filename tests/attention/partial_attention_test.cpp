// PartialAttentionCpu against a float64 reference, on every SIMD path this CPU has.
//
// Tolerances: O is a convex combination of V rows, so its error is measured against the largest
// |V| (1 here): within 1e-5, except bf16 KV on the avx512_bf16 path within 1e-2 (it rounds Q
// and the softmax weights to bf16, attention.h; the errors seen are 3e-4..2e-3). The lse is
// compared with the same bounds relative to max(1, |lse|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/attention.h"
#include "ctxpar/cpu_features.h"

namespace ctxpar {
namespace {

uint16_t ToBf16(float x) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

double FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Shape {
  int num_q_heads;
  int num_kv_heads;
  int head_dim_qk;
  int head_dim_v;
  bool mla;  // V is the prefix of K
  KvDtype dtype;
  int page_size;
};

// A paged KV cache with pages shuffled over the pool, random Q, and the reference.
class Problem {
 public:
  Problem(const Shape& shape, std::vector<int> seq_lens, uint32_t seed)
      : shape_(shape), seq_lens_(std::move(seq_lens)), rng_(seed) {
    const int ps = shape_.page_size;
    for (int len : seq_lens_) max_pages_ = std::max(max_pages_, (len + ps - 1) / ps);
    max_pages_ = std::max(max_pages_, 1);
    const int num_seqs = static_cast<int>(seq_lens_.size());
    num_pages_ = num_seqs * max_pages_ + 3;
    std::vector<int32_t> perm(num_pages_);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    block_table_.assign(perm.begin(), perm.begin() + num_seqs * max_pages_);
    const int64_t slots = static_cast<int64_t>(num_pages_) * ps * shape_.num_kv_heads;
    Fill(slots * shape_.head_dim_qk, kf_, kb_);
    if (!shape_.mla) Fill(slots * shape_.head_dim_v, vf_, vb_);
  }

  // Decode: one row per sequence seeing all of it. Rows are fixed by the first Params().
  void DecodeRows() {
    for (int s = 0; s < static_cast<int>(seq_lens_.size()); ++s) AddRow(s, seq_lens_[s]);
  }
  void AddRow(int seq, int kv_len) {
    row_seq_.push_back(seq);
    row_kv_len_.push_back(kv_len);
  }

  PartialAttentionParams Params() {
    const int rows = static_cast<int>(row_seq_.size());
    if (q_.empty())
      q_ = Random(static_cast<int64_t>(rows) * shape_.num_q_heads * shape_.head_dim_qk);
    o_.assign(static_cast<size_t>(rows) * shape_.num_q_heads * shape_.head_dim_v, NAN);
    lse_.assign(static_cast<size_t>(rows) * shape_.num_q_heads, NAN);
    PartialAttentionParams p;
    p.q = q_.data();
    p.o = o_.data();
    p.lse = lse_.data();
    p.num_rows = rows;
    p.num_q_heads = shape_.num_q_heads;
    p.row_seq = row_seq_.data();
    p.row_kv_len = row_kv_len_.data();
    p.scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim_qk));
    p.kv.k = shape_.dtype == KvDtype::kF32 ? static_cast<const void*>(kf_.data()) : kb_.data();
    if (!shape_.mla) {
      p.kv.v = shape_.dtype == KvDtype::kF32 ? static_cast<const void*>(vf_.data()) : vb_.data();
    }
    p.kv.dtype = shape_.dtype;
    p.kv.page_size = shape_.page_size;
    p.kv.num_kv_heads = shape_.num_kv_heads;
    p.kv.head_dim_qk = shape_.head_dim_qk;
    p.kv.head_dim_v = shape_.head_dim_v;
    p.kv.block_table = block_table_.data();
    p.kv.max_pages_per_seq = max_pages_;
    p.kv.num_pages = num_pages_;
    p.num_seqs = static_cast<int>(seq_lens_.size());
    return p;
  }

  // Checks o_ and lse_ against the float64 reference within tol.
  void Check(const PartialAttentionParams& p, double tol, const std::string& what) const {
    const int group = shape_.num_q_heads / shape_.num_kv_heads;
    const int dqk = shape_.head_dim_qk;
    const int dv = shape_.head_dim_v;
    int failures = 0;
    for (size_t i = 0; i < row_seq_.size() && failures < 5; ++i) {
      for (int h = 0; h < shape_.num_q_heads && failures < 5; ++h) {
        const int kvh = h / group;
        const float* q = q_.data() + (i * shape_.num_q_heads + h) * dqk;
        const int len = row_kv_len_[i];
        std::vector<double> s(len);
        double m = -INFINITY;
        for (int j = 0; j < len; ++j) {
          double dot = 0;
          for (int d = 0; d < dqk; ++d)
            dot += static_cast<double>(q[d]) * K(row_seq_[i], j, kvh, d);
          s[j] = static_cast<double>(p.scale) * dot;
          m = std::max(m, s[j]);
        }
        std::vector<double> o(dv, 0.0);
        double l = 0;
        for (int j = 0; j < len; ++j) {
          const double w = std::exp(s[j] - m);
          l += w;
          for (int d = 0; d < dv; ++d) o[d] += w * V(row_seq_[i], j, kvh, d);
        }
        const double ref_lse = len == 0 ? -INFINITY : m + std::log(l);
        const float got_lse = lse_[i * shape_.num_q_heads + h];
        const std::string where = what + " row " + std::to_string(i) + " head " +
                                  std::to_string(h) + " len " + std::to_string(len);
        if (len == 0) {
          if (!(std::isinf(got_lse) && got_lse < 0)) {
            ADD_FAILURE() << where << ": lse " << got_lse << ", want -inf";
            ++failures;
          }
        } else if (!(std::abs(got_lse - ref_lse) <= tol * std::max(1.0, std::abs(ref_lse)))) {
          ADD_FAILURE() << where << ": lse " << got_lse << ", want " << ref_lse;
          ++failures;
        }
        const float* got = o_.data() + (i * shape_.num_q_heads + h) * dv;
        for (int d = 0; d < dv; ++d) {
          const double want = len == 0 ? 0.0 : o[d] / l;
          if (!(std::abs(got[d] - want) <= tol)) {
            ADD_FAILURE() << where << " d " << d << ": O " << got[d] << ", want " << want;
            ++failures;
            break;
          }
        }
      }
    }
  }

  std::vector<float>& q() { return q_; }

 private:
  std::vector<float> Random(int64_t n) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(n);
    for (float& e : x) e = u(rng_);
    return x;
  }
  void Fill(int64_t n, std::vector<float>& f, std::vector<uint16_t>& b) {
    f = Random(n);
    if (shape_.dtype == KvDtype::kF32) return;
    b.resize(n);
    for (int64_t i = 0; i < n; ++i) b[i] = ToBf16(f[i]);
    f.clear();
  }

  int64_t Slot(int seq, int r, int kvh) const {
    const int ps = shape_.page_size;
    const int64_t page = block_table_[seq * max_pages_ + r / ps];
    return (page * ps + r % ps) * shape_.num_kv_heads + kvh;
  }
  double K(int seq, int r, int kvh, int d) const {
    const int64_t i = Slot(seq, r, kvh) * shape_.head_dim_qk + d;
    return shape_.dtype == KvDtype::kF32 ? kf_[i] : FromBf16(kb_[i]);
  }
  double V(int seq, int r, int kvh, int d) const {
    if (shape_.mla) return K(seq, r, kvh, d);
    const int64_t i = Slot(seq, r, kvh) * shape_.head_dim_v + d;
    return shape_.dtype == KvDtype::kF32 ? vf_[i] : FromBf16(vb_[i]);
  }

  Shape shape_;
  std::vector<int> seq_lens_;
  std::mt19937 rng_;
  int max_pages_ = 0;
  int num_pages_ = 0;
  std::vector<int32_t> block_table_;
  std::vector<float> kf_, vf_;
  std::vector<uint16_t> kb_, vb_;
  std::vector<float> q_, o_, lse_;
  std::vector<int32_t> row_seq_, row_kv_len_;
};

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> out;
  const CpuIsa best = BestCpuIsa(DetectCpuFeatures());
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16}) {
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

  // Only the avx512_bf16 path rounds (Q and P to bf16); the others widen bf16 KV exactly.
  double Tol(const Shape& s) const {
    return s.dtype == KvDtype::kBF16 && GetParam() == CpuIsa::kAvx512Bf16 ? 1e-2 : 1e-5;
  }

  // Decode rows over sequences of the given lengths, with split-KV off (one thread) and on.
  void RunDecode(const Shape& shape, const std::vector<int>& lens, uint32_t seed) {
    Problem prob(shape, lens, seed);
    prob.DecodeRows();
    for (int split : {0, 16, 48}) {
      for (int threads : {1, 3}) {
        PartialAttentionParams p = prob.Params();
        p.num_threads = threads;
        p.split_kv_keys = split;
        ASSERT_TRUE(PartialAttentionCpu(p).ok());
        prob.Check(p, Tol(shape),
                   "split " + std::to_string(split) + " threads " + std::to_string(threads));
      }
    }
  }
};

const std::vector<int> kMixedLens = {0, 1, 5, 16, 37, 100, 300};

TEST_P(PartialAttention, GqaD64F32) {
  RunDecode({8, 2, 64, 64, false, KvDtype::kF32, 16}, kMixedLens, 1);
}

TEST_P(PartialAttention, GqaD128F32ThreeHeadsPerKvHead) {
  RunDecode({9, 3, 128, 128, false, KvDtype::kF32, 7}, kMixedLens, 2);
}

TEST_P(PartialAttention, GqaD64Bf16) {
  RunDecode({9, 3, 64, 64, false, KvDtype::kBF16, 16}, kMixedLens, 3);
}

TEST_P(PartialAttention, GqaD128Bf16) {
  RunDecode({32, 8, 128, 128, false, KvDtype::kBF16, 5}, {0, 1, 33, 250}, 4);
}

TEST_P(PartialAttention, MhaOneHeadPerKvHead) {
  RunDecode({4, 4, 128, 128, false, KvDtype::kF32, 3}, {1, 2, 70}, 5);
}

TEST_P(PartialAttention, Mla16HeadsF32) {
  RunDecode({16, 1, 576, 512, true, KvDtype::kF32, 16}, {0, 1, 40, 130}, 6);
}

TEST_P(PartialAttention, Mla16HeadsBf16) {
  RunDecode({16, 1, 576, 512, true, KvDtype::kBF16, 64}, {0, 1, 40, 130}, 7);
}

TEST_P(PartialAttention, Mla128HeadsF32) {
  RunDecode({128, 1, 576, 512, true, KvDtype::kF32, 32}, {1, 97}, 8);
}

TEST_P(PartialAttention, Mla128HeadsBf16) {
  RunDecode({128, 1, 576, 512, true, KvDtype::kBF16, 32}, {0, 97}, 9);
}

TEST_P(PartialAttention, CausalPrefillRows) {
  // Three sequences; every token of the last two is a row that sees the keys up to itself.
  const Shape shape{6, 2, 64, 64, false, KvDtype::kF32, 4};
  Problem prob(shape, {10, 23, 9}, 10);
  prob.AddRow(0, 10);
  for (int t = 1; t <= 23; ++t) prob.AddRow(1, t);
  for (int t = 0; t <= 9; ++t) prob.AddRow(2, t);
  for (int split : {0, 4}) {
    PartialAttentionParams p = prob.Params();
    p.num_threads = 2;
    p.split_kv_keys = split;
    ASSERT_TRUE(PartialAttentionCpu(p).ok());
    prob.Check(p, Tol(shape), "prefill split " + std::to_string(split));
  }
}

TEST_P(PartialAttention, LongSingleSequenceAllThreads) {
  const Shape shape{8, 2, 128, 128, false, KvDtype::kBF16, 16};
  Problem prob(shape, {3000}, 11);
  prob.DecodeRows();
  PartialAttentionParams p = prob.Params();
  p.num_threads = 0;
  ASSERT_TRUE(PartialAttentionCpu(p).ok());
  prob.Check(p, Tol(shape), "all threads");
}

TEST_P(PartialAttention, LargeScoresStayFinite) {
  // Scores of several hundred: exp overflows without the running max.
  const Shape shape{4, 1, 64, 64, false, KvDtype::kF32, 8};
  Problem prob(shape, {50, 200}, 12);
  prob.DecodeRows();
  PartialAttentionParams p = prob.Params();
  for (float& x : prob.q()) x *= 300.0f;
  p.num_threads = 2;
  p.split_kv_keys = 32;
  ASSERT_TRUE(PartialAttentionCpu(p).ok());
  prob.Check(p, 1e-4, "large scores");
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
      {"split", [](PartialAttentionParams& p) { p.split_kv_keys = -3; },
       "PartialAttentionParams.split_kv_keys = -3: must be >= 0 (0: chosen automatically)"},
      {"len", [](PartialAttentionParams& p) { p.row_kv_len = bad_len; },
       "PartialAttentionParams.row_kv_len[1] = 1000: must be in [0, kv.max_pages_per_seq * "
       "kv.page_size = 16]"},
      {"seq", [](PartialAttentionParams& p) { p.row_seq = bad_seq; },
       "PartialAttentionParams.row_seq[1] = 5: a sequence must be in [0, num_seqs = 2)"},
      {"page entry", [](PartialAttentionParams& p) { p.kv.block_table = bad_table; },
       "PartialAttentionParams.kv.block_table[0 * max_pages_per_seq + 1] = -1: a page must be >= "
       "0"},
  };
  for (const BadCase& c : cases) {
    Problem prob({4, 2, 64, 64, false, KvDtype::kF32, 8}, {9, 12}, 13);
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
  Problem prob({4, 2, 64, 64, false, KvDtype::kF32, 8}, {9, 12}, 14);
  prob.DecodeRows();
  PartialAttentionParams p = prob.Params();
  p.kv.num_pages = 1;
  const Status st = PartialAttentionCpu(p);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("a page must be in [0, kv.num_pages = 1)"), std::string::npos)
      << st.message();
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
