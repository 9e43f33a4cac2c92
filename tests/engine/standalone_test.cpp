// Speculative decoding with a draft model (--speculative-algorithm STANDALONE) on SmolLM2-135M:
// every request's tokens and log-probabilities (top 3 alternatives) are bit for bit those of the
// same requests decoded one token per step, at tp 1 and at tp 3 / dcp 3 (ranks are threads of the
// in-process communicator; the draft model runs on rank 0 alone). Two drafts: SmolLM2 itself,
// whose greedy drafts the target accepts (accept length above 1 proves the drafts are used), and
// its first 20 layers (a file written by the test), which shares the vocabulary and disagrees at
// times, so drafts are rejected and their KV truncated in both pools. The batch mixes greedy and
// seeded sampling (temperature 0.8), one request is cancelled partway, prefills run in chunks
// (the draft model catches up a chunk per step), and a pool of 240 tokens that admission
// over-commits makes decode retract requests at tp 1. At tp 3 / dcp 3 with --kv-cache-mib 4 the
// draft pool (dcp 1: a page of 16 tokens per page of the target's 48) holds 80 tokens where the
// target holds 240, so requests find it full and go without drafts. Launch lines the engine
// refuses are checked with their IDs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ctxpar/tokenizer.h"
#include "engine/gguf_copy.h"
#include "engine/speculative_run.h"

namespace ctxpar {
namespace {

using testing::CancelAt;
using testing::Flags;
using testing::RunResult;

constexpr int kDraftLayers = 20;
constexpr CancelAt kCancel{4, 5};

const char* const kTexts[] = {
    "Deliveries ledger, March 2024\n"
    "2024-03-01 | Warehouse A | 12 crates of apples | received by J. Smith | status: complete\n"
    "2024-03-02 | Warehouse B | 8 crates of pears | received by J. Smith | status: complete\n"
    "2024-03-03 | Warehouse A |",
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "List the days of the week: Monday, Tuesday, Wednesday,",
    "Count: one two three four five six seven eight nine ten",
};

constexpr int kSampled = 2;  // seeded sampling at temperature 0.8; the others are greedy
std::vector<GenerateRequest> Requests() {
  auto launch = testing::TestLaunch(DefaultModelPath(), {});
  EXPECT_TRUE(launch.ok()) << launch.status().ToString();
  std::vector<GenerateRequest> out;
  for (int i = 0; i < static_cast<int>(std::size(kTexts)); ++i) {
    GenerateRequest r;
    r.prompt = launch->source->tokenizer()->Encode(kTexts[i]);
    r.sampling.max_new_tokens = 24;
    r.sampling.temperature = i == kSampled ? 0.8f : 0.0f;
    r.sampling.seed = 700 + i;
    r.sampling.ignore_eos = true;
    r.sampling.return_logprob = true;
    r.sampling.top_logprobs_num = 3;
    out.push_back(std::move(r));
  }
  return out;
}

class StandaloneTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(DefaultModelPath())) return;
    dir_ =
        std::filesystem::temp_directory_path() / ("ctxpar_standalone_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    // The first layers of the target, and the same with two tokens' texts swapped (both stay in
    // the vocabulary, which the tokenizer's merges need).
    const Status layers = testing::WriteGgufCopy(DefaultModelPath(), LayersDraft(), kDraftLayers);
    ASSERT_TRUE(layers.ok()) << layers.ToString();
    auto file = GgufFile::Open(DefaultModelPath());
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    auto tokens = file->GetArray<std::string>("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
    std::swap((*tokens)[100], (*tokens)[101]);
    const Status renamed =
        testing::WriteGgufCopy(DefaultModelPath(), RenamedDraft(), kDraftLayers,
                               {{"tokenizer.ggml.tokens", GgufValue(std::move(*tokens))}});
    ASSERT_TRUE(renamed.ok()) << renamed.ToString();
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    if (!std::filesystem::exists(DefaultModelPath())) {
      GTEST_SKIP() << "no SmolLM2 GGUF at " << DefaultModelPath()
                   << ": run scripts/fetch-model.sh or set CTXPAR_MODEL";
    }
  }
  static std::string LayersDraft() { return (dir_ / "layers.gguf").string(); }
  static std::string RenamedDraft() { return (dir_ / "renamed.gguf").string(); }

  static std::filesystem::path dir_;
};

std::filesystem::path StandaloneTest::dir_;

Flags Standalone(Flags flags, const std::string& draft) {
  flags.push_back({"speculative_algorithm", std::string("STANDALONE")});
  flags.push_back({"speculative_draft_model_path", draft});
  return flags;
}

// Every request of `fast` but `skip` received plain decoding's tokens and log-probabilities (the
// cancelled one up to its cancellation), through verify steps, and every page came back.
void ExpectPlainDecoding(const RunResult& plain, const RunResult& fast, std::optional<int> skip) {
  for (const auto& [i, a] : plain.out) {
    if (i == skip) continue;
    SCOPED_TRACE("request " + std::to_string(i));
    const testing::Outcome& b = fast.out.at(i);
    EXPECT_GT(b.spec_verify_ct, 0);
    if (i == kCancel.index) {
      testing::ExpectSameHead(a, b, kCancel.after);
      continue;
    }
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_TRUE(testing::SameLogprobs(a.logprobs, b.logprobs));
    EXPECT_EQ(a.finish, b.finish);
  }
  EXPECT_EQ(fast.stats.used_tokens, 0);
}

TEST_P(StandaloneTest, TokensAndLogprobsAreThoseOfPlainDecoding) {
  const int tp = GetParam();
  Flags flags = {{"dcp_size", int64_t{tp}},
                 {"chunked_prefill_size", int64_t{23}},
                 {"max_total_tokens", int64_t{240}},
                 {"schedule_conservativeness", 0.2}};
  if (tp > 1) flags.push_back({"kv_cache_mib", int64_t{4}});
  const std::vector<GenerateRequest> requests = Requests();
  Status st;
  const RunResult plain =
      testing::RunRequests(DefaultModelPath(), requests, tp, flags, kCancel, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  if (tp == 1) EXPECT_GT(plain.stats.retractions, 0u) << "the pool must be small enough to retract";

  for (const std::string& draft : {DefaultModelPath(), LayersDraft()}) {
    SCOPED_TRACE("draft " + draft);
    const RunResult fast = testing::RunRequests(DefaultModelPath(), requests, tp,
                                                Standalone(flags, draft), kCancel, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectPlainDecoding(plain, fast, {});
    const EngineSnapshot& s = fast.stats;
    const uint64_t accepted = s.spec_verify_tokens_total - s.spec_verify_steps_total;
    EXPECT_GT(s.spec_draft_tokens_total, 0u);
    if (draft == DefaultModelPath()) {
      // The model drafting for itself: verify steps give more than one token each.
      EXPECT_GT(accepted, 0u);
    } else {
      // The layers draft is wrong at times: rejected drafts' KV was truncated in both pools.
      EXPECT_LT(accepted, s.spec_draft_tokens_total);
    }
  }
  if (tp == 1) {
    // At the target's own layout the draft model computes the target's logits bit for bit, so a
    // greedy request accepts every draft: any slip in what the draft model is fed (a position,
    // a token, the KV kept after a verify step) shows as a rejected draft.
    std::vector<GenerateRequest> greedy = requests;
    greedy[kSampled].sampling.temperature = 0.0f;
    const RunResult fast = testing::RunRequests(
        DefaultModelPath(), greedy, tp, Standalone(flags, DefaultModelPath()), kCancel, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectPlainDecoding(plain, fast, kSampled);
    const EngineSnapshot& s = fast.stats;
    EXPECT_GT(s.spec_draft_tokens_total, 0u);
    EXPECT_EQ(s.spec_verify_tokens_total - s.spec_verify_steps_total, s.spec_draft_tokens_total);
  }
}

INSTANTIATE_TEST_SUITE_P(TpDcp, StandaloneTest, ::testing::Values(1, 3), [](const auto& info) {
  return "tp" + std::to_string(info.param) + "_dcp" + std::to_string(info.param);
});

// What the launch refuses, with its ID: STANDALONE without a draft model, a draft model with
// NGRAM, a draft path that is not a model, and drafts whose vocabulary is not the target's (by
// size: the 128-token tiny Llama; by text: SmolLM2's layers with two tokens swapped).
TEST_F(StandaloneTest, LaunchRefusesWhatCannotDraft) {
  struct Case {
    Flags flags;
    const char* id;
    std::string message;
  };
  const std::string tiny = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/llama/llama-f32.gguf";
  const std::string missing = (dir_ / "missing.gguf").string();
  const Case cases[] = {
      {{{"speculative_algorithm", std::string("STANDALONE")}},
       "CTXPAR-SPEC-004",
       "STANDALONE speculative decoding requires setting --speculative-draft-model-path."},
      {{{"speculative_algorithm", std::string("NGRAM")},
        {"speculative_draft_model_path", DefaultModelPath()}},
       "CTXPAR-SPEC-005",
       "--speculative-draft-model-path is only read by --speculative-algorithm STANDALONE; "
       "--speculative-algorithm NGRAM drafts without a draft model."},
      {Standalone({}, missing), "CTXPAR-SPEC-006",
       "The draft model --speculative-draft-model-path " + missing + " cannot be opened: "},
      {Standalone({}, tiny), "CTXPAR-SPEC-007",
       "The draft model " + tiny + " does not share the vocabulary of the target model " +
           DefaultModelPath() + ": the draft's vocabulary has 128 tokens, the target's 49152."},
      {Standalone({}, RenamedDraft()), "CTXPAR-SPEC-007",
       "The draft model " + RenamedDraft() + " does not share the vocabulary of the target model " +
           DefaultModelPath() + ": token 100 is "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id);
    auto launch = testing::TestLaunch(DefaultModelPath(), c.flags);
    ASSERT_FALSE(launch.ok());
    EXPECT_EQ(launch.status().error_id(), c.id);
    EXPECT_TRUE(launch.status().message().starts_with(c.message)) << launch.status().message();
  }
  // The layers of the target share its vocabulary: accepted.
  EXPECT_TRUE(testing::TestLaunch(DefaultModelPath(), Standalone({}, LayersDraft())).ok());
}

}  // namespace
}  // namespace ctxpar
