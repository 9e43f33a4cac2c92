// What the Gemma 3 file tells the launch configuration, checked against its metadata as
// gguf-py reads it (docs/gemma3.md's table): the architecture, the heads, the KV layer groups
// (layers 5, 11, 17 global, the rest a window of 512), the KV heads a rank stores at each tp / dcp,
// and the rules of its hook; the capacity the file's KV shape gives at the same --kv-cache-mib
// (SGLang's hybrid-pool formula in float64, times 4 at dcp 4), and a 16k-token request through
// the scheduler holding in the window group only its window and chunk. Skips when the model file
// is absent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "ctxpar/launch.h"
#include "ctxpar/model.h"
#include "engine/scheduler.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

class Gemma3Source : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::Gemma3ModelPath();
    if (!std::filesystem::exists(path_)) {
      GTEST_SKIP() << "no Gemma 3 model at " << path_
                   << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
    }
  }
  std::string path_;
};

TEST_F(Gemma3Source, DescribesTheNetworkAndItsKvGroups) {
  auto launch = testing::TestLaunch(path_, {{"tp_size", int64_t{4}}, {"dcp_size", int64_t{4}}});
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  const ModelSource& source = *launch->source;
  EXPECT_EQ(source.info().architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(source.info().num_attention_heads, 4);
  EXPECT_EQ(source.info().num_key_value_heads, 1);
  EXPECT_EQ(source.desc().vocab_size, 262144);
  EXPECT_EQ(source.desc().context_length, 32768);
  const KvSpec spec = source.KvSpecFor(launch->config);
  EXPECT_EQ(spec.num_layers, 18);
  EXPECT_EQ(spec.num_kv_heads, 1);
  EXPECT_EQ(spec.head_dim_k, 256);
  ASSERT_EQ(spec.groups.size(), 2u);
  EXPECT_EQ(spec.groups[0].layers, (std::vector<int>{5, 11, 17}));
  EXPECT_EQ(spec.groups[0].window, 0);
  EXPECT_EQ(spec.groups[1].layers,
            (std::vector<int>{0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16}));
  EXPECT_EQ(spec.groups[1].window, 512);
  EXPECT_GT(launch->swa_max_total_num_tokens, 0);
}

TEST_F(Gemma3Source, HookRefusesWhatTheModelCannotRun) {
  struct Case {
    std::vector<std::pair<std::string, FieldValue>> fields;
    std::string id;
  };
  const std::vector<Case> cases = {
      {{{"tp_size", int64_t{3}}}, "CTXPAR-MODEL-002"},
      {{{"tp_size", int64_t{8}}}, "CTXPAR-MODEL-002"},
      {{{"llama_cpp_numerics", true}}, "CTXPAR-MODEL-005"},
      {{{"ep_size", int64_t{2}}, {"tp_size", int64_t{2}}}, "CTXPAR-MODEL-005"},
  };
  for (const Case& c : cases) {
    auto launch = testing::TestLaunch(path_, c.fields);
    ASSERT_FALSE(launch.ok()) << c.id;
    EXPECT_EQ(launch.status().error_id(), c.id) << launch.status().ToString();
  }
  for (int tp : {1, 2, 4}) {
    auto launch = testing::TestLaunch(path_, {{"tp_size", int64_t{tp}}});
    EXPECT_TRUE(launch.ok()) << "tp " << tp << ": " << launch.status().ToString();
  }
}

constexpr int64_t kMiB = int64_t{1} << 20;

Expected<Launch> CapacityLaunch(const std::string& path, int64_t dcp, int64_t mib) {
  return testing::TestLaunch(path, {{"tp_size", int64_t{4}},
                                    {"dcp_size", dcp},
                                    {"kv_cache_mib", mib},
                                    {"max_running_requests", int64_t{4}}});
}

// SGLang's hybrid pool at dcp 1: full_tokens = memory / (F * 3 + 0.8 * F * 15) with F the bytes
// of a layer's token (K and V of one head of 256, fp32), rounded down to pages of 16; dcp 4 holds
// 4 times the tokens at the same memory per rank (within a page on each of the 4 ranks).
TEST_F(Gemma3Source, DcpFourHoldsFourTimesTheFullGroupsTokens) {
  for (int64_t mib : {128, 256, 1024}) {
    auto one = CapacityLaunch(path_, 1, mib);
    auto four = CapacityLaunch(path_, 4, mib);
    ASSERT_TRUE(one.ok() && four.ok()) << one.status().ToString() << four.status().ToString();
    const double layer_token_bytes = 2.0 * 256 * 4;
    const int64_t sglang = int64_t(double(mib * kMiB) / (layer_token_bytes * (3 + 0.8 * 15)));
    EXPECT_EQ(one->max_total_num_tokens, sglang / 16 * 16) << mib << " MiB";
    EXPECT_LE(std::abs(four->max_total_num_tokens - 4 * one->max_total_num_tokens), 4 * 16)
        << mib << " MiB: dcp 1 " << one->max_total_num_tokens << ", dcp 4 "
        << four->max_total_num_tokens;
    EXPECT_LE(std::abs(four->swa_max_total_num_tokens - 4 * one->swa_max_total_num_tokens), 4 * 16);
  }
}

// A 16k-token prompt and 4 new tokens in chunks of 2048 through the scheduler on the pool the
// file gives (rank 0's): after every step's plan the window group holds exactly the pages of
// positions [pos0 - 511, pos0 + n), so at most W + one chunk positions (plus the partial pages at
// both ends) per window layer, while the full group holds every position; nothing is left held.
TEST_F(Gemma3Source, ASixteenKRequestHoldsAWindowAndAChunkInTheWindowGroup) {
  for (int64_t dcp : {1, 4}) {
    auto launch = CapacityLaunch(path_, dcp, dcp == 1 ? 512 : 128);
    ASSERT_TRUE(launch.ok()) << launch.status().ToString();
    auto made = KvPool::Create(launch->kv);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    KvPool& pool = *made;
    ASSERT_EQ(pool.num_groups(), 2);
    const int64_t window = pool.group(1).window, chunk = launch->config.chunked_prefill_size;
    ASSERT_EQ(window, 512);
    ASSERT_EQ(chunk, 2048);
    const int64_t per_page = pool.capacity_tokens(1) / pool.num_pages(1);
    ASSERT_EQ(per_page, 16 * dcp);
    const engine::SchedulerOptions options{.max_running_requests = 4,
                                           .chunked_prefill_size = static_cast<int>(chunk)};
    engine::Scheduler scheduler(options, &pool);
    engine::SeqState seq{.id = 1, .prompt_len = 16384, .max_new_tokens = 4};
    seq.tokens.assign(seq.prompt_len, 3);
    scheduler.Enqueue(&seq);
    int64_t most = 0;
    for (int step = 0; seq.output_len() < seq.max_new_tokens; ++step) {
      ASSERT_LT(step, 100) << "no progress";
      Expected<engine::StepPlan> plan = scheduler.Plan();
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      ASSERT_EQ(plan->batch.seqs.size(), 1u);
      const BatchSeq& b = plan->batch.seqs[0];
      const int64_t end = b.pos0 + b.num_tokens, first = std::max<int64_t>(0, b.pos0 - window + 1);
      ASSERT_LE(end - first, window - 1 + chunk);
      const int64_t held = pool.slot_pages(seq.slot, 1);
      EXPECT_EQ(held, pool.PagesFor(end, 1) - first / per_page)
          << "dcp " << dcp << " pos0 " << b.pos0;
      EXPECT_LE(held * per_page, window - 1 + chunk + 2 * (per_page - 1));
      EXPECT_EQ(pool.slot_pages(seq.slot, 0), pool.PagesFor(end, 0));
      most = std::max(most, held * per_page);
      ASSERT_TRUE(scheduler.Commit(*plan).ok());
      if (seq.kv_len == static_cast<int64_t>(seq.tokens.size())) seq.tokens.push_back(7);
    }
    ASSERT_TRUE(scheduler.Remove(&seq).ok());
    std::ignore = scheduler.TakePendingOps();
    EXPECT_EQ(pool.free_pages(0), pool.num_pages(0));
    EXPECT_EQ(pool.free_pages(1), pool.num_pages(1));
    std::printf("dcp %lld: at most %lld positions of the window group held (W + chunk = %lld)\n",
                static_cast<long long>(dcp), static_cast<long long>(most),
                static_cast<long long>(window + chunk));
  }
}

}  // namespace
}  // namespace ctxpar
