// Gemma 3 270M (gemma-3-270m-q4_k_m.gguf) against HF transformers' float32 forward on the same
// weights dequantized by gguf-py (tests/data/gemma3/golden.json, made by
// tools/golden/gemma3/make_golden.py): the top-10 logits at a few positions of an 8-token prompt
// and of a 700-token one (past the 512-token window of five layers in six), and the greedy
// continuations. Skips when the model file is absent (scripts/fetch-model.sh gemma3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/sampling.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

// ctxpar multiplies the same dequantized weights by fp32 activations in another summation order
// (and builds RoPE angles as ggml does): of logits of size 10 to 30, the golden top-10s agree
// within 5e-5 on the short prompt and 0.002 on the long one (docs/gemma3.md).
constexpr double kLogitTolerance = 0.01;

class Gemma3Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::Gemma3ModelPath();
    if (!std::filesystem::exists(path_)) {
      GTEST_SKIP() << "no Gemma 3 model at " << path_
                   << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
    }
    std::ifstream in(std::string(CTXPAR_TEST_DATA_DIR) + "/gemma3/golden.json");
    golden_ = nlohmann::json::parse(in);
  }

  const nlohmann::json& Prompt(const std::string& name) const {
    for (const auto& p : golden_.at("prompts")) {
      if (p.at("name") == name) return p;
    }
    throw std::runtime_error("no prompt " + name);
  }

  // The prompt in chunks ending at each position of its "top" list, each chunk's last logits
  // against the golden top-10; then the greedy continuation against the golden one.
  void Check(const std::string& name) {
    const nlohmann::json& p = Prompt(name);
    const auto ids = p.at("prompt_ids").get<std::vector<int32_t>>();
    Status st = RunInProcess(1, [&](Communicator& comm) -> Status {
      CTXPAR_ASSIGN_OR_RETURN(Launch launch, testing::TestLaunch(path_, {{"threads", int64_t{2}}}));
      CTXPAR_ASSIGN_OR_RETURN(testing::SequenceRunner model,
                              testing::SequenceRunner::Create(*launch.source, launch.config, comm));
      std::size_t done = 0;
      std::vector<float> logits;
      double worst = 0.0;
      for (const auto& top : p.at("top")) {
        const std::size_t pos = top.at("position").get<std::size_t>();
        CTXPAR_ASSIGN_OR_RETURN(
            logits, model.Forward(std::span<const int32_t>(ids).subspan(done, pos + 1 - done)));
        done = pos + 1;
        for (const auto& entry : top.at("top")) {
          const int32_t id = entry.at(0).get<int32_t>();
          const double want = entry.at(1).get<double>();
          worst = std::max(worst, std::fabs(logits[id] - want));
          EXPECT_NEAR(logits[id], want, kLogitTolerance)
              << name << " position " << pos << " id " << id;
        }
      }
      if (done < ids.size()) {
        CTXPAR_ASSIGN_OR_RETURN(logits, model.Forward(std::span<const int32_t>(ids).subspan(done)));
      }
      const auto greedy = p.at("greedy").get<std::vector<int32_t>>();
      const auto margins = p.at("margins").get<std::vector<double>>();
      for (std::size_t i = 0; i < greedy.size(); ++i) {
        const int32_t next = Greedy(logits);
        // Past a near tie the two continuations may part legitimately.
        if (margins[i] < 2 * kLogitTolerance) break;
        EXPECT_EQ(next, greedy[i]) << name << " greedy step " << i;
        if (next != greedy[i]) break;
        CTXPAR_ASSIGN_OR_RETURN(logits, model.Forward(std::span<const int32_t>(&next, 1)));
      }
      std::printf("%s: max |logit - HF| over the golden top-10s: %.4f\n", name.c_str(), worst);
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  std::string path_;
  nlohmann::json golden_;
};

TEST_F(Gemma3Golden, PromptShorterThanTheWindow) { Check("short"); }

TEST_F(Gemma3Golden, PromptLongerThanTheWindow) { Check("long"); }

}  // namespace
}  // namespace ctxpar
