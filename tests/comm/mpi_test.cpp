// The collectives over MPI (run by CTest under mpiexec with 2 and 4 ranks).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "collective_checks.h"
#include "ctxpar/communicator.h"

namespace ctxpar {
namespace {

TEST(Mpi, EveryCollective) {
  ASSERT_TRUE(MpiCompiledIn());
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  Communicator& comm = **world;
  testing::CheckEveryCollective(comm);
}

TEST(Mpi, ErrorsComeBackAsStatusNamingTheCollective) {
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok());
  float x = 0;
  // MPI_ERRORS_RETURN turns the invalid root into a status instead of an abort.
  Status st = (*world)->Broadcast(&x, 1, DataType::kF32, (*world)->size());
  EXPECT_EQ(st.message().rfind("Broadcast: ", 0), 0u) << st.message();
}

// Rank 1 sends more than rank 0 expects: MPI reports truncation on the receiver, which comes back
// as a Status naming the collective instead of aborting the job.
TEST(Mpi, TruncatedAllToAllVIsAStatus) {
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok());
  Communicator& comm = **world;
  const int n = comm.size(), me = comm.rank();
  std::vector<std::size_t> sc(n, 1), sd(n), rc(n, 1), rd(n);
  for (int j = 0; j < n; ++j) sd[j] = rd[j] = 4 * j;
  if (me == 1) sc[0] = 4;
  std::vector<uint8_t> send(4 * n), recv(4 * n);
  Status st = comm.AllToAllV(send.data(), sc, sd, recv.data(), rc, rd, DataType::kU8);
  if (me == 0) {
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.message().rfind("AllToAllV: MPI error", 0), 0u) << st.message();
  }
}

}  // namespace
}  // namespace ctxpar
