// PartialAttentionCuda against a float64 reference and against PartialAttentionCpu, on fresh
// random inputs with the outputs poisoned (NaN) first; plan validation runs without a device.
//
// Tolerances (relative 2-norm over all O, absolute on lse). GQA and the CUDA-core MLA path
// compute in fp32 from exactly widened bf16 K/V: 1e-4. The tensor-core MLA path rounds Q*scale
// and the softmax weights to bf16 (2^-9 relative): 1e-2, lse within 2e-2. Against the CPU kernel
// (whose avx512_bf16 path also rounds Q): 2e-2.
#include "ctxpar/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ctxpar/cuda_attention.h"
#include "cuda_test_util.h"

namespace ctxpar {
namespace {

using testing::DeviceBuffer;
using testing::Download;
using testing::Poison;
using testing::RelativeError;
using testing::Upload;

struct Shape {
  int num_q_heads;
  int num_kv_heads;
  int head_dim_qk;
  int head_dim_v;
  int page_size;
  bool mla() const { return head_dim_qk == 576; }
};

// One problem: a paged bf16 cache with shuffled pages, rows (sequence, visible length), random Q.
struct Problem {
  Shape shape;
  std::vector<int> seq_lens;
  std::vector<int32_t> row_seq;
  std::vector<int32_t> row_kv_len;
  std::vector<int32_t> row_kv_start;  // empty: every row starts at key 0
  int max_pages = 1;
  std::vector<int32_t> block_table;
  std::vector<uint16_t> k_bits, v_bits;
  std::vector<float> k, v, q;
  float scale = 0.0f;

  Problem(const Shape& s, std::vector<int> lens, std::vector<int32_t> rows_seq,
          std::vector<int32_t> rows_len, uint32_t seed)
      : shape(s),
        seq_lens(std::move(lens)),
        row_seq(std::move(rows_seq)),
        row_kv_len(std::move(rows_len)) {
    std::mt19937 rng(seed);
    for (int len : seq_lens) max_pages = std::max(max_pages, (len + s.page_size - 1) / s.page_size);
    const int num_seqs = static_cast<int>(seq_lens.size());
    const int num_pages = num_seqs * max_pages + 2;
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    block_table.assign(perm.begin(), perm.begin() + num_seqs * max_pages);
    const size_t slots = static_cast<size_t>(num_pages) * s.page_size * s.num_kv_heads;
    testing::RandomBf16(rng, slots * s.head_dim_qk, k_bits, k);
    if (!s.mla()) testing::RandomBf16(rng, slots * s.head_dim_v, v_bits, v);
    q = testing::RandomFloats(rng, row_seq.size() * s.num_q_heads * s.head_dim_qk, -1.0f, 1.0f);
    scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim_qk));
  }

  int rows() const { return static_cast<int>(row_seq.size()); }
  int max_kv_len() const {
    return row_kv_len.empty() ? 0 : *std::max_element(row_kv_len.begin(), row_kv_len.end());
  }

  // float64 reference: O [rows, Hq, Dv], lse [rows, Hq] (natural log; -inf and O = 0 if empty).
  void Reference(std::vector<double>& o, std::vector<double>& lse) const {
    const Shape& s = shape;
    o.assign(static_cast<size_t>(rows()) * s.num_q_heads * s.head_dim_v, 0.0);
    lse.assign(static_cast<size_t>(rows()) * s.num_q_heads, -INFINITY);
    const int group = s.num_q_heads / s.num_kv_heads;
    for (int r = 0; r < rows(); ++r) {
      for (int h = 0; h < s.num_q_heads; ++h) {
        const int kvh = h / group;
        const float* qr = &q[(static_cast<size_t>(r) * s.num_q_heads + h) * s.head_dim_qk];
        const int first = Start(r);
        std::vector<double> scores(row_kv_len[r]);
        double mx = -INFINITY;
        for (int j = first; j < row_kv_len[r]; ++j) {
          double dot = 0.0;
          const float* kr = &k[Slot(row_seq[r], j, kvh) * s.head_dim_qk];
          for (int d = 0; d < s.head_dim_qk; ++d) dot += static_cast<double>(qr[d]) * kr[d];
          scores[j] = dot * scale;
          mx = std::max(mx, scores[j]);
        }
        if (row_kv_len[r] == first) continue;
        double sum = 0.0;
        double* out = &o[(static_cast<size_t>(r) * s.num_q_heads + h) * s.head_dim_v];
        for (int j = first; j < row_kv_len[r]; ++j) {
          const double w = std::exp(scores[j] - mx);
          sum += w;
          const size_t slot = Slot(row_seq[r], j, kvh);
          const float* vr = s.mla() ? &k[slot * s.head_dim_qk] : &v[slot * s.head_dim_v];
          for (int d = 0; d < s.head_dim_v; ++d) out[d] += w * vr[d];
        }
        for (int d = 0; d < s.head_dim_v; ++d) out[d] /= sum;
        lse[static_cast<size_t>(r) * s.num_q_heads + h] = mx + std::log(sum);
      }
    }
  }

  int Start(int r) const { return row_kv_start.empty() ? 0 : row_kv_start[r]; }

  size_t Slot(int seq, int j, int kvh) const {
    const int page = block_table[static_cast<size_t>(seq) * max_pages + j / shape.page_size];
    return (static_cast<size_t>(page) * shape.page_size + j % shape.page_size) *
               shape.num_kv_heads +
           kvh;
  }

  // Params with host pointers (for the CPU kernel) or with the given device pointers.
  PartialAttentionParams Params(const float* q_ptr, float* o_ptr, float* lse_ptr,
                                const int32_t* seq_ptr, const int32_t* len_ptr, const void* k_ptr,
                                const void* v_ptr, const int32_t* table_ptr,
                                const int32_t* start_ptr = nullptr) const {
    PartialAttentionParams p;
    p.q = q_ptr;
    p.o = o_ptr;
    p.lse = lse_ptr;
    p.num_rows = rows();
    p.num_q_heads = shape.num_q_heads;
    p.row_seq = seq_ptr;
    p.row_kv_len = len_ptr;
    p.row_kv_start = start_ptr;
    p.scale = scale;
    p.kv.k = k_ptr;
    p.kv.v = shape.mla() ? nullptr : v_ptr;
    p.kv.dtype = DataType::kBF16;
    p.kv.page_size = shape.page_size;
    p.kv.num_kv_heads = shape.num_kv_heads;
    p.kv.head_dim_qk = shape.head_dim_qk;
    p.kv.head_dim_v = shape.head_dim_v;
    p.kv.block_table = table_ptr;
    p.kv.max_pages_per_seq = max_pages;
    return p;
  }
};

struct Result {
  std::vector<float> o;
  std::vector<float> lse;
};

// Runs PartialAttentionCuda with `num_splits` (0: chosen) on poisoned outputs.
void RunCuda(const Problem& pb, int num_splits, CudaMlaPath path, Result& out) {
  const Shape& s = pb.shape;
  DeviceBuffer q(pb.q.size() * 4), seq(pb.row_seq.size() * 4 + 4),
      len(pb.row_kv_len.size() * 4 + 4), k(pb.k_bits.size() * 2), v(pb.v_bits.size() * 2 + 16),
      table(pb.block_table.size() * 4), start(pb.row_kv_start.size() * 4 + 4);
  DeviceBuffer o(static_cast<size_t>(pb.rows()) * s.num_q_heads * s.head_dim_v * 4);
  DeviceBuffer lse(static_cast<size_t>(pb.rows()) * s.num_q_heads * 4);
  ASSERT_EQ(Upload(q, pb.q), cudaSuccess);
  ASSERT_EQ(Upload(seq, pb.row_seq), cudaSuccess);
  ASSERT_EQ(Upload(len, pb.row_kv_len), cudaSuccess);
  ASSERT_EQ(Upload(k, pb.k_bits), cudaSuccess);
  if (!s.mla()) ASSERT_EQ(Upload(v, pb.v_bits), cudaSuccess);
  ASSERT_EQ(Upload(table, pb.block_table), cudaSuccess);
  if (!pb.row_kv_start.empty()) ASSERT_EQ(Upload(start, pb.row_kv_start), cudaSuccess);
  ASSERT_EQ(Poison(o), cudaSuccess);
  ASSERT_EQ(Poison(lse), cudaSuccess);

  const PartialAttentionParams params =
      pb.Params(q.get<float>(), o.get<float>(), lse.get<float>(), seq.get<int32_t>(),
                len.get<int32_t>(), k.get(), v.get(), table.get<int32_t>(),
                pb.row_kv_start.empty() ? nullptr : start.get<int32_t>());
  const Expected<int> sms = CudaMultiprocessorCount();
  ASSERT_TRUE(sms.ok()) << sms.status().ToString();
  const Expected<CudaAttentionPlan> plan =
      PlanPartialAttentionCuda(params, pb.max_kv_len(), *sms, num_splits);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  DeviceBuffer workspace(plan->workspace_bytes);
  if (plan->workspace_bytes > 0) ASSERT_EQ(Poison(workspace), cudaSuccess);
  const Status st = PartialAttentionCuda(params, *plan, workspace.get(), nullptr, path);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.o.resize(o.bytes() / 4);
  out.lse.resize(lse.bytes() / 4);
  ASSERT_EQ(Download(out.o, o), cudaSuccess);
  ASSERT_EQ(Download(out.lse, lse), cudaSuccess);
}

void ExpectMatches(const Problem& pb, const Result& got, double o_tol, double lse_tol) {
  std::vector<double> o_ref, lse_ref;
  pb.Reference(o_ref, lse_ref);
  for (float x : got.o) ASSERT_TRUE(std::isfinite(x)) << "an O element is not finite (unwritten?)";
  EXPECT_LT(RelativeError(got.o, o_ref), o_tol);
  for (size_t i = 0; i < lse_ref.size(); ++i) {
    if (std::isinf(lse_ref[i])) {
      EXPECT_EQ(got.lse[i], -INFINITY) << "state " << i << " sees no key";
      const int dv = pb.shape.head_dim_v;
      for (int d = 0; d < dv; ++d) ASSERT_EQ(got.o[i * dv + d], 0.0f) << "state " << i;
    } else {
      EXPECT_NEAR(got.lse[i], lse_ref[i], lse_tol) << "state " << i;
    }
  }
}

void ExpectMatchesCpu(const Problem& pb, const Result& got) {
  const Shape& s = pb.shape;
  std::vector<float> o(static_cast<size_t>(pb.rows()) * s.num_q_heads * s.head_dim_v,
                       std::numeric_limits<float>::quiet_NaN());
  std::vector<float> lse(static_cast<size_t>(pb.rows()) * s.num_q_heads,
                         std::numeric_limits<float>::quiet_NaN());
  PartialAttentionParams p =
      pb.Params(pb.q.data(), o.data(), lse.data(), pb.row_seq.data(), pb.row_kv_len.data(),
                pb.k_bits.data(), pb.v_bits.data(), pb.block_table.data(),
                pb.row_kv_start.empty() ? nullptr : pb.row_kv_start.data());
  p.num_threads = 2;
  const Status st = PartialAttentionCpu(p);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<double> cpu_o(o.begin(), o.end());
  EXPECT_LT(RelativeError(got.o, cpu_o), 2e-2);
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lse[i])) {
      EXPECT_EQ(got.lse[i], lse[i]) << "state " << i;
    } else {
      EXPECT_NEAR(got.lse[i], lse[i], 2e-2) << "state " << i;
    }
  }
}

std::vector<int32_t> Iota(int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Decode rows (row i is sequence i) over awkward lengths: empty, one key, not a page multiple.
Problem DecodeProblem(const Shape& s, const std::vector<int>& lens, uint32_t seed) {
  return Problem(s, lens, Iota(static_cast<int>(lens.size())),
                 std::vector<int32_t>(lens.begin(), lens.end()), seed);
}

TEST(CudaAttentionTest, GqaHeadDim128MatchesReferenceAndCpu) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  const Problem pb = DecodeProblem({32, 8, 128, 128, 16}, {0, 1, 37, 300, 1000}, 11);
  for (int splits : {1, 0, 4}) {
    SCOPED_TRACE(splits);
    Result r;
    RunCuda(pb, splits, CudaMlaPath::kAuto, r);
    ExpectMatches(pb, r, 1e-4, 1e-4);
    ExpectMatchesCpu(pb, r);
  }
}

TEST(CudaAttentionTest, GqaHeadDim64OddGroupAndPrefillRows) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  // SmolLM2's heads (9 q, 3 kv); rows of one sequence see growing prefixes (causal prefill).
  const Problem pb({9, 3, 64, 64, 7}, {50, 3}, {0, 0, 0, 1, 1}, {1, 20, 50, 0, 3}, 12);
  for (int splits : {1, 0}) {
    SCOPED_TRACE(splits);
    Result r;
    RunCuda(pb, splits, CudaMlaPath::kAuto, r);
    ExpectMatches(pb, r, 1e-4, 1e-4);
    ExpectMatchesCpu(pb, r);
  }
}

TEST(CudaAttentionTest, GqaGroupWiderThanOneBlock) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  const Problem pb = DecodeProblem({20, 2, 128, 128, 32}, {129, 2, 700}, 13);  // 10 heads per KV
  Result r;
  RunCuda(pb, 0, CudaMlaPath::kAuto, r);
  ExpectMatches(pb, r, 1e-4, 1e-4);
  ExpectMatchesCpu(pb, r);
}

TEST(CudaAttentionTest, MlaCudaCoreAnyHeadCount) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  for (int heads : {16, 20}) {
    SCOPED_TRACE(heads);
    const Problem pb = DecodeProblem({heads, 1, 576, 512, 64}, {0, 1, 33, 500}, 14 + heads);
    for (int splits : {1, 0}) {
      Result r;
      RunCuda(pb, splits, CudaMlaPath::kCudaCore, r);
      ExpectMatches(pb, r, 1e-4, 1e-4);
      ExpectMatchesCpu(pb, r);
    }
  }
}

// Rows that see [start, len) (a sliding window): starts inside a page and inside a split, an empty
// range, one key, a whole sequence, and windowed prefill rows; forced splits leave whole splits
// before a row's start empty.
TEST(CudaAttentionTest, WindowRowsGqaAndMla) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  for (const Shape& shape : {Shape{4, 1, 128, 128, 16}, Shape{16, 1, 576, 512, 64}}) {
    Problem pb(shape, {300, 90}, {0, 0, 0, 0, 1, 1, 1, 1}, {300, 300, 300, 200, 1, 40, 41, 90},
               70 + shape.num_q_heads);
    pb.row_kv_start = {0, 299, 45, 200, 0, 27, 28, 77};
    for (int splits : {1, 0, 4}) {
      SCOPED_TRACE(splits);
      for (CudaMlaPath path : {CudaMlaPath::kCudaCore, CudaMlaPath::kTensorCore}) {
        if (!shape.mla() && path == CudaMlaPath::kTensorCore) continue;
        Result r;
        RunCuda(pb, splits, path, r);
        ExpectMatches(pb, r, shape.mla() && path == CudaMlaPath::kTensorCore ? 1e-2 : 1e-4,
                      shape.mla() && path == CudaMlaPath::kTensorCore ? 2e-2 : 1e-4);
        ExpectMatchesCpu(pb, r);
      }
    }
  }
}

TEST(CudaAttentionTest, MlaTensorCore) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  for (int heads : {16, 32, 128}) {
    SCOPED_TRACE(heads);
    const Problem pb = DecodeProblem({heads, 1, 576, 512, 64}, {0, 1, 31, 33, 777}, 40 + heads);
    for (int splits : {1, 0, 3}) {
      SCOPED_TRACE(splits);
      Result r;
      RunCuda(pb, splits, CudaMlaPath::kTensorCore, r);
      ExpectMatches(pb, r, 1e-2, 2e-2);
      ExpectMatchesCpu(pb, r);
    }
  }
}

// Plan validation is host code: these run without a device.
PartialAttentionParams ValidGqa() {
  static const int32_t kTable[1] = {0};
  PartialAttentionParams p;
  p.num_rows = 1;
  p.num_q_heads = 32;
  p.kv.k = p.kv.v = kTable;
  p.kv.dtype = DataType::kBF16;
  p.kv.page_size = 16;
  p.kv.num_kv_heads = 8;
  p.kv.head_dim_qk = p.kv.head_dim_v = 128;
  p.kv.block_table = kTable;
  p.kv.max_pages_per_seq = 64;
  return p;
}

TEST(CudaAttentionPlanTest, ChoosesSplitsToFillTheDevice) {
  // 1 row x 8 KV heads = 8 blocks per split; 4 blocks on each of 132 SMs want 66 splits.
  const Expected<CudaAttentionPlan> plan = PlanPartialAttentionCuda(ValidGqa(), 1000, 132);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // len / 256 = 3 caps the splits: ceil(1000 / 3) = 334 -> 384 keys, ceil(1000 / 384) = 3.
  EXPECT_EQ(plan->num_splits, 3);
  EXPECT_EQ(plan->keys_per_split, 384);
  EXPECT_EQ(plan->workspace_bytes, 3u * 32 * (128 + 1) * 4);
}

TEST(CudaAttentionPlanTest, OneSplitNeedsNoWorkspace) {
  const Expected<CudaAttentionPlan> plan = PlanPartialAttentionCuda(ValidGqa(), 100, 132);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_splits, 1);
  EXPECT_EQ(plan->keys_per_split, 128);
  EXPECT_EQ(plan->workspace_bytes, 0u);
}

TEST(CudaAttentionPlanTest, RejectsWhatTheKernelsCannotServe) {
  auto message = [](const PartialAttentionParams& p, int max_len = 10, int splits = 0) {
    return PlanPartialAttentionCuda(p, max_len, 132, splits).status().message();
  };
  PartialAttentionParams p = ValidGqa();
  p.kv.format = KvPageFormat::kTiles16;
  EXPECT_EQ(message(p),
            "PartialAttentionCuda: kv.format must be KvPageFormat::kRows (the CUDA kernels read "
            "token rows; kTiles16 is the CPU kernels' layout)");
  p = ValidGqa();
  p.kv.dtype = DataType::kF32;
  EXPECT_EQ(message(p),
            "PartialAttentionCuda: kv.dtype must be kBF16 (the CUDA kernels read "
            "bf16 KV only)");
  p = ValidGqa();
  p.kv.head_dim_qk = p.kv.head_dim_v = 96;
  EXPECT_EQ(message(p),
            "PartialAttentionCuda: kv.head_dim_qk=96 must be 64 or 128 (GQA) or 576 "
            "(absorbed MLA)");
  p = ValidGqa();
  p.num_q_heads = 12;
  EXPECT_EQ(message(p),
            "PartialAttentionCuda: num_q_heads=12 must be a positive multiple of "
            "kv.num_kv_heads (8)");
  p = ValidGqa();
  p.kv.head_dim_qk = 576;
  p.kv.head_dim_v = 512;
  p.kv.num_kv_heads = 1;
  EXPECT_EQ(message(p),
            "PartialAttentionCuda: kv.v must be null for absorbed MLA (V is the "
            "latent prefix of each K row)");
  p.kv.v = nullptr;
  EXPECT_TRUE(PlanPartialAttentionCuda(p, 10, 132).ok());
  // Gemma 2's attention softcap: refused on both shapes, not ignored.
  for (PartialAttentionParams capped : {ValidGqa(), p}) {
    capped.softcap = 10.0f;
    const Status s = PlanPartialAttentionCuda(capped, 10, 132).status();
    EXPECT_EQ(s.error_id(), "CTXPAR-DCP-008") << s.ToString();
    EXPECT_EQ(s.message(),
              "The CUDA attention kernels do not apply attention logit softcapping (softcap = "
              "10.000000); the CPU kernels do.");
    EXPECT_EQ(PartialAttentionCuda(capped, {}, nullptr, nullptr).error_id(), "CTXPAR-DCP-008");
  }
  EXPECT_EQ(message(ValidGqa(), 64 * 16 + 1),
            "PartialAttentionCuda: max_kv_len=1025 must be <= kv.max_pages_per_seq * "
            "kv.page_size (1024)");
  EXPECT_EQ(message(ValidGqa(), 100, 257),
            "PartialAttentionCuda: num_splits=257 must be in [0, 256] (0 chooses)");
  EXPECT_EQ(message(ValidGqa(), 100, 3),
            "PartialAttentionCuda: num_splits=3 leaves empty splits for max_kv_len=100 (splits "
            "hold multiples of 64 keys)");
}

}  // namespace
}  // namespace ctxpar
