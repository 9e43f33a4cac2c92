// DenseModelShard, the checks of a dense model's factory: a TP communicator of another size than
// tp_size and a head layout the ranks cannot split are refused; otherwise each rank gets the
// shard worked out by hand from SmolLM2's shape (9 heads, 3 KV heads, head dim 64, hidden 576).
#include <gtest/gtest.h>

#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "models/layers/attention_shard.h"

namespace ctxpar::model {
namespace {

constexpr HeadLayout kSmolLm2{
    .num_heads = 9, .num_kv_heads = 3, .head_dim = 64, .dim = 576, .ffn_dim = 1536};

EngineConfig Config(int tp, int dcp) {
  EngineConfig c;
  c.tp_size = tp;
  c.dcp_size = dcp;
  return c;
}

TEST(DenseModelShard, RefusesACommunicatorOfAnotherSize) {
  auto group = MakeInProcessGroup(2);
  const Expected<HeadShard> s =
      DenseModelShard(kSmolLm2, "LlamaForCausalLM", Config(3, 1), *group[0]);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "tp_size (3) must equal the TP communicator's size (2)");
}

TEST(DenseModelShard, RefusesHeadsTheRanksCannotSplit) {
  auto group = MakeInProcessGroup(2);
  const Expected<HeadShard> s =
      DenseModelShard(kSmolLm2, "LlamaForCausalLM", Config(2, 1), *group[1]);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().error_id(), "CTXPAR-MODEL-002");
}

TEST(DenseModelShard, GivesEachRankItsHeadsAndRows) {
  auto group = MakeInProcessGroup(3);
  for (int r = 0; r < 3; ++r) {
    const Expected<HeadShard> s =
        DenseModelShard(kSmolLm2, "LlamaForCausalLM", Config(3, 3), *group[r]);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->tp_rank, r);
    EXPECT_EQ(s->dcp_rank, r);
    EXPECT_EQ(s->heads, 3);
    EXPECT_EQ(s->q_first, 3 * r);
    // The DCP group's 9 query heads read all 3 KV heads; each rank stores its tokens' share.
    EXPECT_EQ(s->kv_heads, 3);
    EXPECT_EQ(s->kv_first, 0);
    EXPECT_EQ(s->head_bounds, (std::vector<int>{0, 192, 384, 576}));
    EXPECT_EQ(s->dim_bounds, (std::vector<int>{0, 192, 384, 576}));
    // 1536 features are 48 blocks of 32: 16 per rank.
    EXPECT_EQ(s->ffn_bounds, (std::vector<int>{0, 512, 1024, 1536}));
  }
}

}  // namespace
}  // namespace ctxpar::model
