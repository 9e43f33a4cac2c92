// The CUDA IPC one-sided exchange under mpiexec, every rank sharing the one GPU: for several
// steps, each rank packs fresh random widened states (seeded by rank and step), exchanges them,
// unpacks and merges its heads, and compares with a float64 merge of what every rank packed.
// Tolerance: bf16 slots round each O element once (2^-9 relative): 4e-3; lse 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/cuda_combine.h"
#include "ctxpar/cuda_ipc_exchange.h"
#include "cuda_test_util.h"

namespace ctxpar {
namespace {

using testing::DeviceBuffer;
using testing::Download;
using testing::Poison;
using testing::RelativeError;
using testing::Upload;

constexpr int kBatch = 3, kHeads = 2, kDim = 512, kSteps = 5;

// Rank r's widened states at a step: o [batch, n*h, dim], lse [batch, n*h] (some -inf).
void States(int n, int rank, int step, std::vector<float>& o, std::vector<float>& lse) {
  std::mt19937 rng(1000 * step + rank);
  o = testing::RandomFloats(rng, static_cast<size_t>(kBatch) * n * kHeads * kDim, -1.0f, 1.0f);
  lse = testing::RandomFloats(rng, static_cast<size_t>(kBatch) * n * kHeads, -10.0f, 10.0f);
  lse[(rank + step) % lse.size()] = -INFINITY;
}

TEST(CudaIpcExchangeTest, ExchangesAndMergesEveryStep) {
  std::unique_ptr<Communicator> world;
  {
    Expected<std::unique_ptr<Communicator>> w = MakeMpiWorld();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    world = std::move(*w);
  }
  // Every rank decides alike: the device count is a property of the machine.
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  const int n = world->size(), me = world->rank();
  const CudaA2aParams a{n, kBatch, kHeads, kDim, DataType::kBF16};
  Expected<std::unique_ptr<CudaIpcExchange>> ex = CudaIpcExchange::Create(*world, A2aSlotBytes(a));
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();

  DeviceBuffer o_d(static_cast<size_t>(kBatch) * n * kHeads * kDim * 4),
      lse_d(static_cast<size_t>(kBatch) * n * kHeads * 4), send(n * A2aSlotBytes(a)),
      out(static_cast<size_t>(kBatch) * kHeads * kDim * 4), out_lse(kBatch * kHeads * 4);
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(step);
    std::vector<float> o, lse;
    States(n, me, step, o, lse);
    ASSERT_EQ(Upload(o_d, o), cudaSuccess);
    ASSERT_EQ(Upload(lse_d, lse), cudaSuccess);
    ASSERT_EQ(Poison(out), cudaSuccess);
    ASSERT_EQ(Poison(out_lse), cudaSuccess);
    ASSERT_TRUE(PackA2aCuda(a, o_d.get<float>(), lse_d.get<float>(), send.get(), nullptr).ok());
    ASSERT_TRUE((*ex)->Exchange(send.get(), nullptr).ok());
    ASSERT_TRUE(
        UnpackMergeA2aCuda(a, (*ex)->recv(), out.get<float>(), out_lse.get<float>(), nullptr).ok());
    const Status st = (*ex)->Synchronize(nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();

    std::vector<float> got(kBatch * kHeads * kDim), got_lse(kBatch * kHeads);
    ASSERT_EQ(Download(got, out), cudaSuccess);
    ASSERT_EQ(Download(got_lse, out_lse), cudaSuccess);
    std::vector<double> ref(got.size(), 0.0), ref_lse(got_lse.size(), -INFINITY);
    std::vector<std::vector<float>> all_o(n), all_lse(n);
    for (int r = 0; r < n; ++r) States(n, r, step, all_o[r], all_lse[r]);
    for (int b = 0; b < kBatch; ++b) {
      for (int hh = 0; hh < kHeads; ++hh) {
        const size_t src = static_cast<size_t>(b) * n * kHeads + me * kHeads + hh;
        double m = -INFINITY, sum = 0.0;
        for (int r = 0; r < n; ++r) m = std::max(m, static_cast<double>(all_lse[r][src]));
        if (m == -INFINITY) continue;
        for (int r = 0; r < n; ++r) sum += std::exp(all_lse[r][src] - m);
        const size_t dst = static_cast<size_t>(b) * kHeads + hh;
        for (int r = 0; r < n; ++r) {
          const double w = std::exp(all_lse[r][src] - m) / sum;
          for (int d = 0; d < kDim; ++d) {
            ref[dst * kDim + d] += w * Bf16ToFloat(FloatToBf16(all_o[r][src * kDim + d]));
          }
        }
        ref_lse[dst] = m + std::log(sum);
      }
    }
    for (float x : got) ASSERT_TRUE(std::isfinite(x));
    EXPECT_LT(RelativeError(got, ref), 1e-6);
    for (size_t i = 0; i < ref_lse.size(); ++i) {
      EXPECT_NEAR(got_lse[i], ref_lse[i], 1e-5 * std::max(1.0, std::abs(ref_lse[i]))) << i;
    }
  }
}

// Without a device every rank's set-up fails: each gets a Status, none waits for the others in
// a collective, and the job ends (the failure is agreed collectively, then no barrier runs).
TEST(CudaIpcExchangeTest, FailedSetUpIsAStatusOnEveryRank) {
  std::unique_ptr<Communicator> world;
  {
    Expected<std::unique_ptr<Communicator>> w = MakeMpiWorld();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    world = std::move(*w);
  }
  if (CudaDeviceCount().ok()) GTEST_SKIP() << "a CUDA device is present: set-up succeeds here";
  const CudaA2aParams a{world->size(), kBatch, kHeads, kDim, DataType::kBF16};
  Expected<std::unique_ptr<CudaIpcExchange>> ex = CudaIpcExchange::Create(*world, A2aSlotBytes(a));
  EXPECT_FALSE(ex.ok());
  // The group is still usable: nobody was left inside a collective of the failed set-up.
  EXPECT_TRUE(world->Barrier().ok());
}

}  // namespace
}  // namespace ctxpar
