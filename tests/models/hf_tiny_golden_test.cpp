// The dense GGUF architectures against HF transformers' float32 forward (tests/data/hf_tiny,
// made by tools/golden/hf_tiny/make_goldens.py): tiny random checkpoints (2 layers, 128 tokens)
// converted by llama.cpp's convert_hf_to_gguf.py to F32, F16, BF16 and Q8_0, whose weights are
// exact in each type, so one golden serves the four files (a RoPE variant, Llama with linear
// scaling, has its Q8_0 file only). For prompts of 8, 100 and 700 token
// ids: the 16 greedy tokens identical, and the top-5 logits of each step within 1e-3, on one
// rank and over tp 2 / 4 ranks with DCP (threads as ranks, every combine backend), which must
// give the tp 1 tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/sampling.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

// The same weights in another summation order: measured at most 3.5e-4 (gpt_oss's and
// qwen2_yarn's 700-token prompts, where transformers' float angle table sits about 3e-5 rad
// from the exact one that ctxpar's scaled RoPE computes in double), 4e-5 elsewhere; the
// goldens' smallest top-2 margin is 0.0013.
constexpr double kLogitTolerance = 1e-3;

const char* const kArchs[] = {"llama",         "llama3",        "llama_linear",
                              "qwen2",         "qwen3moe",      "qwen3",
                              "phi3",          "olmo2",         "gemma2",
                              "phi3_longrope", "qwen2_yarn",    "mistral",
                              "ministral3",    "phi3_window",   "deepseek_v3",
                              "gpt_oss",       "gpt_oss_mxfp4", "deepseek_v3_yarn",
                              "deepseek_v2"};

struct Layout {
  int tp;
  int dcp;
  const char* backend;
  bool replicate_q;
};

const Layout kLayouts[] = {{1, 1, "ag_rs", false},
                           {2, 1, "ag_rs", false},
                           {2, 2, "a2a", false},
                           {2, 2, "shm_a2a", true},
                           {4, 2, "ag_rs", false}};

struct Step {
  int32_t token;
  std::vector<float> logits;
};

// The prompt in one forward, then the greedy continuation token by token (rank 0's view).
std::vector<Step> RunGreedy(const std::string& path, const Layout& l,
                            const std::vector<int32_t>& prompt, int steps, Status* status) {
  std::vector<Step> out;
  std::mutex mu;
  *status = RunInProcess(l.tp, [&](Communicator& comm) -> Status {
    CTXPAR_ASSIGN_OR_RETURN(Launch launch,
                            testing::TestLaunch(path, {{"tp_size", int64_t{l.tp}},
                                                       {"dcp_size", int64_t{l.dcp}},
                                                       {"dcp_comm_backend", std::string(l.backend)},
                                                       {"dcp_replicate_q_proj", l.replicate_q},
                                                       {"threads", int64_t{1}}}));
    CTXPAR_ASSIGN_OR_RETURN(testing::SequenceRunner model,
                            testing::SequenceRunner::Create(*launch.source, launch.config, comm));
    CTXPAR_ASSIGN_OR_RETURN(std::vector<float> logits, model.Forward(prompt));
    std::vector<Step> mine;
    for (int i = 0; i < steps; ++i) {
      const int32_t next = Greedy(logits);
      mine.push_back({next, logits});
      if (i + 1 < steps) {
        CTXPAR_ASSIGN_OR_RETURN(logits, model.Forward(std::span<const int32_t>(&next, 1)));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    if (comm.rank() == 0) out = std::move(mine);
    return Status::Ok();
  });
  return out;
}

class HfTinyGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(HfTinyGolden, EveryWeightTypeAndLayoutFollowsTransformers) {
  const std::string dir = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/" + GetParam();
  std::ifstream in(dir + "/golden.json");
  ASSERT_TRUE(in) << dir;
  const nlohmann::json golden = nlohmann::json::parse(in);
  // Every file of the golden: the four types, or Q8_0 alone for a RoPE variant (llama_linear).
  ASSERT_GE(golden.at("files").size(), 1u);
  for (const auto& [type, file] : golden.at("files").items()) {
    const std::string path = dir + "/" + file.at("file").get<std::string>();
    for (const Layout& l : kLayouts) {
      for (const auto& p : golden.at("prompts")) {
        const auto ids = p.at("prompt_ids").get<std::vector<int32_t>>();
        const auto greedy = p.at("greedy").get<std::vector<int32_t>>();
        const std::string what = std::string(GetParam()) + " " + type + " tp " +
                                 std::to_string(l.tp) + " dcp " + std::to_string(l.dcp) + " " +
                                 l.backend + (l.replicate_q ? " replicated Q " : " ") +
                                 p.at("name").get<std::string>();
        Status st;
        const std::vector<Step> steps =
            RunGreedy(path, l, ids, static_cast<int>(greedy.size()), &st);
        ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
        ASSERT_EQ(steps.size(), greedy.size()) << what;
        double worst = 0.0;
        for (std::size_t i = 0; i < greedy.size(); ++i) {
          ASSERT_EQ(steps[i].token, greedy[i]) << what << " step " << i;
          for (const auto& entry : p.at("top").at(i)) {
            const int32_t id = entry.at(0).get<int32_t>();
            const double want = entry.at(1).get<double>();
            worst = std::max(worst, std::fabs(steps[i].logits[id] - want));
            ASSERT_NEAR(steps[i].logits[id], want, kLogitTolerance)
                << what << " step " << i << " id " << id;
          }
        }
        RecordProperty(what, std::to_string(worst));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfTinyGolden, ::testing::ValuesIn(kArchs),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ctxpar
