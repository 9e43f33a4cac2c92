// A rank that dies during an MPI run ends the whole job with a non-zero status within seconds.
// Launches `mpiexec -n 3 death_helper HOW` and bounds the wall time.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr double kBoundSeconds = 20.0;

struct Outcome {
  int exit_status;
  double seconds;
  std::string output;
};

Outcome Launch(const std::string& how) {
  // `timeout` turns a hang into a failure instead of a stuck CTest run.
  const std::string cmd =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
      "OMPI_MCA_rmaps_base_oversubscribe=1 timeout -s KILL 60 " CTXPAR_MPIEXEC
      " -n 3 " CTXPAR_DEATH_HELPER " " +
      how + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  Outcome out{-1, 0, {}};
  if (pipe == nullptr) return out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), pipe) != nullptr) out.output += buf;
  const int status = pclose(pipe);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

class DeathTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeathTest, JobEndsNonZeroWithinBound) {
  const Outcome out = Launch(GetParam());
  EXPECT_NE(out.exit_status, 0) << out.output;
  EXPECT_NE(out.exit_status, 128 + SIGKILL) << "the job hung until timeout killed it\n"
                                            << out.output;
  EXPECT_LT(out.seconds, kBoundSeconds) << out.output;
  EXPECT_FALSE(out.output.empty()) << "the launcher said nothing about the dead rank";
}

INSTANTIATE_TEST_SUITE_P(Ways, DeathTest, ::testing::Values("abort", "exit1", "exit0"));

}  // namespace
