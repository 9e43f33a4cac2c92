// Layout invariance of the DeepSeek-V3 model on in-process ranks: TP, DCP with every combine
// backend (with and without replicated Q), EP with both MoE backends, prefill CP with both
// strategies, chunked prefill (the decompressed form gathering earlier latents from the DCP
// group), over 1, 2 and 4 ranks. Every layout must meet the HF golden logits within the stated
// tolerance and reproduce its greedy continuations exactly; the MPI runs are in
// deepseek_mpi_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "ctxpar/model.h"
#include "models/deepseek_test_util.h"

namespace ctxpar {
namespace {

struct Layout {
  const char* name;
  int tp;
  int dcp;
  CombineBackend backend;
  bool replicate_q;
  int ep = 1;
  MoeA2aBackend moe = MoeA2aBackend::kNone;
  int cp = 1;
  CpStrategy strategy = CpStrategy::kNone;
  int chunk = 1 << 20;
  int interleave = 1;
  bool dense_replicated = false;
};

using CB = CombineBackend;
using MB = MoeA2aBackend;
const Layout kLayouts[] = {
    {"tp2", 2, 1, CB::kAgRs, false},
    {"tp4", 4, 1, CB::kAgRs, false},
    {"tp2_dcp2_ag_rs", 2, 2, CB::kAgRs, false},
    {"tp2_dcp2_a2a_repq", 2, 2, CB::kA2a, true},
    {"tp4_dcp4_ag_rs", 4, 4, CB::kAgRs, false},
    {"tp4_dcp4_a2a", 4, 4, CB::kA2a, false},
    {"tp4_dcp4_a2a_repq", 4, 4, CB::kA2a, true},
    {"tp4_dcp4_shm_a2a_repq", 4, 4, CB::kShmA2a, true},
    {"tp4_dcp2_shm_a2a", 4, 2, CB::kShmA2a, false},
    {"tp4_dcp4_a2a_chunk16", 4, 4, CB::kA2a, false, 1, MB::kNone, 1, CpStrategy::kNone, 16},
    {"tp2_dcp2_interleave4_chunk24", 2, 2, CB::kAgRs, false, 1, MB::kNone, 1, CpStrategy::kNone, 24,
     4},
    {"tp4_ep2_none", 4, 1, CB::kAgRs, false, 2},
    {"tp4_ep4_none", 4, 1, CB::kAgRs, false, 4},
    {"tp2_deepep", 2, 1, CB::kAgRs, false, 2, MB::kDeepep},
    {"tp4_dcp4_a2a_repq_deepep", 4, 4, CB::kA2a, true, 4, MB::kDeepep},
    {"tp2_cp2_interleave", 2, 1, CB::kAgRs, false, 1, MB::kNone, 2, CpStrategy::kInterleave},
    {"tp2_cp2_zigzag_dcp2", 2, 2, CB::kA2a, true, 1, MB::kNone, 2, CpStrategy::kZigzag},
    {"tp4_cp2_zigzag_dcp2_chunk20", 4, 2, CB::kAgRs, false, 1, MB::kNone, 2, CpStrategy::kZigzag,
     20},
    // DeepSeek-V4's rules: attn_cp_size = tp, the dense MLP replicated, deepep.
    {"tp4_cp4_interleave_deepep_dense1", 4, 1, CB::kAgRs, false, 4, MB::kDeepep, 4,
     CpStrategy::kInterleave, 1 << 20, 1, true},
};

class DeepseekInvariance : public ::testing::TestWithParam<Layout> {};

TEST_P(DeepseekInvariance, MeetsTheGoldenLogitsAndContinuations) {
  CTXPAR_SKIP_WITHOUT_DEEPSEEK_REFERENCE();
  const Layout& l = GetParam();
  auto source = OpenModelSource(testing::kDeepseekReference);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EngineConfig c = testing::DeepseekConfig(l.tp, l.dcp, l.backend, l.replicate_q);
  c.ep_size = l.ep;
  c.moe_a2a_backend = l.moe;
  c.enable_prefill_cp = l.cp > 1;
  c.attn_cp_size = l.cp;
  c.cp_strategy = l.strategy;
  c.dcp_kv_cache_interleave_size = l.interleave;
  if (l.dense_replicated) c.moe_dense_tp_size = 1;
  const std::vector<testing::GoldenPrompt> golden = testing::ReadGoldenPrompts();
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& g : golden) prompts.push_back(g.ids);
  auto run = testing::RunDeepseek(**source, c, prompts, 32, l.chunk);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  double worst = 0.0;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    worst = std::max(worst, testing::MaxAbsDiff((*run)[0].seqs[i].prompt_logits, golden[i].logits));
    EXPECT_EQ((*run)[0].seqs[i].tokens, golden[i].greedy) << "prompt " << i;
  }
  for (std::size_t r = 1; r < run->size(); ++r) {  // the same logits on every rank
    for (std::size_t i = 0; i < golden.size(); ++i) {
      EXPECT_EQ((*run)[r].seqs[i].prompt_logits, (*run)[0].seqs[i].prompt_logits) << "rank " << r;
      EXPECT_EQ((*run)[r].seqs[i].tokens, (*run)[0].seqs[i].tokens) << "rank " << r;
    }
  }
  std::printf("%s: worst |logit - golden| %.3g\n", l.name, worst);
  EXPECT_LE(worst, testing::kGoldenLogitTolerance);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DeepseekInvariance, ::testing::ValuesIn(kLayouts),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::string(info.param.name);
                         });

// Batch invariance (batch.h): a prompt's logits and continuation have the same bits alone and
// batched with the other prompts, and with its prefill in one chunk or in chunks of 12 tokens
// (a later chunk reads the earlier latents back from the pool), on one rank and over DCP. 12
// leaves no prompt (1, 7, 33, 129 tokens) a last chunk of one token, which would be a decode row
// in the absorbed form: equal to fp32 rounding only (docs/deepseek.md).
TEST(DeepseekBatchInvariance, AloneBatchedAndChunkedGiveTheSameBits) {
  CTXPAR_SKIP_WITHOUT_DEEPSEEK_REFERENCE();
  auto source = OpenModelSource(testing::kDeepseekReference);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const auto golden = testing::ReadGoldenPrompts();
  std::vector<std::vector<int32_t>> all;
  for (const auto& g : golden) all.push_back(g.ids);
  for (const EngineConfig& c :
       {testing::DeepseekConfig(1), testing::DeepseekConfig(2, 2, CombineBackend::kA2a, false)}) {
    SCOPED_TRACE("tp " + std::to_string(c.tp_size) + " dcp " + std::to_string(c.dcp_size));
    auto alone = testing::RunDeepseek(**source, c, {golden[3].ids}, 8);
    auto batched = testing::RunDeepseek(**source, c, all, 8);
    auto chunked = testing::RunDeepseek(**source, c, all, 8, 12);
    ASSERT_TRUE(alone.ok() && batched.ok() && chunked.ok());
    const testing::SeqResult& a = (*alone)[0].seqs[0];
    EXPECT_EQ((*batched)[0].seqs[3].prompt_logits, a.prompt_logits);
    EXPECT_EQ((*batched)[0].seqs[3].tokens, a.tokens);
    for (std::size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ((*chunked)[0].seqs[i].prompt_logits, (*batched)[0].seqs[i].prompt_logits) << i;
      EXPECT_EQ((*chunked)[0].seqs[i].tokens, (*batched)[0].seqs[i].tokens) << i;
    }
  }
}

}  // namespace
}  // namespace ctxpar
