// What the DeepSeek model's collectives move, against the formulas of docs/deepseek.md for the
// shapes used (bytes a rank sends to the other ranks; Communicator's counters). A prompt of 7
// tokens is prefilled in one forward, then one token is decoded.
#include <gtest/gtest.h>

#include "ctxpar/model.h"
#include "models/deepseek_test_util.h"

namespace ctxpar {
namespace {

constexpr uint64_t kF = 4;  // bytes per fp32
constexpr uint64_t kLayers = 4, kDim = 256, kHeads = 8, kLatent = 80, kLora = 64;
constexpr uint64_t kPrompt = 7, kVocabShard4 = 256;

const std::vector<int32_t>& Prompt() {
  static const std::vector<int32_t> p = testing::ReadGoldenPrompts()[1].ids;
  return p;
}

struct Counts {
  uint64_t calls = 0;
  uint64_t sent = 0;
};

Counts Of(const CommCounters& c, Collective k) { return {c[k].calls, c[k].bytes_sent}; }

void ExpectCounts(const CommCounters& c, Collective k, Counts want, const std::string& what) {
  EXPECT_EQ(c[k].calls, want.calls) << what << " " << CollectiveName(k) << " calls";
  EXPECT_EQ(c[k].bytes_sent, want.sent) << what << " " << CollectiveName(k) << " bytes";
}

// TP group: per layer one all-gather of the o_proj partials and one of the MLP's (T x dim each),
// then the vocab shards of the logits rows; the prefill wants all 7 rows, the decode 1.
Counts TpAllGathers(uint64_t tp) {
  const uint64_t tokens = kPrompt + 1;
  return {2 * kLayers * 2 + 2,
          (tp - 1) * (kLayers * 2 * tokens * kDim + tokens * kVocabShard4) * kF};
}

class DeepseekComm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(testing::kDeepseekReference + "/config.json")) {
      GTEST_SKIP() << "the tiny DeepSeek-V3 reference checkpoint is not at "
                   << testing::kDeepseekReference;
    }
    auto s = OpenModelSource(testing::kDeepseekReference);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    source_ = std::move(*s);
  }
  std::vector<testing::RankResult> Run(const EngineConfig& c, int chunk = 1 << 20) {
    auto r = testing::RunDeepseek(*source_, c, {Prompt()}, 2, chunk);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : std::vector<testing::RankResult>{};
  }
  std::unique_ptr<ModelSource> source_;
};

// The decode's absorbed attention over DCP 4 at tp 4 (h = 2 heads per rank, one decode row):
// Q all-gather (N-1)*h*L*4 unless Q is replicated, then the combine.
TEST_F(DeepseekComm, DecodeCollectivesPerCombineBackendAndQPath) {
  const uint64_t n = 4, h = kHeads / 4;
  for (bool repq : {false, true}) {
    const auto ranks = Run(testing::DeepseekConfig(4, 4, CombineBackend::kA2a, repq));
    ASSERT_EQ(ranks.size(), 4u);
    const std::string what = repq ? "a2a replicated Q" : "a2a";
    for (const auto& r : ranks) {
      ExpectCounts(r.tp, Collective::kAllGather, TpAllGathers(4), what);
      ExpectCounts(r.dcp, Collective::kAllGather,
                   repq ? Counts{0, 0} : Counts{kLayers, kLayers * (n - 1) * h * kLatent * kF},
                   what);
      ExpectCounts(r.dcp, Collective::kAllToAllV,
                   {kLayers, kLayers * (n - 1) * h * (kLora * kF + kF)}, what);
      ExpectCounts(r.dcp, Collective::kReduceScatter, {0, 0}, what);
    }
  }
  const auto ranks = Run(testing::DeepseekConfig(4, 4, CombineBackend::kAgRs, false));
  for (const auto& r : ranks) {
    // Q, then the LSE of the widened head set: N*h per row.
    ExpectCounts(r.dcp, Collective::kAllGather,
                 {2 * kLayers, kLayers * (n - 1) * (h * kLatent + n * h) * kF}, "ag_rs");
    ExpectCounts(r.dcp, Collective::kReduceScatter,
                 {kLayers, kLayers * (n - 1) * h * kLora * kF}, "ag_rs");
    ExpectCounts(r.dcp, Collective::kAllToAllV, {0, 0}, "ag_rs");
  }
}

// Prefill CP 2 (interleave): the CP ranks compute 4 and 3 of the 7 tokens' latents and
// all-gather them, padded to 4 rows of L.
TEST_F(DeepseekComm, PrefillCpGathersTheLatents) {
  EngineConfig c = testing::DeepseekConfig(2);
  c.enable_prefill_cp = true;
  c.attn_cp_size = 2;
  c.cp_strategy = CpStrategy::kInterleave;
  for (const auto& r : Run(c)) {
    ExpectCounts(r.cp, Collective::kAllGather, {kLayers, kLayers * 1 * 4 * kLatent * kF},
                 "cp 2");
  }
}

// Chunked prefill over DCP 2: the second chunk (positions 4..6) gathers the latents of
// positions 0..3 from the two shards, 2 rows each.
TEST_F(DeepseekComm, ChunkedPrefillGathersThePrefixFromTheDcpGroup) {
  for (const auto& r : Run(testing::DeepseekConfig(2, 2, CombineBackend::kA2a, true), 4)) {
    // The prefix gather per layer, then nothing else: the decode's Q is replicated.
    ExpectCounts(r.dcp, Collective::kAllGather, {kLayers, kLayers * 1 * 2 * kLatent * kF},
                 "chunked");
  }
}

}  // namespace
}  // namespace ctxpar
