// The prefix cache with the real models: a request's tokens and log-probabilities (seeded
// sampling at temperature 0.8, top 3 alternatives) are bit for bit those of the same request with
// --disable-radix-cache, run alone and prefilled in one piece. SmolLM2-135M at tp 1 and tp 3 /
// dcp 3; Gemma 3 270M, whose sliding-window layers (W = 512) need the window pages of a cached
// prefix, at tp 1 and tp 4 / dcp 4 (ranks are threads of the in-process communicator).
//
// The trace: a first round of requests sharing a system prompt, then a second round in which each
// conversation resends its first prompt and answer with a new question (a chat's next turn).
// SmolLM2: a 100-token system prompt, a pool of 384 tokens that admission over-commits, so the
// cache evicts and decode retracts: retracted requests come back with what the cache still holds.
// Gemma 3: a 600-token system prompt, longer than the window, prefilled in chunks of 128 so that
// windows slide; the window group holds fewer tokens than the running requests' windows and the
// cache's window pages, so the cache lets window pages go.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/launch.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

// What a trace sends: conversations sharing a system prompt, questions of question + 3 * c
// tokens (conversation c), follow-ups of 8 tokens.
struct Trace {
  std::string model;
  int conversations;
  int system_tokens;
  int question;
  int32_t vocab;  // token ids are drawn from [100, vocab)
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  int cached_tokens = 0;
};

struct TraceRun {
  std::map<int, Outcome> out;  // by round * kConversations + conversation
  EngineSnapshot stats;
};

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int32_t vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(100 + static_cast<int32_t>(rng() % (vocab - 100)));
  return t;
}

GenerateRequest Request(std::vector<int32_t> prompt, int index) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.max_new_tokens = 12 + index % 5;
  r.sampling.temperature = 0.8f;
  r.sampling.top_k = 40;
  r.sampling.seed = 500 + index;
  r.sampling.ignore_eos = true;
  r.sampling.return_logprob = true;
  r.sampling.top_logprobs_num = 3;
  return r;
}

bool Same(const Outcome& a, const Outcome& b) {
  if (a.tokens != b.tokens || a.logprobs.size() != b.logprobs.size()) return false;
  for (std::size_t i = 0; i < a.logprobs.size(); ++i) {
    const TokenLogprob &x = a.logprobs[i], &y = b.logprobs[i];
    if (x.token != y.token || x.logprob != y.logprob || x.top != y.top) return false;
  }
  return true;
}

// Two rounds on one engine per rank; the second round's prompts are the first's prompts and
// outputs with a new question.
TraceRun RunTrace(const Trace& trace, int tp, int dcp,
                  const std::vector<std::pair<std::string, FieldValue>>& flags, Status* status) {
  const int kConversations = trace.conversations;
  std::mt19937 rng(17);
  const std::vector<int32_t> system = RandomTokens(rng, trace.system_tokens, trace.vocab);
  std::vector<std::vector<int32_t>> questions, follow_ups;
  for (int c = 0; c < kConversations; ++c) {
    questions.push_back(RandomTokens(rng, trace.question + c * 3, trace.vocab));
    follow_ups.push_back(RandomTokens(rng, 8, trace.vocab));
  }
  TraceRun run;
  std::mutex mu;
  *status = RunInProcess(tp, [&](Communicator& comm) -> Status {
    LaunchConfig raw;
    CTXPAR_RETURN_IF_ERROR(raw.Set("model_path", trace.model));
    CTXPAR_RETURN_IF_ERROR(raw.Set("threads", int64_t{1}));
    CTXPAR_RETURN_IF_ERROR(raw.Set("tp_size", int64_t{tp}));
    CTXPAR_RETURN_IF_ERROR(raw.Set("dcp_size", int64_t{dcp}));
    for (const auto& [name, value] : flags) CTXPAR_RETURN_IF_ERROR(raw.Set(name, value));
    CTXPAR_ASSIGN_OR_RETURN(Launch launch, PrepareLaunch(raw));
    CTXPAR_ASSIGN_OR_RETURN(auto engine,
                            Engine::Create(launch.config, *launch.source, comm, nullptr));
    std::vector<std::vector<int32_t>> prompts(kConversations);
    for (int round = 0; round < 2; ++round) {
      if (comm.rank() == 0) {
        for (int c = 0; c < kConversations; ++c) {
          const int index = round * kConversations + c;
          std::vector<int32_t>& p = prompts[c];
          if (round == 0) {
            p = system;
            p.insert(p.end(), questions[c].begin(), questions[c].end());
          } else {
            const std::vector<int32_t>& answer = run.out[c].tokens;
            p.insert(p.end(), answer.begin(), answer.end());
            p.insert(p.end(), follow_ups[c].begin(), follow_ups[c].end());
          }
          CTXPAR_RETURN_IF_ERROR(
              engine
                  ->Submit(Request(p, index),
                           [&, index](const RequestUpdate& u) {
                             std::lock_guard<std::mutex> lock(mu);
                             Outcome& o = run.out[index];
                             o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
                             o.logprobs.insert(o.logprobs.end(), u.logprobs.begin(),
                                               u.logprobs.end());
                             o.cached_tokens = u.cached_tokens;
                           })
                  .status());
        }
      }
      CTXPAR_RETURN_IF_ERROR(engine->Run(Engine::RunUntil::kIdle));
    }
    if (comm.rank() == 0) run.stats = engine->Snapshot();
    return Status::Ok();
  });
  return run;
}

using Flags = std::vector<std::pair<std::string, FieldValue>>;

// Runs the trace alone (no cache, one request at a time, whole prefills) and with the cache under
// `flags`; every request's outcome must be the same, and none came from the cache alone.
void RunBoth(const Trace& trace, int tp, int dcp, const Flags& flags, TraceRun* alone,
             TraceRun* cached) {
  Status st;
  *alone = RunTrace(trace, tp, dcp,
                    {{"disable_radix_cache", true},
                     {"chunked_prefill_size", int64_t{-1}},
                     {"max_running_requests", int64_t{1}}},
                    &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  *cached = RunTrace(trace, tp, dcp, flags, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(alone->stats.cached_tokens_total, 0u);
  for (int i = 0; i < 2 * trace.conversations; ++i) {
    ASSERT_EQ(cached->out.count(i), 1u) << "request " << i;
    EXPECT_TRUE(Same(cached->out.at(i), alone->out.at(i))) << "request " << i;
    EXPECT_EQ(alone->out.at(i).cached_tokens, 0);
  }
  EXPECT_EQ(cached->stats.used_tokens, 0);
}

std::string TpDcpName(const ::testing::TestParamInfo<std::pair<int, int>>& info) {
  return "tp" + std::to_string(info.param.first) + "_dcp" + std::to_string(info.param.second);
}

class PrefixCacheTest : public ::testing::TestWithParam<std::pair<int, int>> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(DefaultModelPath())) {
      GTEST_SKIP() << "no SmolLM2 GGUF at " << DefaultModelPath()
                   << ": run scripts/fetch-model.sh or set CTXPAR_MODEL";
    }
  }
};

TEST_P(PrefixCacheTest, HitsEvictionsAndRetractionsGiveTheLogitsOfTheRequestAlone) {
  const auto [tp, dcp] = GetParam();
  constexpr int kConversations = 6, kSystemTokens = 100;
  constexpr int64_t kPoolTokens = 384;
  const Trace trace{DefaultModelPath(), kConversations, kSystemTokens, 5, 20100};
  TraceRun alone, cached;
  ASSERT_NO_FATAL_FAILURE(RunBoth(trace, tp, dcp,
                                  {{"chunked_prefill_size", int64_t{29}},
                                   {"max_total_tokens", kPoolTokens},
                                   {"schedule_conservativeness", 0.2}},
                                  &alone, &cached));
  // The first request computes the system prompt; the next ones find at least one page of it
  // (those admitted while it still prefills, what it has cached so far), the later ones all its
  // whole pages; the second round finds more than the system prompt: the first turn.
  const int page_tokens = 16 * dcp;
  EXPECT_EQ(cached.out.at(0).cached_tokens, 0);
  int most = 0, most_second = 0;
  for (int c = 1; c < kConversations; ++c) {
    EXPECT_GE(cached.out.at(c).cached_tokens, page_tokens) << c;
    most = std::max(most, cached.out.at(c).cached_tokens);
    most_second = std::max(most_second, cached.out.at(kConversations + c).cached_tokens);
  }
  EXPECT_EQ(most, kSystemTokens / page_tokens * page_tokens);
  if (dcp == 1) EXPECT_GT(most_second, most);  // a page of 48 ends inside the first question
  EXPECT_GT(cached.stats.retractions, 0u) << "the pool was meant to force retractions";
  // The second round's prompts (each over the system prompt, a question, an answer of at least 12
  // tokens and a follow-up of 8) exceed the pool: the cache had to evict.
  static_assert(kConversations * (kSystemTokens + 5 + 12 + 8) > kPoolTokens);
  EXPECT_LE(cached.stats.cache_tokens, kPoolTokens);
}

INSTANTIATE_TEST_SUITE_P(TpDcp, PrefixCacheTest,
                         ::testing::Values(std::pair{1, 1}, std::pair{3, 3}), TpDcpName);

class Gemma3PrefixCacheTest : public ::testing::TestWithParam<std::pair<int, int>> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(testing::Gemma3ModelPath())) {
      GTEST_SKIP() << "no Gemma 3 model at " << testing::Gemma3ModelPath()
                   << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
    }
  }
};

TEST_P(Gemma3PrefixCacheTest, WindowLayersGetTheirPagesFromTheCacheAndTheLogitsOfTheRequestAlone) {
  const auto [tp, dcp] = GetParam();
  constexpr int kConversations = 3, kSystemTokens = 600, kWindow = 512;
  const Trace trace{testing::Gemma3ModelPath(), kConversations, kSystemTokens, 20, 262144};
  TraceRun alone, cached;
  ASSERT_NO_FATAL_FAILURE(RunBoth(trace, tp, dcp,
                                  {{"chunked_prefill_size", int64_t{128}},
                                   {"max_total_tokens", int64_t{2048}},
                                   {"swa_full_tokens_ratio", 0.4}},
                                  &alone, &cached));
  // The second round starts past the window: its window layers read cached pages that the first
  // round's windows had slid past.
  const int page_tokens = 16 * dcp;
  EXPECT_EQ(cached.out.at(0).cached_tokens, 0);
  for (int c = 1; c < kConversations; ++c) {
    EXPECT_GE(cached.out.at(c).cached_tokens, page_tokens) << c;
  }
  for (int c = 0; c < kConversations; ++c) {
    // The whole pages of the first turn's KV: its prompt and answer but the last answer token,
    // which was sampled and never fed.
    const int first_turn = kSystemTokens + 20 + 3 * c + 12 + c % 5 - 1;
    EXPECT_EQ(cached.out.at(kConversations + c).cached_tokens,
              first_turn / page_tokens * page_tokens)
        << c;
  }
  static_assert(kSystemTokens > kWindow);
}

INSTANTIATE_TEST_SUITE_P(TpDcp, Gemma3PrefixCacheTest,
                         ::testing::Values(std::pair{1, 1}, std::pair{4, 4}), TpDcpName);

}  // namespace
}  // namespace ctxpar
