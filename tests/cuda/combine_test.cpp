// MergeStatesCuda and the a2a pack / unpack against a float64 merge, on random states with
// empty (-inf), poisoned (NaN, +inf) partials mixed in; outputs are poisoned (NaN) first.
// Tolerances: fp32 planes 1e-6 relative; bf16 slots round each O element once (2^-9): 4e-3.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "ctxpar/cuda_combine.h"
#include "cuda_test_util.h"

namespace ctxpar {
namespace {

using testing::DeviceBuffer;
using testing::Download;
using testing::Poison;
using testing::RelativeError;
using testing::Upload;

// n partial states per (state): O [n][states][dim], lse [n][states].
struct States {
  int n, num_states, dim;
  std::vector<float> o, lse;
};

States RandomStates(int n, int num_states, int dim, uint32_t seed) {
  std::mt19937 rng(seed);
  States s{n, num_states, dim,
           testing::RandomFloats(rng, static_cast<size_t>(n) * num_states * dim, -1.0f, 1.0f),
           testing::RandomFloats(rng, static_cast<size_t>(n) * num_states, -20.0f, 20.0f)};
  // State 0: every partial empty. State 1: one NaN and one +inf partial (weight 0), rest real.
  for (int r = 0; r < n; ++r) s.lse[static_cast<size_t>(r) * num_states] = -INFINITY;
  if (num_states > 1 && n > 1) {
    s.lse[1] = std::numeric_limits<float>::quiet_NaN();
    s.lse[static_cast<size_t>(num_states) + 1] = INFINITY;
  }
  for (int r = 0; r < n; ++r) {
    for (int st = 0; st < num_states; ++st) {
      if (s.lse[static_cast<size_t>(r) * num_states + st] == -INFINITY) {
        for (int d = 0; d < dim; ++d) s.o[(static_cast<size_t>(r) * num_states + st) * dim + d] = 0;
      }
    }
  }
  return s;
}

// The merge of merge.h in float64, from the values the kernel reads (bf16-rounded when
// `bf16_o`).
void ReferenceMerge(const States& s, bool bf16_o, std::vector<double>& o,
                    std::vector<double>& lse) {
  o.assign(static_cast<size_t>(s.num_states) * s.dim, 0.0);
  lse.assign(s.num_states, -INFINITY);
  for (int st = 0; st < s.num_states; ++st) {
    std::vector<double> l(s.n);
    double m = -INFINITY;
    for (int r = 0; r < s.n; ++r) {
      const double x = s.lse[static_cast<size_t>(r) * s.num_states + st];
      l[r] = (std::isnan(x) || x == INFINITY) ? -INFINITY : x;
      m = std::max(m, l[r]);
    }
    if (m == -INFINITY) continue;
    double sum = 0.0;
    for (int r = 0; r < s.n; ++r) sum += std::exp(l[r] - m);
    for (int r = 0; r < s.n; ++r) {
      const double w = std::exp(l[r] - m) / sum;
      for (int d = 0; d < s.dim; ++d) {
        float v = s.o[(static_cast<size_t>(r) * s.num_states + st) * s.dim + d];
        if (bf16_o) v = Bf16ToFloat(FloatToBf16(v));
        o[static_cast<size_t>(st) * s.dim + d] += w * v;
      }
    }
    lse[st] = m + std::log(sum);
  }
}

void ExpectMerged(const std::vector<float>& o, const std::vector<float>& lse,
                  const std::vector<double>& o_ref, const std::vector<double>& lse_ref,
                  double tol) {
  for (float x : o) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(RelativeError(o, o_ref), tol);
  for (size_t i = 0; i < lse_ref.size(); ++i) {
    if (std::isinf(lse_ref[i])) {
      EXPECT_EQ(lse[i], -INFINITY) << i;
    } else {
      EXPECT_NEAR(lse[i], lse_ref[i], 1e-5 * std::max(1.0, std::abs(lse_ref[i]))) << i;
    }
  }
}

TEST(CudaMergeTest, MergesPlanesAsTheFloat64Reference) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  for (int n : {1, 3, 8, 17}) {
    for (DataType dtype : {DataType::kF32, DataType::kBF16}) {
      SCOPED_TRACE(n);
      const bool bf16 = dtype == DataType::kBF16;
      const States s = RandomStates(n, 37, 128, 100 + n);
      std::vector<uint16_t> o_bits(s.o.size());
      for (size_t i = 0; i < s.o.size(); ++i) o_bits[i] = FloatToBf16(s.o[i]);
      DeviceBuffer parts(s.o.size() * (bf16 ? 2 : 4)), lse_parts(s.lse.size() * 4),
          out(static_cast<size_t>(s.num_states) * s.dim * 4), out_lse(s.num_states * 4);
      ASSERT_EQ(bf16 ? Upload(parts, o_bits) : Upload(parts, s.o), cudaSuccess);
      ASSERT_EQ(Upload(lse_parts, s.lse), cudaSuccess);
      ASSERT_EQ(Poison(out), cudaSuccess);
      ASSERT_EQ(Poison(out_lse), cudaSuccess);
      CudaMergeParams p;
      p.o_parts = parts.get();
      p.lse_parts = lse_parts.get<float>();
      p.o_dtype = dtype;
      p.n = n;
      p.num_states = s.num_states;
      p.head_dim = s.dim;
      p.o = out.get<float>();
      p.lse = out_lse.get<float>();
      const Status st = MergeStatesCuda(p, nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> o(out.bytes() / 4), lse(s.num_states);
      ASSERT_EQ(Download(o, out), cudaSuccess);
      ASSERT_EQ(Download(lse, out_lse), cudaSuccess);
      std::vector<double> o_ref, lse_ref;
      ReferenceMerge(s, bf16, o_ref, lse_ref);
      ExpectMerged(o, lse, o_ref, lse_ref, 1e-6);
    }
  }
}

// n ranks each pack their widened states; the all-to-all is played on the host (slot j of rank r
// goes to slot r of rank j); each rank unpacks and merges its h heads.
TEST(CudaA2aTest, PackExchangeUnpackEqualsTheMerge) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  for (DataType dtype : {DataType::kBF16, DataType::kF32}) {
    const int n = 4, batch = 3, h = 2, dim = 512;
    CudaA2aParams a{n, batch, h, dim, dtype};
    const size_t slot = A2aSlotBytes(a);
    // rank r's widened states: o [batch, n*h, dim], lse [batch, n*h]; as States, "partial r".
    const States s = RandomStates(n, batch * n * h, dim, 7);
    std::vector<std::vector<uint8_t>> sent(n, std::vector<uint8_t>(n * slot));
    for (int r = 0; r < n; ++r) {
      DeviceBuffer o(static_cast<size_t>(batch) * n * h * dim * 4), lse(batch * n * h * 4),
          send(n * slot);
      const std::vector<float> o_r(s.o.begin() + static_cast<size_t>(r) * batch * n * h * dim,
                                   s.o.begin() + static_cast<size_t>(r + 1) * batch * n * h * dim);
      const std::vector<float> lse_r(s.lse.begin() + r * batch * n * h,
                                     s.lse.begin() + (r + 1) * batch * n * h);
      ASSERT_EQ(Upload(o, o_r), cudaSuccess);
      ASSERT_EQ(Upload(lse, lse_r), cudaSuccess);
      ASSERT_EQ(Poison(send), cudaSuccess);
      const Status st = PackA2aCuda(a, o.get<float>(), lse.get<float>(), send.get(), nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(Download(sent[r], send), cudaSuccess);
    }
    for (int j = 0; j < n; ++j) {
      std::vector<uint8_t> recv(n * slot);
      for (int r = 0; r < n; ++r) {
        std::copy(sent[r].begin() + j * slot, sent[r].begin() + (j + 1) * slot,
                  recv.begin() + r * slot);
      }
      DeviceBuffer recv_d(recv.size()), out(static_cast<size_t>(batch) * h * dim * 4),
          out_lse(batch * h * 4);
      ASSERT_EQ(Upload(recv_d, recv), cudaSuccess);
      ASSERT_EQ(Poison(out), cudaSuccess);
      ASSERT_EQ(Poison(out_lse), cudaSuccess);
      const Status st =
          UnpackMergeA2aCuda(a, recv_d.get(), out.get<float>(), out_lse.get<float>(), nullptr);
      ASSERT_TRUE(st.ok()) << st.ToString();
      std::vector<float> o(batch * h * dim), lse(batch * h);
      ASSERT_EQ(Download(o, out), cudaSuccess);
      ASSERT_EQ(Download(lse, out_lse), cudaSuccess);
      // Rank j's heads [j*h, (j+1)*h) of every row, as n partial states.
      States mine{n, batch * h, dim, {}, {}};
      for (int r = 0; r < n; ++r) {
        for (int b = 0; b < batch; ++b) {
          for (int hh = 0; hh < h; ++hh) {
            const size_t src = (static_cast<size_t>(r) * batch + b) * n * h + j * h + hh;
            mine.lse.push_back(s.lse[src]);
            mine.o.insert(mine.o.end(), s.o.begin() + src * dim, s.o.begin() + (src + 1) * dim);
          }
        }
      }
      std::vector<double> o_ref, lse_ref;
      ReferenceMerge(mine, dtype == DataType::kBF16, o_ref, lse_ref);
      ExpectMerged(o, lse, o_ref, lse_ref, 1e-6);
    }
  }
}

TEST(CudaA2aTest, SlotLayoutIsPaddedTo16Bytes) {
  // O: 3 * 2 * 64 bf16 = 768 bytes; lse: 6 floats = 24 -> 32 bytes.
  EXPECT_EQ(A2aSlotBytes({4, 3, 2, 64, DataType::kBF16}), 800u);
  // O: 1 * 1 * 8 fp32 = 32 bytes; lse: 4 -> 16 bytes.
  EXPECT_EQ(A2aSlotBytes({2, 1, 1, 8, DataType::kF32}), 48u);
}

TEST(CudaA2aTest, RejectsBadShapes) {
  EXPECT_EQ(
      PackA2aCuda({0, 1, 1, 8, DataType::kBF16}, nullptr, nullptr, nullptr, nullptr).message(),
      "PackA2aCuda: n=0 must be in [1, 256]");
  EXPECT_EQ(UnpackMergeA2aCuda({2, 1, 1, 12, DataType::kBF16}, nullptr, nullptr, nullptr, nullptr)
                .message(),
            "UnpackMergeA2aCuda: head_dim=12 must be a positive multiple of 8");
  CudaMergeParams p;
  p.n = 1;
  p.num_states = 1;
  p.head_dim = 8;
  EXPECT_EQ(MergeStatesCuda(p, nullptr).message(),
            "MergeStatesCuda: o_parts must be a non-null, 16-byte aligned device pointer");
}

}  // namespace
}  // namespace ctxpar
