// The NCCL communicator with one rank (NCCL refuses several ranks on one GPU): every collective
// on device buffers gives the single-rank result, and the byte counters stay at zero traffic.
#include "ctxpar/nccl_communicator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "ctxpar/communicator.h"
#include "cuda_test_util.h"

namespace ctxpar {
namespace {

using testing::DeviceBuffer;
using testing::Download;
using testing::Poison;
using testing::Upload;

TEST(NcclCommunicatorTest, OneRankCollectivesOnDeviceBuffers) {
  CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
  if (!NcclCompiledIn()) GTEST_SKIP() << "built without NCCL";
  std::vector<std::unique_ptr<Communicator>> group = MakeInProcessGroup(1);
  Expected<std::unique_ptr<Communicator>> nccl = MakeNcclCommunicator(*group[0]);
  ASSERT_TRUE(nccl.ok()) << nccl.status().ToString();
  Communicator& c = **nccl;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);

  std::mt19937 rng(5);
  const std::vector<float> x = testing::RandomFloats(rng, 1000, -1.0f, 1.0f);
  DeviceBuffer a(x.size() * 4), b(x.size() * 4);
  ASSERT_EQ(Upload(a, x), cudaSuccess);
  std::vector<float> got(x.size());
  auto expect_copy = [&](const Status& st) {
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(Download(got, b), cudaSuccess);
    EXPECT_EQ(got, x);
    ASSERT_EQ(Poison(b), cudaSuccess);
  };
  ASSERT_EQ(Poison(b), cudaSuccess);
  expect_copy(c.AllGather(a.get(), b.get(), x.size(), DataType::kF32));
  expect_copy(c.ReduceScatter(a.get(), b.get(), x.size(), DataType::kF32));
  expect_copy(c.AllToAll(a.get(), b.get(), x.size(), DataType::kF32));
  const std::vector<size_t> counts{x.size()}, displs{0};
  expect_copy(c.AllToAllV(a.get(), counts, displs, b.get(), counts, displs, DataType::kF32));
  expect_copy(c.AllReduce(a.get(), b.get(), x.size(), DataType::kF32, ReduceOp::kSum));
  ASSERT_TRUE(c.Broadcast(a.get(), x.size(), DataType::kF32, 0).ok());
  ASSERT_TRUE(c.Barrier().ok());
  EXPECT_EQ(c.counters().Total().bytes_sent, 0u);
  EXPECT_EQ(c.counters()[Collective::kAllToAll].calls, 1u);
  EXPECT_EQ(c.Broadcast(a.get(), 1, DataType::kF32, 1).message(),
            "Broadcast: root 1 is not a rank of a group of 1");

  Expected<std::unique_ptr<Communicator>> sub = c.Split(0, 0);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  expect_copy((*sub)->AllGather(a.get(), b.get(), x.size(), DataType::kF32));
  EXPECT_EQ(c.AllocateSharedWindow(64).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ctxpar
