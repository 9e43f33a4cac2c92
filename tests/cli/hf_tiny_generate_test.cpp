// `ctxpar generate` and `check` on the tiny converted checkpoints of tests/data/hf_tiny, as a
// user runs them: the 16 greedy ids of the 700-token prompt are HF transformers' (golden.json)
// at tp 1 and over two MPI ranks with DCP in prefill chunks, for one weight type of each
// architecture; and a file with a tensor the model cannot take (or, for deepseek2, a router or an
// attn_k_b layout) is refused by check and generate alike, with the same catalog ID and message,
// before any compute.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "run_ctxpar.h"

namespace ctxpar {
namespace {

using testing::RunCtxpar;
using testing::RunResult;

const std::vector<std::string> kMpiEnv = {"OMPI_ALLOW_RUN_AS_ROOT=1",
                                          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                                          "OMPI_MCA_rmaps_base_oversubscribe=1"};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

struct Case {
  const char* arch;
  const char* type;
};

const Case kCases[] = {{"llama", "f32"},    {"llama3", "q8_0"},        {"qwen2", "bf16"},
                       {"qwen3", "f16"},    {"phi3", "q8_0"},          {"olmo2", "bf16"},
                       {"gemma2", "bf16"},  {"qwen3moe", "q8_0"},      {"ministral3", "f16"},
                       {"mistral", "q8_0"}, {"deepseek_v3", "q8_0"},   {"deepseek_v2", "bf16"},
                       {"gpt_oss", "q8_0"}, {"gpt_oss_mxfp4", "mxfp4"}};

TEST(HfTinyCli, GreedyIdsOfTheLongPromptAreTransformersOnOneAndTwoRanks) {
  for (const Case& c : kCases) {
    const std::string dir = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/" + c.arch + "/";
    std::ifstream in(dir + "golden.json");
    const nlohmann::json golden = nlohmann::json::parse(in);
    const nlohmann::json& prompt = golden.at("prompts").back();
    std::string ids, want;
    for (int32_t id : prompt.at("prompt_ids").get<std::vector<int32_t>>()) {
      ids += (ids.empty() ? "" : ",") + std::to_string(id);
    }
    const auto greedy = prompt.at("greedy").get<std::vector<int32_t>>();
    for (std::size_t i = 0; i < greedy.size(); ++i) {
      want += (i ? " " : "") + std::to_string(greedy[i]);
    }
    const std::string path = dir + golden.at("files").at(c.type).at("file").get<std::string>();
    std::vector<std::string> args = {"generate",
                                     "--model-path",
                                     path,
                                     "--print-ids",
                                     "--ignore-eos",
                                     "--max-new-tokens",
                                     std::to_string(greedy.size()),
                                     "--input-ids",
                                     ids};
    const RunResult one = RunCtxpar(args, kMpiEnv);
    ASSERT_EQ(one.exit_status, 0) << path << ": " << one.err;
    EXPECT_EQ(Trim(one.out), want) << path;
    if (std::string(CTXPAR_MPIEXEC).empty()) continue;
    args.insert(args.end(), {"--tp-size", "2", "--dcp-size", "2", "--dcp-comm-backend", "a2a",
                             "--threads", "1", "--chunked-prefill-size", "128"});
    // Qwen3-MoE's and gpt-oss's experts sit whole on the ranks: --ep-size 2 says so (1 runs the
    // same).
    if (std::string_view(c.arch) == "qwen3moe" || std::string_view(c.arch).starts_with("gpt_oss")) {
      args.insert(args.end(), {"--ep-size", "2"});
    }
    const RunResult two = RunCtxpar(args, kMpiEnv);
    ASSERT_EQ(two.exit_status, 0) << path << ": " << two.err;
    EXPECT_EQ(Trim(two.out), want) << path << " over 2 ranks";
  }
}

// Expert parallelism: a MoE model takes --ep-size 1 or tp_size and refuses another size; a
// dense one refuses the flag.
TEST(HfTinyCli, ExpertParallelSizeIsOneOrTheTpSize) {
  const std::string dir = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/";
  const std::string moe = dir + "qwen3moe/qwen3moe-q8_0.gguf";
  for (const char* ep : {"1", "4"}) {
    const RunResult ok =
        RunCtxpar({"check", "--model-path", moe, "--tp-size", "4", "--ep-size", ep});
    EXPECT_EQ(ok.exit_status, 0) << ep << ": " << ok.err;
  }
  const RunResult two =
      RunCtxpar({"check", "--model-path", moe, "--tp-size", "4", "--ep-size", "2"});
  EXPECT_EQ(two.exit_status, 2);
  EXPECT_NE(two.err.find("CTXPAR-MODEL-012"), std::string::npos) << two.err;
  EXPECT_NE(two.err.find("--ep-size 2: Qwen3MoeForCausalLM places whole experts on the tp_size "
                         "(4) ranks, so --ep-size must be 1 or 4."),
            std::string::npos)
      << two.err;
  const RunResult dense = RunCtxpar(
      {"check", "--model-path", dir + "qwen3/qwen3-q8_0.gguf", "--tp-size", "2", "--ep-size", "2"});
  EXPECT_EQ(dense.exit_status, 2);
  EXPECT_NE(dense.err.find("CTXPAR-MODEL-005"), std::string::npos) << dense.err;
}

TEST(HfTinyCli, CheckAndGenerateRefuseTheSameFileAlike) {
  struct Refused {
    const char* file;
    const char* id;
    const char* names;
  };
  const Refused kRefused[] = {
      {"refused/f64_weight.gguf", "CTXPAR-MODEL-011", "tensor blk.0.ffn_up.weight"},
      {"deepseek_refused/sqrtsoftplus_router.gguf", "CTXPAR-GGUF-006",
       "deepseek2.expert_gating_func"},
      {"deepseek_refused/k_b_transposed.gguf", "CTXPAR-MODEL-011", "tensor blk.0.attn_k_b.weight"}};
  for (const Refused& r : kRefused) {
    const std::string path = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/" + r.file;
    const RunResult check = RunCtxpar({"check", "--model-path", path});
    const RunResult generate = RunCtxpar({"generate", "--model-path", path, "Hello"});
    EXPECT_EQ(check.exit_status, 2) << check.err;
    EXPECT_EQ(generate.exit_status, 2) << generate.err;
    EXPECT_NE(check.err.find(r.id), std::string::npos) << check.err;
    EXPECT_NE(check.err.find(r.names), std::string::npos) << check.err;
    EXPECT_NE(generate.err.find(r.id), std::string::npos) << generate.err;
    EXPECT_NE(generate.err.find(r.names), std::string::npos) << generate.err;
  }
}

}  // namespace
}  // namespace ctxpar
