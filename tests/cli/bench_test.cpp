// `ctxpar bench` option checks: values that only look like numbers, NaN and thread counts beyond
// the machine are refused with their catalog entry before anything is measured; and the options
// that change what is measured reach the report.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
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
  for (const char* contexts : {"1e9", "4.5k", "4k,,8k", "", "-4"}) {
    SCOPED_TRACE(contexts);
    ExpectRefused({"bench", "attention", "--contexts", contexts}, "CTXPAR-FLAG-008",
                  "for --contexts: not a count");
  }
  // Out of range is FLAG-003, as for every flag (FLAG-008's text was the same, and explain
  // --message named FLAG-003).
  for (const char* contexts : {"99999999999", "20000k", "0"}) {
    SCOPED_TRACE(contexts);
    ExpectRefused({"bench", "attention", "--contexts", contexts}, "CTXPAR-FLAG-003",
                  "for --contexts: out of range");
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
  for (const char* seconds : {"nan", "inf", "-inf"}) {
    SCOPED_TRACE(seconds);
    ExpectRefused({"bench", "combine", "--seconds", seconds}, "CTXPAR-FLAG-008",
                  "for --seconds: not a finite number");
  }
  for (const char* seconds : {"0", "601"}) {
    SCOPED_TRACE(seconds);
    ExpectRefused({"bench", "combine", "--seconds", seconds}, "CTXPAR-FLAG-003",
                  "for --seconds: out of range");
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

// CLI11's own checks (a Range, a number) report the catalog's entries, as the launch flags do.
TEST(CliBench, RangeAndNumberErrorsNameTheirCatalogEntries) {
  ExpectRefused({"bench", "attention", "--reps", "0"}, "CTXPAR-FLAG-003",
                "Invalid value '0' for --reps: out of range; valid values: [1, 100].");
  ExpectRefused({"bench", "attention", "--prefill", "-1"}, "CTXPAR-FLAG-003",
                "Invalid value '-1' for --prefill: out of range; valid values: [0, 65536].");
  ExpectRefused({"bench", "sampling", "--vocab", "1"}, "CTXPAR-FLAG-003",
                "Invalid value '1' for --vocab: out of range");
  ExpectRefused({"bench", "matmul", "--reps", "two"}, "CTXPAR-FLAG-002",
                "Invalid value 'two' for --reps: not an integer");
}

// Values the benchmark cannot measure anything with are refused, not run into an empty table
// or a crash.
TEST(CliBench, RefusesWhatItCannotMeasure) {
  ExpectRefused({"bench", "combine", "--ranks", "3"}, "CTXPAR-FLAG-008",
                "Invalid value 3 for --ranks: it divides the heads of no shape (128, 32 and 4)");
  const char* model = std::getenv("CTXPAR_MODEL");
  if (model == nullptr) GTEST_SKIP() << "CTXPAR_MODEL is not set";
  ExpectRefused({"bench", "deepseek", "--model-path", model, "--ranks", "3"}, "CTXPAR-FLAG-008",
                "its model is a LlamaForCausalLM, not a DeepSeek one");
}

// The int8 path takes Q4_1 and Q8_0 only: bench matmul refuses it for Gemma 3's types, and a model
// it has no shapes for, before measuring.
TEST(CliBench, MatMulRefusesWhatTheKernelsDoNotTake) {
  ExpectRefused({"bench", "matmul", "--model", "gemma3", "--act", "q8"}, "CTXPAR-FLAG-008",
                "Invalid value q8 for --act: int8 activations take Q4_1 and Q8_0 weights; gemma3 "
                "has Q5_0");
  ExpectRefused({"bench", "matmul", "--model", "llama"}, "CTXPAR-FLAG-005",
                "--model: llama not in {smollm2,smollm2-bf16,gemma3}");
  ExpectRefused({"bench", "matmul", "--model", "smollm2-bf16", "--act", "q8"}, "CTXPAR-FLAG-008",
                "Invalid value q8 for --act: int8 activations take Q4_1 and Q8_0 weights; "
                "smollm2-bf16 has BF16");
}

// An error's usage goes to stderr with the error, none of it to stdout.
TEST(CliBench, NoKindIsAnErrorOnStderr) {
  testing::RunResult r = RunCtxpar({"bench"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("usage: ctxpar bench KIND"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("attention"), std::string::npos) << r.err;
}

// --engine-chunks runs the decode row as the engine does, on a pool, and says so in the report;
// every point of every thread count is measured.
TEST(CliBench, AttentionEngineChunksReachesTheReport) {
  const std::string threads = std::thread::hardware_concurrency() >= 2 ? "1,2" : "1";
  testing::RunResult r = RunCtxpar({"bench", "attention", "--kinds", "smollm2-bf16", "--contexts",
                                    "300,768", "--threads", threads, "--reps", "1", "--ceiling-mib",
                                    "64", "--engine-chunks", "--json"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(report.at("engine_chunks").get<bool>());
  const nlohmann::json& results = report.at("results");
  ASSERT_EQ(results.size(), threads == "1" ? 2u : 4u) << r.out;
  for (const nlohmann::json& point : results) {
    EXPECT_EQ(point.at("kind"), "smollm2");
    EXPECT_GT(point.at("seconds").get<double>(), 0.0) << point;
  }
}

}  // namespace
}  // namespace ctxpar
