// `ctxpar check --model-path M` and `ctxpar generate` accept and refuse the same launch
// configurations, with the same message, over a sweep of flags; and the KV capacity that check
// reports follows the layout: at tp 9, DCP 3 stores each of SmolLM2's 3 KV heads once where DCP 1
// stores it 3 times, so the same --kv-cache-mib holds 3 times the tokens.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/run_ctxpar.h"

namespace ctxpar {
namespace {

using nlohmann::json;
using testing::RunCtxpar;
using testing::RunResult;

std::string Model() {
  if (const char* m = std::getenv("CTXPAR_MODEL"); m != nullptr && *m != '\0') return m;
  return std::string(std::getenv("HOME")) + "/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::vector<std::string> Split(const std::string& flags) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < flags.size()) {
    const std::size_t space = std::min(flags.find(' ', at), flags.size());
    if (space > at) out.push_back(flags.substr(at, space - at));
    at = space + 1;
  }
  return out;
}

RunResult Check(const std::string& flags, bool as_json = false) {
  std::vector<std::string> args = {"check", "--model-path", Model()};
  for (const std::string& a : Split(flags)) args.push_back(a);
  if (as_json) args.push_back("--json");
  return RunCtxpar(args);
}

TEST(LaunchAgreement, CheckWithTheModelAndGenerateAgreeOverASweep) {
  const std::vector<std::string> sweep = {
      "--tp-size 2",
      "--tp-size 2 --dcp-size 2",
      "--tp-size 4",
      "--tp-size 6 --dcp-size 3",
      "--tp-size 9 --dcp-size 9",
      "--tp-size 3 --dcp-size 3 --dcp-comm-backend fi_a2a",
      "--tp-size 3 --dcp-size 3 --dcp-replicate-q-proj",
      "--tp-size 3 --dcp-size 1 --dcp-comm-backend a2a",
      "--tp-size 3 --dcp-size 3 --dcp-kv-cache-interleave-size 7",
      "--tp-size 3 --dcp-size 3 --dcp-kv-cache-interleave-size 32",
      "--page-size 100000000",
      "--kv-cache-mib 1 --page-size 4096",
      "--max-total-tokens 8",
      "--ep-size 3 --moe-a2a-backend deepep",
      "--moe-a2a-backend mori",
      "--enable-prefill-cp --cp-strategy interleave",
      "--enable-prefill-cp",
      "--attn-cp-size 3 --tp-size 3",
      "--enable-dp-attention",
      "--dp-size 2",
      "--model-arch DeepseekV4ForCausalLM",
      "--platform cuda:sm90",
      "--platform rocm",
      "--threads 100000",
      "--kv-cache-dtype fp4_e2m1 --tp-size 3 --dcp-size 3",
      "--chunked-prefill-size 0",
      "--dcp-size 0",
      "--kv-cache-mib 2147483647",
      "--kv-cache-mib 1000000000",
      "--max-total-tokens 20 --tp-size 3 --dcp-size 3",
      "--max-queued-requests 0",
      "--cp-strategy zigzag",
      "--nsa-prefill-cp-mode in-seq-split",
  };
  for (const std::string& flags : sweep) {
    SCOPED_TRACE(flags);
    const RunResult check = Check(flags);
    std::vector<std::string> args = {"generate", "--model-path", Model(), "--max-new-tokens", "1"};
    for (const std::string& a : Split(flags)) args.push_back(a);
    args.push_back("Hi");
    const RunResult gen = RunCtxpar(args);
    EXPECT_NE(check.exit_status, 0) << "the sweep holds configurations a run must refuse";
    EXPECT_EQ(gen.exit_status, check.exit_status) << gen.err;
    EXPECT_EQ(gen.err, check.err);
    EXPECT_NE(check.err.find("run: ctxpar explain CTXPAR-"), std::string::npos) << check.err;
  }
  // And configurations both accept; generate runs them (a single rank here: the MPI runs are in
  // generate_test.cpp).
  for (const std::string& flags :
       {std::string("--page-size 32 --dcp-kv-cache-interleave-size 8"),
        std::string("--kv-cache-mib 64 --max-running-requests 4 --chunked-prefill-size 3"),
        std::string("--kv-cache-dtype bf16 --kv-cache-mib 8"),
        std::string("--kv-cache-dtype fp8_e4m3 --kv-cache-mib 8"),
        std::string("--kv-cache-dtype fp8_e5m2 --kv-cache-mib 8"),
        std::string("--max-running-requests 100000000 --max-queued-requests 1")}) {
    SCOPED_TRACE(flags);
    EXPECT_EQ(Check(flags).exit_status, 0) << Check(flags).err;
    std::vector<std::string> args = {"generate", "--model-path", Model(), "--max-new-tokens", "2"};
    for (const std::string& a : Split(flags)) args.push_back(a);
    args.push_back("Hi");
    const RunResult gen = RunCtxpar(args);
    EXPECT_EQ(gen.exit_status, 0) << gen.err;
  }
}

int64_t Capacity(const std::string& flags) {
  const RunResult r = Check(flags, /*as_json=*/true);
  EXPECT_EQ(r.exit_status, 0) << flags << "\n" << r.err << r.out;
  return json::parse(r.out).value("max_total_num_tokens", int64_t{-1});
}

TEST(LaunchAgreement, DcpMultipliesTheTokensOfTheSameKvBudget) {
  for (const char* mib : {"64", "100", "1024"}) {
    SCOPED_TRACE(mib);
    const std::string budget = std::string(" --kv-cache-mib ") + mib;
    const int64_t replicated = Capacity("--tp-size 9 --dcp-size 1" + budget);
    const int64_t sharded = Capacity("--tp-size 9 --dcp-size 3" + budget);
    ASSERT_GT(replicated, 0);
    // Within one page per rank of the exact ratio: pages are whole.
    EXPECT_LE(std::abs(sharded - 3 * replicated), 16 * 3) << sharded << " vs " << replicated;
    // tp 3 stores each KV head once already: DCP 3 trades one head of every token for the three
    // heads of a third of the tokens, and the capacity stays (within a page per rank).
    const int64_t tp3 = Capacity("--tp-size 3 --dcp-size 1" + budget);
    EXPECT_LE(std::abs(Capacity("--tp-size 3 --dcp-size 3" + budget) - tp3), 16 * 3);
  }
  // SmolLM2 per rank and token at tp 1: 30 layers x 3 KV heads x 64 x (K + V) x 4 bytes.
  const int64_t bytes_per_token = 30 * 3 * 64 * 2 * 4;
  EXPECT_EQ(Capacity("--kv-cache-mib 64"), (64LL << 20) / (bytes_per_token * 16) * 16);
  // bf16 halves the bytes of a token.
  EXPECT_EQ(Capacity("--kv-cache-mib 64 --kv-cache-dtype bf16"),
            (64LL << 20) / (bytes_per_token / 2 * 16) * 16);
  EXPECT_EQ(Capacity("--kv-cache-mib 64 --kv-cache-dtype bfloat16 --tp-size 9 --dcp-size 3"),
            2 * Capacity("--kv-cache-mib 64 --tp-size 9 --dcp-size 3"));
}

std::string KvDtype(const std::string& flags) {
  const RunResult r = Check(flags, /*as_json=*/true);
  EXPECT_EQ(r.exit_status, 0) << flags << "\n" << r.err << r.out;
  return json::parse(r.out).value("kv_cache_dtype", std::string());
}

// --kv-cache-dtype auto is the model's data type, as in SGLang: bf16 on the fast path (--dtype
// auto, whose products are 16-bit or narrower), fp32 under float32 and --llama-cpp-numerics; a
// named type wins on either path. The capacity follows the bytes.
TEST(LaunchAgreement, AutoKvCacheFollowsTheDtype) {
  EXPECT_EQ(KvDtype(""), "f32");
  EXPECT_EQ(KvDtype("--dtype float32"), "f32");
  EXPECT_EQ(KvDtype("--dtype auto"), "bf16");
  EXPECT_EQ(KvDtype("--dtype auto --kv-cache-dtype auto"), "bf16");
  EXPECT_EQ(KvDtype("--dtype auto --llama-cpp-numerics"), "f32");
  EXPECT_EQ(KvDtype("--dtype auto --kv-cache-dtype fp8_e5m2"), "f8_e5m2");
  EXPECT_EQ(KvDtype("--dtype float32 --kv-cache-dtype bf16"), "bf16");
  EXPECT_EQ(Capacity("--kv-cache-mib 64 --dtype auto"),
            Capacity("--kv-cache-mib 64 --kv-cache-dtype bf16"));
}

// The ranks of one machine share its memory: a KV budget of half the machine fits one rank, not
// the three of a tp 3 job here.
TEST(LaunchAgreement, KvBudgetsAreCheckedAgainstTheMemoryOfTheRanks) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (meminfo >> key >> kib && key != "MemTotal:") meminfo.ignore(1 << 10, '\n');
  ASSERT_EQ(key, "MemTotal:");
  const std::string half = " --kv-cache-mib " + std::to_string(kib / 1024 / 2);
  EXPECT_EQ(Check(half).exit_status, 0) << Check(half).err;
  const RunResult three = Check("--tp-size 3 --dcp-size 3" + half);
  EXPECT_NE(three.exit_status, 0);
  EXPECT_NE(three.err.find("CTXPAR-KV-004"), std::string::npos) << three.err;
}

// A running request holds at least one page, so max_running_requests is capped at the pool's
// pages (the slots' block tables took 2 KB each: 10^7 of them took 20 GB).
TEST(LaunchAgreement, RunningRequestsAreCappedByThePoolsPages) {
  const RunResult r = Check("--kv-cache-mib 64 --max-running-requests 100000000", true);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  const json j = json::parse(r.out);
  const int64_t bytes_per_page = 30 * 3 * 64 * 2 * 4 * 16;
  EXPECT_EQ(j.value("max_running_requests", -1), (64LL << 20) / bytes_per_page);
  EXPECT_EQ(json::parse(Check("--kv-cache-mib 64 --max-running-requests 7", true).out)
                .value("max_running_requests", -1),
            7);
}

}  // namespace
}  // namespace ctxpar
