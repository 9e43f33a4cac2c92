// The DeepSeek-V3 forward against HF transformers' own implementation (the tiny reference
// checkpoint: float64 logits of every prompt position and 32-token greedy continuations for four
// prompts of 1, 7, 33 and 129 tokens), on one rank: prefill in the decompressed form, decode in
// the absorbed form (every prompt also decoded token by token, so that both forms meet the
// golden logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ctxpar/model.h"
#include "models/deepseek_test_util.h"

namespace ctxpar {
namespace {

TEST(DeepseekGolden, LogitsAndGreedyContinuationsOnOneRank) {
  CTXPAR_SKIP_WITHOUT_DEEPSEEK_REFERENCE();
  auto source = OpenModelSource(testing::kDeepseekReference);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const std::vector<testing::GoldenPrompt> golden = testing::ReadGoldenPrompts();
  ASSERT_EQ(golden.size(), 4u);
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& g : golden) prompts.push_back(g.ids);
  EngineConfig config = testing::DeepseekConfig(1);
  config.threads = 2;
  // Chunks of 1: every prompt token after the first is a decode row (the absorbed form).
  for (int chunk : {1 << 20, 1}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
    auto run = testing::RunDeepseek(**source, config, prompts, 32, chunk);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    double worst = 0.0;
    for (std::size_t i = 0; i < golden.size(); ++i) {
      worst =
          std::max(worst, testing::MaxAbsDiff((*run)[0].seqs[i].prompt_logits, golden[i].logits));
      EXPECT_EQ((*run)[0].seqs[i].tokens, golden[i].greedy) << "prompt " << i;
    }
    std::printf("chunk %d: worst |logit - golden| over all prompt positions %.3g\n", chunk, worst);
    EXPECT_LE(worst, testing::kGoldenLogitTolerance);
  }
}

}  // namespace
}  // namespace ctxpar
