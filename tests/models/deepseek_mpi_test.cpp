// The DeepSeek-V3 model over MPI ranks (mpiexec -np 2 and 4): TP, DCP with replicated Q over
// a2a, EP with deepep and none, and prefill CP with both strategies reproduce the HF golden
// logits and greedy continuations of the 7- and 33-token prompts. Every rank checks its own
// result (the logits are the same on every rank).
#include <gtest/gtest.h>

#include "ctxpar/communicator.h"
#include "ctxpar/model.h"
#include "models/deepseek_test_util.h"

namespace ctxpar {
namespace {

EngineConfig LayoutFor(int np, int variant) {
  EngineConfig c = testing::DeepseekConfig(np, np, CombineBackend::kA2a, true);
  switch (variant) {
    case 0:  // DCP over every rank, replicated Q, deepep
      c.moe_a2a_backend = MoeA2aBackend::kDeepep;
      c.ep_size = np;
      break;
    case 1:  // ag_rs, EP over half the ranks with none, chunked prefill
      c.dcp_size = np / 2 > 1 ? np / 2 : np;
      c.dcp_comm_backend = CombineBackend::kAgRs;
      c.dcp_replicate_q_proj = false;
      c.ep_size = np / 2 > 1 ? np / 2 : np;
      break;
    default:  // prefill CP over every rank (attention TP 1), zigzag at 2 ranks, interleave at 4
      c.dcp_size = 1;
      c.dcp_comm_backend = CombineBackend::kAgRs;
      c.dcp_replicate_q_proj = false;
      c.enable_prefill_cp = true;
      c.attn_cp_size = np;
      c.cp_strategy = np == 2 ? CpStrategy::kZigzag : CpStrategy::kInterleave;
      break;
  }
  return c;
}

TEST(DeepseekMpi, EveryLayoutMeetsTheGolden) {
  CTXPAR_SKIP_WITHOUT_DEEPSEEK_REFERENCE();
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  const int np = (*world)->size();
  auto source = OpenModelSource(testing::kDeepseekReference);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const auto golden = testing::ReadGoldenPrompts();
  const std::vector<std::vector<int32_t>> prompts = {golden[1].ids, golden[2].ids};
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("np " + std::to_string(np) + " variant " + std::to_string(variant));
    auto r = testing::RunDeepseekRank(**source, LayoutFor(np, variant), **world, prompts, 32,
                                      variant == 1 ? 12 : 1 << 20);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_LE(testing::MaxAbsDiff(r->seqs[i].prompt_logits, golden[i + 1].logits),
                testing::kGoldenLogitTolerance);
      EXPECT_EQ(r->seqs[i].tokens, golden[i + 1].greedy);
    }
  }
}

}  // namespace
}  // namespace ctxpar
