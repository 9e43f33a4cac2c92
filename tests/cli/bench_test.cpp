// `ctxpar bench` option checks: values that only look like numbers, NaN and thread counts beyond
// the machine are refused with their catalog entry before anything is measured.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "cli/run_ctxpar.h"

namespace ctxpar {
namespace {

using testing::RunCtxpar;

void ExpectRefused(const std::vector<std::string>& args, const std::string& id,
                   const std::string& text) {
  testing::RunResult r = RunCtxpar(args);
  EXPECT_EQ(r.exit_status, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // refused before any measurement
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("run: ctxpar explain " + id), std::string::npos) << r.err;
}

TEST(CliBench, RefusesCountsThatAreNotCounts) {
  for (const char* contexts : {"1e9", "4.5k", "4k,,8k", "", "-4", "99999999999", "20000k"}) {
    SCOPED_TRACE(contexts);
    ExpectRefused({"bench", "attention", "--contexts", contexts}, "CTXPAR-FLAG-008",
                  "for --contexts: ");
  }
  ExpectRefused({"bench", "attention", "--contexts", "1e9"}, "CTXPAR-FLAG-008",
                "Invalid value '1e9' for --contexts: not a count; valid values: comma-separated "
                "integers from 1 to 16777216, k for 1024 (e.g. 4k,32k).");
}

TEST(CliBench, RefusesThreadCountsTheMachineCannotRun) {
  const std::string max = std::to_string(std::max(1u, std::thread::hardware_concurrency()));
  for (const char* threads : {"100000", "2147483647", "0", "1,100000"}) {
    SCOPED_TRACE(threads);
    ExpectRefused({"bench", "attention", "--threads", threads}, "CTXPAR-FLAG-007",
                  "out of range for this machine, which has " + max + " hardware threads");
  }
}

TEST(CliBench, RefusesDurationsThatAreNotFinite) {
  for (const char* seconds : {"nan", "inf", "-inf", "0", "601"}) {
    SCOPED_TRACE(seconds);
    ExpectRefused({"bench", "combine", "--seconds", seconds}, "CTXPAR-FLAG-008", "for --seconds: ");
  }
  ExpectRefused({"bench", "combine", "--seconds", "nan"}, "CTXPAR-FLAG-008",
                "Invalid value 'nan' for --seconds: not a finite number; valid values: numbers "
                "from 0.01 to 600.");
}

// A repeated option keeps its last value (CLI11 refused the repeat): the last --seconds is the
// one checked.
TEST(CliBench, RepeatedOptionKeepsTheLastValue) {
  ExpectRefused({"bench", "combine", "--seconds", "1", "--seconds", "nan"}, "CTXPAR-FLAG-008",
                "Invalid value 'nan' for --seconds");
  ExpectRefused({"bench", "attention", "--contexts", "4k", "--contexts", "1e9"}, "CTXPAR-FLAG-008",
                "Invalid value '1e9' for --contexts");
}

}  // namespace
}  // namespace ctxpar
