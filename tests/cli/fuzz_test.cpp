// Throws seeded random argv at `ctxpar check` and `ctxpar explain`: no crash, and no exit status
// other than 0 (valid) or 2 (invalid).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cli/run_ctxpar.h"

namespace ctxpar {
namespace {

const std::vector<std::string> kFlags = {"--tp-size",
                                         "--dp-size",
                                         "--dcp-size",
                                         "--decode-context-parallel-size",
                                         "--dcp-comm-backend",
                                         "--dcp-replicate-q-proj",
                                         "--no-dcp-replicate-q-proj",
                                         "--dcp-kv-cache-interleave-size",
                                         "--enable-prefill-cp",
                                         "--cp-strategy",
                                         "--attn-cp-size",
                                         "--enable-nsa-prefill-context-parallel",
                                         "--nsa-prefill-cp-mode",
                                         "--moe-a2a-backend",
                                         "--ep-size",
                                         "--moe-dense-tp-size",
                                         "--enable-dp-attention",
                                         "--page-size",
                                         "--model-path",
                                         "--model-arch",
                                         "--platform",
                                         "--json",
                                         "--",
                                         "-",
                                         "-x",
                                         "--help=3",
                                         "--tp",
                                         "--json=1"};

const std::vector<std::string> kValues = {"0",
                                          "1",
                                          "2",
                                          "3",
                                          "4",
                                          "8",
                                          "9",
                                          "16",
                                          "-1",
                                          "-2147483648",
                                          "2147483647",
                                          "2147483648",
                                          "99999999999999999999",
                                          "+4",
                                          " 4",
                                          "4.0",
                                          "0x10",
                                          "",
                                          " ",
                                          "ag_rs",
                                          "a2a",
                                          "fi_a2a",
                                          "shm_a2a",
                                          "interleave",
                                          "zigzag",
                                          "round-robin-split",
                                          "in-seq-split",
                                          "none",
                                          "deepep",
                                          "mooncake",
                                          "nixl",
                                          "mori",
                                          "ascend_fuseep",
                                          "flashinfer",
                                          "megamoe",
                                          "cpu",
                                          "rocm",
                                          "cuda:sm90",
                                          "cuda:sm100+mnnvl",
                                          "cuda:sm",
                                          "DeepseekV4ForCausalLM",
                                          "KimiK3ForCausalLM",
                                          "LlamaForCausalLM",
                                          "it's",
                                          "\"q\"",
                                          "\xff\xfe",
                                          "h\xc3\xa9",
                                          "{x}",
                                          "\\",
                                          "=",
                                          "true"};

std::string RandomBytes(std::mt19937& rng) {
  std::uniform_int_distribution<int> len(0, 12);
  std::uniform_int_distribution<int> byte(1, 255);
  std::string s;
  for (int i = len(rng); i > 0; --i) s += static_cast<char>(byte(rng));
  return s;
}

std::vector<std::string> RandomArgs(std::mt19937& rng) {
  std::uniform_int_distribution<int> count(0, 8);
  std::uniform_int_distribution<int> kind(0, 9);
  std::vector<std::string> args;
  for (int i = count(rng); i > 0; --i) {
    const std::string& flag = kFlags[rng() % kFlags.size()];
    const std::string& value = kValues[rng() % kValues.size()];
    switch (kind(rng)) {
      case 0:
        args.push_back(RandomBytes(rng));
        break;
      case 1:
        args.push_back(flag + "=" + value);
        break;
      case 2:
        args.push_back(flag);
        break;
      case 3:
        args.push_back(value);
        break;
      default:
        args.push_back(flag);
        args.push_back(value);
    }
  }
  return args;
}

TEST(CliFuzz, CheckNeverCrashesAndExitsZeroOrTwo) {
  std::mt19937 rng(20261130);
  int valid = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    std::vector<std::string> args = RandomArgs(rng);
    args.insert(args.begin(), "check");
    testing::RunResult r = testing::RunCtxpar(args);
    std::string line;
    for (const std::string& a : args) line += " [" + a + "]";
    ASSERT_EQ(r.signal, 0) << line;
    ASSERT_TRUE(r.exit_status == 0 || r.exit_status == 2) << r.exit_status << line << "\n" << r.err;
    valid += r.exit_status == 0;
  }
  EXPECT_GT(valid, 10);  // the generator also reaches valid configurations
}

TEST(CliFuzz, ExplainNeverCrashesAndExitsZeroOrTwo) {
  std::mt19937 rng(7);
  for (int iteration = 0; iteration < 100; ++iteration) {
    std::vector<std::string> args = {"explain"};
    if (rng() % 2) {
      args.push_back("--message");
      args.push_back(RandomBytes(rng) + kValues[rng() % kValues.size()] + RandomBytes(rng));
    } else {
      args.push_back("CTXPAR-" + RandomBytes(rng));
    }
    if (rng() % 3 == 0) args.push_back("--json");
    testing::RunResult r = testing::RunCtxpar(args);
    ASSERT_EQ(r.signal, 0) << args[1];
    ASSERT_TRUE(r.exit_status == 0 || r.exit_status == 2) << r.exit_status << " " << args[1];
  }
}

}  // namespace
}  // namespace ctxpar
