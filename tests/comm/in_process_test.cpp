#include <gtest/gtest.h>

#include <string>

#include "collective_checks.h"
#include "ctxpar/communicator.h"

namespace ctxpar {
namespace {

class InProcessTest : public ::testing::TestWithParam<int> {};

TEST_P(InProcessTest, EveryCollective) {
  ASSERT_TRUE(RunInProcess(GetParam(), [](Communicator& comm) {
                testing::CheckEveryCollective(comm);
                return Status::Ok();
              }).ok());
}

INSTANTIATE_TEST_SUITE_P(Sizes, InProcessTest, ::testing::Values(1, 2, 3, 4, 8));

TEST(InProcess, MismatchedCountFailsOnEveryRankNamingTheCollective) {
  std::vector<std::string> messages(3);
  Status st = RunInProcess(3, [&](Communicator& comm) {
    std::vector<float> send(4), recv(12);
    const std::size_t count = comm.rank() == 2 ? 3 : 4;
    Status s = comm.AllGather(send.data(), recv.data(), count, DataType::kF32);
    messages[comm.rank()] = s.message();
    if (s.ok()) return Status::Ok();
    // The group is still usable after the refused call.
    return comm.Barrier();
  });
  EXPECT_TRUE(st.ok());
  for (const std::string& m : messages) {
    EXPECT_EQ(m, "AllGather: rank 0 passed count 4 but rank 2 passed 3");
  }
}

TEST(InProcess, MismatchedCollectiveAndDtype) {
  Status st = RunInProcess(2, [](Communicator& comm) {
    float x = 0;
    if (comm.rank() == 0) return comm.AllReduce(&x, &x, 1, DataType::kF32, ReduceOp::kSum);
    return comm.Broadcast(&x, 1, DataType::kF32, 0);
  });
  EXPECT_EQ(st.message(), "AllReduce: rank 0 called AllReduce but rank 1 called Broadcast");
  st = RunInProcess(2, [](Communicator& comm) {
    float x[2] = {};
    return comm.AllToAll(x, x + 1, 1, comm.rank() == 0 ? DataType::kF32 : DataType::kI32);
  });
  EXPECT_EQ(st.message(), "AllToAll: rank 0 passed data type f32 but rank 1 passed i32");
}

TEST(InProcess, AllToAllVCountsThatDisagree) {
  Status st = RunInProcess(2, [](Communicator& comm) {
    std::vector<std::size_t> sc = {1, 1}, sd = {0, 1}, rc = {1, comm.rank() == 0 ? 2u : 1u},
                             rd = {0, 1};
    uint8_t send[2] = {}, recv[3] = {};
    return comm.AllToAllV(send, sc, sd, recv, rc, rd, DataType::kU8);
  });
  EXPECT_EQ(st.message(), "AllToAllV: rank 1 sends 1 elements to rank 0, which expects 2");
  st = RunInProcess(2, [](Communicator& comm) {
    std::vector<std::size_t> one = {1};
    uint8_t b[2] = {};
    return comm.AllToAllV(b, one, one, b, one, one, DataType::kU8);
  });
  EXPECT_EQ(st.message(),
            "AllToAllV: counts and displacements need 2 entries each (one per rank), got send "
            "1/1 and recv 1/1");
}

TEST(InProcess, ARankThatReturnsEarlyFailsItsPeersInsteadOfHangingThem) {
  std::vector<std::string> messages(3);
  Status st = RunInProcess(3, [&](Communicator& comm) {
    if (comm.rank() == 2) return Status::Ok();
    float x = 1, all[3];
    Status s = comm.AllGather(&x, all, 1, DataType::kF32);
    messages[comm.rank()] = s.message();
    return s;
  });
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(messages[r], "AllGather: rank 2 left the in-process group before the call completed");
  }
}

TEST(InProcess, SplitRejectsNegativeColor) {
  auto comms = MakeInProcessGroup(1);
  auto sub = comms[0]->Split(-1, 0);
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().message(), "Split: color must be >= 0, got -1");
}

TEST(InProcess, SplitIntoDcpGroupsOfThreeInsideSix) {
  ASSERT_TRUE(RunInProcess(6, [](Communicator& comm) {
                auto dcp = comm.Split(comm.rank() / 3, comm.rank());
                EXPECT_TRUE(dcp.ok());
                EXPECT_EQ((*dcp)->size(), 3);
                EXPECT_EQ((*dcp)->rank(), comm.rank() % 3);
                std::vector<int32_t> all(3);
                int32_t me = comm.rank();
                EXPECT_TRUE((*dcp)->AllGather(&me, all.data(), 1, DataType::kI32).ok());
                const int base = (comm.rank() / 3) * 3;
                EXPECT_EQ(all, (std::vector<int32_t>{base, base + 1, base + 2}));
                return Status::Ok();
              }).ok());
}

}  // namespace
}  // namespace ctxpar
