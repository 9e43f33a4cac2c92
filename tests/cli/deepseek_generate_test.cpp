// `ctxpar generate` and `ctxpar check` with the tiny DeepSeek-V3 reference checkpoint: token ids
// in and out through the same front door as Llama, the HF golden continuation reproduced by one
// rank and by MPI layouts (DCP with replicated Q over a2a, EP with deepep and none, prefill CP),
// the layout rules the model's hook adds, DeepSeek-V4's rules for a V4 config.json, and the KV
// capacity that DCP multiplies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/run_ctxpar.h"

namespace {

using ctxpar::testing::RunCtxpar;
using ctxpar::testing::RunResult;
using Json = nlohmann::json;

const std::string kReference = std::string(CTXPAR_REFERENCE_DIR) + "/deepseek_v3_tiny";

#define SKIP_WITHOUT_REFERENCE()                                                          \
  if (!std::filesystem::exists(kReference + "/config.json")) {                            \
    GTEST_SKIP() << "the tiny DeepSeek-V3 reference checkpoint is not at " << kReference; \
  }

struct Golden {
  std::string ids;     // "703,927,..."
  std::string greedy;  // "335 603 ..."
};

// The reference's 33-token prompt and its greedy continuation (HF generates past EOS).
Golden Prompt2() {
  const Json meta = Json::parse(std::ifstream(kReference + "/golden.json"));
  Golden g;
  for (int id : meta["prompts"][2]["ids"]) g.ids += (g.ids.empty() ? "" : ",") + std::to_string(id);
  for (int id : meta["prompts"][2]["greedy_32"]) {
    g.greedy += (g.greedy.empty() ? "" : " ") + std::to_string(id);
  }
  return g;
}

std::vector<std::string> Generate(const std::string& model, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"generate",
                                   "--model-path",
                                   model,
                                   "--input-ids",
                                   Prompt2().ids,
                                   "--print-ids",
                                   "--max-new-tokens",
                                   "32",
                                   "--ignore-eos",
                                   "--threads",
                                   "1"};
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

TEST(DeepseekCli, GenerateReproducesTheReferenceContinuation) {
  SKIP_WITHOUT_REFERENCE();
  const RunResult one = RunCtxpar(Generate(kReference, {}));
  ASSERT_EQ(one.exit_status, 0) << one.err;
  EXPECT_EQ(one.out, Prompt2().greedy + "\n");
  // Without a tokenizer there is no text: the ids are printed without --print-ids too.
  std::vector<std::string> no_flag = Generate(kReference, {});
  no_flag.erase(std::find(no_flag.begin(), no_flag.end(), "--print-ids"));
  const RunResult plain = RunCtxpar(no_flag);
  ASSERT_EQ(plain.exit_status, 0) << plain.err;
  EXPECT_EQ(plain.out, Prompt2().greedy + "\n");
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  const std::vector<std::vector<std::string>> layouts = {
      {"--tp-size", "4", "--dcp-size", "4", "--dcp-comm-backend", "a2a", "--dcp-replicate-q-proj"},
      {"--tp-size", "4", "--dcp-size", "2", "--moe-a2a-backend", "deepep"},
      {"--tp-size", "4", "--ep-size", "2", "--dcp-size", "4", "--dcp-comm-backend", "shm_a2a"},
      {"--tp-size", "4", "--dcp-size", "2", "--enable-prefill-cp", "--cp-strategy", "zigzag",
       "--attn-cp-size", "2", "--chunked-prefill-size", "16"},
  };
  for (const auto& flags : layouts) {
    const RunResult r = RunCtxpar(Generate(kReference, flags));
    std::string what;
    for (const auto& f : flags) what += f + " ";
    ASSERT_EQ(r.exit_status, 0) << what << "\n" << r.err;
    EXPECT_EQ(r.out, Prompt2().greedy + "\n") << what;
  }
}

TEST(DeepseekCli, LayoutRulesRefuseWithCatalogTexts) {
  SKIP_WITHOUT_REFERENCE();
  struct Case {
    std::vector<std::string> flags;
    std::string err;
  };
  const Case cases[] = {
      {{"--tp-size", "3"},
       "Total number of attention heads (8) must be divisible by tensor parallel size (3).\nrun: "
       "ctxpar explain CTXPAR-MODEL-002\n"},
      {{"--tp-size", "4", "--ep-size", "3"},
       "tp_size (4) must be divisible by ep_size (3)\nrun: ctxpar explain CTXPAR-DSV3-002\n"},
      {{"--tp-size", "2", "--attn-cp-size", "2"},
       "--attn-cp-size 2 splits prefill attention over ranks and needs --enable-prefill-cp\nrun: "
       "ctxpar explain CTXPAR-DSV3-004\n"},
      {{"--moe-dense-tp-size", "2"},
       "moe_dense_tp_size only support 1 and None currently\nrun: ctxpar explain "
       "CTXPAR-DSV3-003\n"},
      {{"--moe-a2a-backend", "megamoe"},
       "--moe-a2a-backend megamoe needs an NVIDIA CUDA GPU of SM90 or newer, but the platform is "
       "cpu; use --moe-a2a-backend none or deepep instead.\nrun: ctxpar explain CTXPAR-MOE-001\n"},
      {{"--moe-a2a-backend", "mori"},
       "--moe-a2a-backend mori needs an AMD ROCm GPU, but the platform is cpu; use "
       "--moe-a2a-backend none or deepep instead.\nrun: ctxpar explain CTXPAR-MOE-001\n"},
      {{"--kv-cache-dtype", "bf16"},
       "--kv-cache-dtype bf16 applies to the Llama models' KV cache; DeepseekV3ForCausalLM (its "
       "latent cache is fp32) has none: drop --kv-cache-dtype bf16.\nrun: ctxpar explain "
       "CTXPAR-MODEL-005\n"},
      {{"--kv-cache-dtype", "fp8_e5m2"},
       "--kv-cache-dtype fp8_e5m2 applies to the Llama models' KV cache; DeepseekV3ForCausalLM "
       "(its latent cache is fp32) has none: drop --kv-cache-dtype fp8_e5m2.\nrun: ctxpar "
       "explain CTXPAR-MODEL-005\n"},
      {{"--kv-cache-dtype", "fp4_e2m1"},
       "--kv-cache-dtype fp4_e2m1 is not available on ctxpar's CPU engine, which stores the KV "
       "cache in fp32 (auto), bf16, fp8_e4m3 or fp8_e5m2: use --kv-cache-dtype fp8_e4m3 to "
       "quarter the KV memory of a token, bf16 to halve it, or leave it at auto.\nrun: ctxpar "
       "explain CTXPAR-KV-003\n"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"check", "--model-path", kReference};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const RunResult r = RunCtxpar(args);
    EXPECT_EQ(r.exit_status, 2) << c.flags[0];
    EXPECT_EQ(r.err, c.err);
    const RunResult g = RunCtxpar(Generate(kReference, c.flags));
    EXPECT_EQ(g.exit_status, 2) << c.flags[0];
    EXPECT_EQ(g.err, c.err);
  }
}

// --model-path DIR opens the HF checkpoint when DIR holds config.json: one without its weights
// fails on the weights (not as "no model here"); a directory without config.json is no model.
TEST(DeepseekCli, ModelPathPicksTheLoaderByWhatTheDirectoryHolds) {
  SKIP_WITHOUT_REFERENCE();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("ctxpar_hf_dir_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto generate = [&] {
    return RunCtxpar({"generate", "--model-path", dir.string(), "--input-ids", "1,2"});
  };
  const RunResult empty = generate();
  EXPECT_EQ(empty.exit_status, 2);
  EXPECT_EQ(empty.err, dir.string() +
                           " is a directory without a config.json: ctxpar reads a GGUF file "
                           "(Llama, Qwen, Phi-3, Gemma 3) or a HF checkpoint directory with "
                           "config.json and *.safetensors (DeepSeek-V3 family).\nrun: ctxpar "
                           "explain CTXPAR-MODEL-008\n");
  std::filesystem::copy_file(kReference + "/config.json", dir / "config.json");
  const RunResult config_only = generate();
  EXPECT_EQ(config_only.exit_status, 2);
  EXPECT_EQ(config_only.err, "Cannot open the safetensors file '" +
                                 (dir / "model.safetensors").string() +
                                 "': No such file or directory.\nrun: ctxpar explain "
                                 "CTXPAR-ST-001\n");
  std::filesystem::remove_all(dir);
}

// With deepep SGLang sets the EP size to the TP size; `check` shows who set it.
TEST(DeepseekCli, DeepepTakesTheTpSizeAsEpSize) {
  SKIP_WITHOUT_REFERENCE();
  const RunResult r = RunCtxpar({"check", "--model-path", kReference, "--tp-size", "4",
                                 "--moe-a2a-backend", "deepep", "--json"});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  const Json ep = Json::parse(r.out)["fields"]["ep_size"];
  EXPECT_EQ(ep["raw"], 1) << r.out;
  EXPECT_EQ(ep["value"], 4) << r.out;
  EXPECT_EQ(ep["source"], "deepseek_v3_layout_rules") << r.out;
}

// The one latent KV head is stored whole by every TP rank without DCP; DCP over all 4 ranks
// shards it, so the same memory per rank holds 4 times the tokens.
TEST(DeepseekCli, DcpMultipliesTheKvCapacity) {
  SKIP_WITHOUT_REFERENCE();
  auto tokens = [](const std::string& dcp) {
    const RunResult r = RunCtxpar({"check", "--model-path", kReference, "--tp-size", "4",
                                   "--dcp-size", dcp, "--kv-cache-mib", "16", "--json"});
    EXPECT_EQ(r.exit_status, 0) << r.err;
    return Json::parse(r.out).value("max_total_num_tokens", int64_t{0});
  };
  const int64_t one = tokens("1"), four = tokens("4");
  // 16 MiB over 4 layers of 80 fp32 per token: 13,107 tokens, whole pages of 16.
  EXPECT_EQ(one, 13104);
  EXPECT_LE(std::abs(four - 4 * one), 4 * 16);  // within one page per rank
  EXPECT_EQ(four, 4 * one);
}

// `ctxpar bench deepseek` at N = 2 on a small shape: the replicated Q path drops the DCP group's
// Q all-gather and keeps its all-to-all, prefill CP gathers latents over the CP group, and
// --threads is bounded by the machine like the other commands'.
TEST(DeepseekCli, BenchDeepseekShowsEachCombinationsCollectives) {
  SKIP_WITHOUT_REFERENCE();
  const std::vector<std::string> small = {
      "bench",     "deepseek", "--model-path", kReference, "--ranks",  "2",  "--batch",  "1",
      "--context", "16",       "--steps",      "1",        "--prompt", "32", "--rounds", "1"};
  std::vector<std::string> args = small;
  args.push_back("--json");
  const RunResult r = RunCtxpar(args);
  ASSERT_EQ(r.exit_status, 0) << r.err;
  std::map<std::string, double> bytes;  // "what group collective" -> bytes per rank
  const Json out = Json::parse(r.out);
  for (const Json& row : out["rows"]) {
    bytes[row["what"].get<std::string>() + " " + row["group"].get<std::string>() + " " +
          row["collective"].get<std::string>()] = row["bytes_sent_per_rank"];
  }
  EXPECT_GT(bytes["a2a+none dcp AllGather"], 0) << r.out;
  EXPECT_EQ(bytes.count("a2a_repq+none dcp AllGather"), 0u) << r.out;
  EXPECT_GT(bytes["a2a+none dcp AllToAllV"], 0) << r.out;
  EXPECT_EQ(bytes["a2a_repq+none dcp AllToAllV"], bytes["a2a+none dcp AllToAllV"]);
  EXPECT_GT(bytes["ttft_cp2_zigzag cp AllGather"], 0) << r.out;
  EXPECT_EQ(bytes.count("ttft_no_cp cp AllGather"), 0u) << r.out;
  args = small;
  args.insert(args.end(), {"--threads", "100000"});
  const RunResult threads = RunCtxpar(args);
  EXPECT_EQ(threads.exit_status, 2);
  EXPECT_TRUE(threads.err.ends_with("run: ctxpar explain CTXPAR-FLAG-007\n")) << threads.err;
}

// A config.json of the DeepSeek-V4 architecture runs the same network and gets DeepSeek-V4's
// prefill-CP rules from the pipeline, in SGLang's order: interleave only, and attn_cp_size set
// to tp_size / dp_size.
TEST(DeepseekCli, DeepseekV4ConfigGetsTheV4Rules) {
  SKIP_WITHOUT_REFERENCE();
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("ctxpar_dsv4_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  Json config = Json::parse(std::ifstream(kReference + "/config.json"));
  config["architectures"] = {"DeepseekV4ForCausalLM"};
  std::ofstream(dir / "config.json") << config.dump(2);
  std::filesystem::create_symlink(kReference + "/model.safetensors", dir / "model.safetensors");
  const RunResult zigzag = RunCtxpar({"check", "--model-path", dir.string(), "--tp-size", "2",
                                      "--enable-prefill-cp", "--cp-strategy", "zigzag"});
  EXPECT_EQ(zigzag.exit_status, 2);
  EXPECT_EQ(zigzag.err,
            "DeepSeekV4 only supports interleave CP strategy, got zigzag\nrun: ctxpar explain "
            "CTXPAR-DSV4-001\n");
  const RunResult check =
      RunCtxpar({"check", "--model-path", dir.string(), "--tp-size", "2", "--enable-prefill-cp",
                 "--cp-strategy", "interleave", "--json"});
  ASSERT_EQ(check.exit_status, 0) << check.err;
  const Json fields = Json::parse(check.out)["fields"];
  EXPECT_EQ(fields["attn_cp_size"]["value"], 2) << check.out;
  for (const char* name : {"attn_cp_size", "moe_dense_tp_size", "enable_dp_attention"}) {
    EXPECT_EQ(fields[name]["source"], "validate_deepseek_v4_cp") << name << check.out;
  }
  if (!std::string(CTXPAR_MPIEXEC).empty()) {
    const RunResult r = RunCtxpar(Generate(
        dir.string(), {"--tp-size", "2", "--enable-prefill-cp", "--cp-strategy", "interleave"}));
    EXPECT_EQ(r.exit_status, 0) << r.err;
    EXPECT_EQ(r.out, Prompt2().greedy + "\n");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
