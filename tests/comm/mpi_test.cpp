// The collectives over MPI (run by CTest under mpiexec with 2 and 4 ranks).
#include <gtest/gtest.h>

#include "collective_checks.h"
#include "ctxpar/communicator.h"

namespace ctxpar {
namespace {

TEST(Mpi, EveryCollective) {
  ASSERT_TRUE(MpiCompiledIn());
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  Communicator& comm = **world;
  testing::CheckAllGather(comm);
  testing::CheckReduceScatter(comm);
  testing::CheckAllToAll(comm);
  testing::CheckAllToAllV(comm);
  testing::CheckAllReduce(comm);
  testing::CheckBroadcastAndBarrier(comm);
  testing::CheckSplit(comm);
  testing::CheckSharedWindow(comm);
}

TEST(Mpi, ErrorsComeBackAsStatusNamingTheCollective) {
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok());
  float x = 0;
  // MPI_ERRORS_RETURN turns the invalid root into a status instead of an abort.
  Status st = (*world)->Broadcast(&x, 1, DataType::kF32, (*world)->size());
  EXPECT_EQ(st.message().rfind("Broadcast: ", 0), 0u) << st.message();
}

}  // namespace
}  // namespace ctxpar
