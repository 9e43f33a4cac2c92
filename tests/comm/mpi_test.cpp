// The collectives over MPI (run by CTest under mpiexec with 2 and 4 ranks), their errors, and
// their deadline (CTXPAR_COLLECTIVE_TIMEOUT).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
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

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// A world whose collectives wait at most `seconds`.
std::unique_ptr<Communicator> WorldWithTimeout(const char* seconds) {
  setenv("CTXPAR_COLLECTIVE_TIMEOUT", seconds, 1);
  auto world = MakeMpiWorld();
  unsetenv("CTXPAR_COLLECTIVE_TIMEOUT");
  EXPECT_TRUE(world.ok()) << world.status().ToString();
  return world.ok() ? std::move(*world) : nullptr;
}

// Rank 1 sleeps past a 1 s deadline: the others fail their all-reduce with CTXPAR-COMM-001 naming
// rank 1, after sleeping between polls rather than spinning. Rank 1 then joins the all-reduce the
// others left pending, so the job goes on to the next test.
TEST(Mpi, ACollectiveThatWaitsPastTheDeadlineNamesTheSilentRank) {
  std::unique_ptr<Communicator> comm = WorldWithTimeout("1");
  ASSERT_NE(comm, nullptr);
  {
    const Status barrier = comm->Barrier();
    ASSERT_TRUE(barrier.ok()) << barrier.ToString();
  }
  static float value = 1;  // MPI may still write it after the failed call returns
  if (comm->rank() == 1) {
    sleep(5);
    EXPECT_TRUE(comm->AllReduce(&value, &value, 1, DataType::kF32, ReduceOp::kSum).ok());
    return;
  }
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = comm->AllReduce(&value, &value, 1, DataType::kF32, ReduceOp::kSum);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  EXPECT_EQ(st.error_id(), "CTXPAR-COMM-001") << st.ToString();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("AllReduce on rank " + std::to_string(comm->rank()) + " waited "),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(" for rank 1 of " + std::to_string(comm->size()) +
                              ", which did not answer"),
            std::string::npos)
      << st.message();
  EXPECT_GE(wall, 1.0);
  EXPECT_LT(wall, 4.5);  // the deadline plus the 2 s answer window, and some slack
  EXPECT_LT(cpu, 0.5 * wall) << "the waiting rank spun: " << cpu << " s of CPU in " << wall;
}

// AllowUnboundedWait lifts the deadline for the next collective only.
TEST(Mpi, AnUnboundedWaitOutlastsTheDeadline) {
  std::unique_ptr<Communicator> comm = WorldWithTimeout("1");
  ASSERT_NE(comm, nullptr);
  {
    const Status barrier = comm->Barrier();
    ASSERT_TRUE(barrier.ok()) << barrier.ToString();
  }
  if (comm->rank() == 1) sleep(2);
  int x = 1;
  comm->AllowUnboundedWait();
  const Status st = comm->AllReduce(&x, &x, 1, DataType::kI32, ReduceOp::kSum);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(x, comm->size());
}

TEST(Mpi, RefusesATimeoutThatIsNotSeconds) {
  setenv("CTXPAR_COLLECTIVE_TIMEOUT", "5m", 1);
  auto world = MakeMpiWorld();
  unsetenv("CTXPAR_COLLECTIVE_TIMEOUT");
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().error_id(), "CTXPAR-COMM-003");
}

}  // namespace
}  // namespace ctxpar
