// `ctxpar check`: exit statuses, the exact error texts with the explain line, the JSON shape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_ctxpar.h"

namespace ctxpar {
namespace {

using nlohmann::json;
using testing::RunCtxpar;

// The words of the table row that starts with `field`.
std::vector<std::string> TableRow(const std::string& out, const std::string& field) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    if (!row.empty() && row[0] == field) return row;
  }
  return {};
}

json CheckJson(std::vector<std::string> args, int expected_exit,
               const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), "check");
  args.push_back("--json");
  testing::RunResult r = RunCtxpar(args, env);
  EXPECT_EQ(r.exit_status, expected_exit) << r.out << r.err;
  json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  // Exactly the shape of issue 2.
  EXPECT_EQ(j.size(), 3u) << r.out;
  EXPECT_TRUE(j["valid"].is_boolean());
  EXPECT_TRUE(j["fields"].is_object());
  EXPECT_TRUE(j["error"].is_null() || j["error"].is_object());
  for (const auto& [name, f] : j["fields"].items()) {
    EXPECT_EQ(f.size(), 3u) << name;
    EXPECT_TRUE(f.contains("raw") && f.contains("value") && f["source"].is_string()) << name;
  }
  return j;
}

TEST(CliCheck, FiA2aOnCpuPrintsSeed000AndExits2) {
  testing::RunResult r = RunCtxpar({"check", "--tp-size", "4", "--dcp-size", "4",
                                    "--dcp-comm-backend", "fi_a2a", "--platform", "cpu"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.err,
            "--dcp-comm-backend fi_a2a delegates the exchange to FlashInfer's MNNVL All-to-All "
            "kernel, which requires an NVIDIA CUDA platform with SM90+ and MNNVL fabric memory "
            "(e.g. GB200 NVL72). The authoritative fabric probe runs at model-runner init; use "
            "'a2a' or 'ag_rs' on clusters without MNNVL.\n"
            "run: ctxpar explain CTXPAR-DCP-003\n");
}

TEST(CliCheck, DeepseekV4FlashinferPrintsSeed002AndExits2) {
  testing::RunResult r = RunCtxpar({"check", "--model-arch", "DeepseekV4ForCausalLM", "--tp-size",
                                    "8", "--enable-prefill-cp", "--cp-strategy", "interleave",
                                    "--moe-a2a-backend", "flashinfer"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.err,
            "DeepSeekV4 CP supports moe_a2a_backend in ('none', 'deepep', 'megamoe', 'mori'), "
            "got 'flashinfer'.\n"
            "run: ctxpar explain CTXPAR-DSV4-004\n");
}

TEST(CliCheck, DeepseekV4DeepepIsValidWithAttnCpFromTheHook) {
  const std::vector<std::string> args = {"check",
                                         "--model-arch",
                                         "DeepseekV4ForCausalLM",
                                         "--tp-size",
                                         "8",
                                         "--enable-prefill-cp",
                                         "--cp-strategy",
                                         "interleave",
                                         "--moe-a2a-backend",
                                         "deepep"};
  testing::RunResult r = RunCtxpar(args);
  EXPECT_EQ(r.exit_status, 0) << r.err;
  EXPECT_NE(r.out.find("configuration: valid"), std::string::npos);
  EXPECT_EQ(TableRow(r.out, "attn_cp_size"),
            (std::vector<std::string>{"attn_cp_size", "1", "8", "validate_deepseek_v4_cp"}))
      << r.out;
  json j = CheckJson({args.begin() + 1, args.end()}, 0);
  EXPECT_EQ(j["valid"], true);
  EXPECT_EQ(j["error"], nullptr);
  EXPECT_EQ(j["fields"]["attn_cp_size"],
            json::parse(R"({"raw": 1, "value": 8, "source": "validate_deepseek_v4_cp"})"));
  EXPECT_EQ(j["fields"]["moe_dense_tp_size"],
            json::parse(R"({"raw": null, "value": 1, "source": "validate_deepseek_v4_cp"})"));
  EXPECT_EQ(j["fields"]["enable_dp_attention"],
            json::parse(R"({"raw": false, "value": true, "source": "validate_deepseek_v4_cp"})"));
  EXPECT_EQ(j["fields"]["tp_size"], json::parse(R"({"raw": 8, "value": 8, "source": "user"})"));
  EXPECT_FALSE(j["fields"].contains("dcp_size"));  // at its default
}

TEST(CliCheck, InvalidConfigurationJson) {
  json j = CheckJson({"--tp-size", "6", "--dcp-size", "4"}, 2);
  EXPECT_EQ(j["valid"], false);
  EXPECT_EQ(j["error"], json::parse(R"({"id": "CTXPAR-LAYOUT-001",
                            "message": "tp_size (6) must be divisible by dcp_size (4)."})"));
  EXPECT_EQ(j["fields"]["dcp_size"], json::parse(R"({"raw": 4, "value": 4, "source": "user"})"));
}

// --json=true is --json (CLI11 takes it): the output is JSON, not the table.
TEST(CliCheck, JsonEqualsTrueIsJson) {
  testing::RunResult r = RunCtxpar({"check", "--json=true"});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  const json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["valid"], true);
}

TEST(CliCheck, DefaultsAreValid) {
  testing::RunResult r = RunCtxpar({"check"});
  EXPECT_EQ(r.exit_status, 0) << r.err;
  json j = CheckJson({"--platform", "cpu", "--threads", "1"}, 0);
  EXPECT_EQ(j["fields"], json::parse(R"({
      "platform": {"raw": "cpu", "value": "cpu", "source": "user"},
      "page_size": {"raw": null, "value": 16, "source": "_handle_cpu_engine"},
      "max_running_requests": {"raw": null, "value": 256, "source": "_handle_cpu_engine"},
      "chunked_prefill_size": {"raw": null, "value": 2048, "source": "_handle_cpu_engine"},
      "threads": {"raw": 1, "value": 1, "source": "user"}})"));
}

TEST(CliCheck, BadFlagValuesExit2NamingFlagValueAndChoices) {
  struct Case {
    std::vector<std::string> args;
    std::string err;
  };
  const Case cases[] = {
      {{"--dcp-comm-backend", "nccl"},
       "Invalid value 'nccl' for --dcp-comm-backend; valid values: ag_rs, a2a, fi_a2a, shm_a2a.\n"
       "run: ctxpar explain CTXPAR-FLAG-001\n"},
      {{"--cp-strategy", "ring"},
       "Invalid value 'ring' for --cp-strategy; valid values: interleave, zigzag.\n"
       "run: ctxpar explain CTXPAR-FLAG-001\n"},
      {{"--tp-size", "four"},
       "Invalid value 'four' for --tp-size / --tensor-parallel-size: not an integer; valid values: "
       "integers from 1 to "
       "2147483647.\nrun: ctxpar explain CTXPAR-FLAG-002\n"},
      {{"--page-size=-16"},
       "Invalid value '-16' for --page-size: out of range; valid values: integers from 1 to "
       "2147483647.\nrun: ctxpar explain CTXPAR-FLAG-003\n"},
      {{"--decode-context-parallel-size", "x"},
       "Invalid value 'x' for --dcp-size / --decode-context-parallel-size: not an integer; valid "
       "values: integers from 1 to 2147483647.\nrun: ctxpar explain CTXPAR-FLAG-002\n"},
      // dcp_size's `>= 1` belongs to the DCP rule (SGLang's text); the range message states
      // what can be given, not INT32_MIN.
      {{"--dcp-size", "99999999999"},
       "Invalid value '99999999999' for --dcp-size / --decode-context-parallel-size: out of "
       "range; valid values: integers from 1 to 2147483647.\nrun: ctxpar explain "
       "CTXPAR-FLAG-003\n"},
      {{"--dcp-size", "-2147483649"},
       "Invalid value '-2147483649' for --dcp-size / --decode-context-parallel-size: out of "
       "range; valid values: integers from 1 to 2147483647.\nrun: ctxpar explain "
       "CTXPAR-FLAG-003\n"},
      {{"--dcp-size", "0"},
       "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be >= 1, "
       "but got dcp_size=0.\nrun: ctxpar explain CTXPAR-DCP-001\n"},
      {{"--dcp", "4"},
       "Unknown argument '--dcp' for ctxpar check; run: ctxpar check --help to list the "
       "accepted flags.\nrun: ctxpar explain CTXPAR-FLAG-004\n"},
      {{"--platform", "h100"},
       "Invalid platform 'h100' from --platform; valid values: cpu, rocm, cuda:smXY, "
       "cuda:smXY+mnnvl (e.g. cuda:sm90, cuda:sm100+mnnvl).\nrun: ctxpar explain "
       "CTXPAR-FLAG-006\n"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"check"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    testing::RunResult r = RunCtxpar(args);
    EXPECT_EQ(r.exit_status, 2) << c.args[0];
    EXPECT_EQ(r.err, c.err);
  }
  testing::RunResult missing = RunCtxpar({"check", "--tp-size"});
  EXPECT_EQ(missing.exit_status, 2);
  EXPECT_TRUE(missing.err.starts_with("Cannot parse the command line of ctxpar check: "))
      << missing.err;
  EXPECT_TRUE(missing.err.ends_with("\nrun: ctxpar explain CTXPAR-FLAG-005\n")) << missing.err;
  json j = CheckJson({"--moe-a2a-backend", "DeepEP"}, 2);
  EXPECT_EQ(j["error"]["id"], "CTXPAR-FLAG-001");
  EXPECT_EQ(j["fields"], json::object());
}

TEST(CliCheck, HelpExits0AndListsTheFlags) {
  testing::RunResult r = RunCtxpar({"check", "--help"});
  EXPECT_EQ(r.exit_status, 0);
  for (const char* flag :
       {"--tp-size", "--decode-context-parallel-size", "--no-dcp-replicate-q-proj",
        "--dcp-kv-cache-interleave-size", "--moe-a2a-backend", "--platform", "--json",
        "{ag_rs,a2a,fi_a2a,shm_a2a}"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(CliCheck, AliasAndTriState) {
  json j = CheckJson({"--tp-size", "4", "--decode-context-parallel-size", "4", "--dcp-comm-backend",
                      "a2a", "--dcp-replicate-q-proj"},
                     0);
  EXPECT_EQ(j["fields"]["dcp_size"]["value"], 4);
  EXPECT_EQ(j["fields"]["dcp_replicate_q_proj"],
            json::parse(R"({"raw": true, "value": true, "source": "user"})"));
  // The last of --x / --no-x wins, as with argparse.
  json off = CheckJson({"--dcp-replicate-q-proj", "--no-dcp-replicate-q-proj"}, 0);
  EXPECT_EQ(off["fields"]["dcp_replicate_q_proj"],
            json::parse(R"({"raw": false, "value": false, "source": "user"})"));
  json on = CheckJson({"--no-dcp-replicate-q-proj", "--dcp-replicate-q-proj"}, 2);
  EXPECT_EQ(on["error"]["id"], "CTXPAR-DCP-004");
}

TEST(CliCheck, RepeatedFlagKeepsTheLastValue) {
  json j = CheckJson({"--tp-size", "4", "--tp-size=8", "--dcp-size", "8"}, 0);
  EXPECT_EQ(j["fields"]["tp_size"], json::parse(R"({"raw": 8, "value": 8, "source": "user"})"));
}

TEST(CliCheck, KimiK3DefaultsShowTheirSource) {
  json j = CheckJson({"--model-arch", "KimiK3ForCausalLM", "--tp-size", "8", "--dcp-size", "8",
                      "--platform", "cuda:sm100+mnnvl"},
                     0);
  EXPECT_EQ(j["fields"]["dcp_comm_backend"], json::parse(R"({"raw": "ag_rs", "value": "fi_a2a",
                            "source": "apply_kimi_k3_dcp_defaults"})"));
  EXPECT_EQ(j["fields"]["dcp_replicate_q_proj"], json::parse(R"({"raw": null, "value": true,
                            "source": "apply_kimi_k3_dcp_defaults"})"));
}

TEST(CliCheck, PlatformFromEnvironmentAndFlag) {
  json env = CheckJson({}, 0, {"CTXPAR_PLATFORM=rocm"});
  EXPECT_EQ(env["fields"]["platform"],
            json::parse(R"({"raw": null, "value": "rocm", "source": "_handle_platform_checks"})"));
  json flag = CheckJson({"--platform", "cuda:sm90"}, 0, {"CTXPAR_PLATFORM=rocm"});
  EXPECT_EQ(flag["fields"]["platform"]["value"], "cuda:sm90");
  json bad = CheckJson({}, 2, {"CTXPAR_PLATFORM=tpu"});
  EXPECT_EQ(bad["error"]["message"],
            "Invalid platform 'tpu' from CTXPAR_PLATFORM; valid values: cpu, rocm, cuda:smXY, "
            "cuda:smXY+mnnvl (e.g. cuda:sm90, cuda:sm100+mnnvl).");
  // A named platform shows the probe too.
  testing::RunResult r = RunCtxpar({"check", "--platform", "cuda:sm90"});
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_NE(r.out.find("platform: cuda:sm90: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probe: "), std::string::npos) << r.out;
  // The kernels of this machine, whatever the platform checked.
  EXPECT_NE(r.out.find("kernels (this machine): --dtype float32 [cpu: matmul fp32 "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(", --dtype auto [cpu: matmul int8 "), std::string::npos) << r.out;
}

TEST(CliCheck, MoeBackendRefusedOnlyOnANamedPlatform) {
  const std::vector<std::string> args = {"check", "--moe-a2a-backend", "mooncake"};
  EXPECT_EQ(RunCtxpar(args).exit_status, 0);
  testing::RunResult r = RunCtxpar({"check", "--moe-a2a-backend", "mooncake", "--platform", "cpu"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_EQ(r.err,
            "--moe-a2a-backend mooncake needs an NVIDIA CUDA GPU, but the platform is cpu; use "
            "--moe-a2a-backend none or deepep instead.\nrun: ctxpar explain CTXPAR-MOE-001\n");
  EXPECT_EQ(RunCtxpar({"check", "--moe-a2a-backend", "mori"}, {"CTXPAR_PLATFORM=rocm"}).exit_status,
            0);
}

TEST(CliCheck, FiA2aOnANamedGpuWithoutFabric) {
  testing::RunResult r = RunCtxpar({"check", "--tp-size", "4", "--dcp-size", "4",
                                    "--dcp-comm-backend", "fi_a2a", "--platform", "cuda:sm90"});
  EXPECT_EQ(r.exit_status, 2);
  EXPECT_TRUE(r.err.ends_with("run: ctxpar explain CTXPAR-DCP-006\n")) << r.err;
  EXPECT_EQ(RunCtxpar({"check", "--tp-size", "4", "--dcp-size", "4", "--dcp-comm-backend", "fi_a2a",
                       "--platform", "cuda:sm100+mnnvl"})
                .exit_status,
            0);
}

}  // namespace
}  // namespace ctxpar
