// The engine with the real model (SmolLM2-135M): batch invariance, retraction, cancellation and
// the KV pool's accounting, and requests refused up front.
//
// The reference of a request is the same request run alone, prefilled in one piece: its tokens
// and the log-probabilities of its tokens (and of their top alternatives), bit for bit. Seeded
// sampling at temperature 0.8 makes a single flipped bit of the logits change the tokens that
// follow, so a difference shows.
#include "ctxpar/engine.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/launch.h"

namespace ctxpar {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string detail;
  std::optional<int32_t> matched_token;
  int updates = 0;
};

bool SameLogprobs(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].token != b[i].token || a[i].logprob != b[i].logprob || a[i].top != b[i].top) {
      return false;
    }
  }
  return true;
}

class EngineTest : public ::testing::Test {
 protected:
  // The flags of a run, resolved as generate resolves them.
  static Expected<Launch> MakeLaunch(
      const std::vector<std::pair<std::string, FieldValue>>& fields) {
    LaunchConfig raw;
    CTXPAR_RETURN_IF_ERROR(raw.Set("threads", int64_t{1}));
    for (const auto& [name, value] : fields) CTXPAR_RETURN_IF_ERROR(raw.Set(name, value));
    return PrepareLaunch(raw);
  }

  void SetUp() override { world_ = MakeInProcessGroup(1); }

  std::unique_ptr<Engine> MakeEngine(const Launch& launch) {
    auto engine = Engine::Create(launch.config, *launch.source, *world_[0], nullptr);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  std::vector<std::unique_ptr<Communicator>> world_;
};

GenerateRequest RandomRequest(std::mt19937& rng, int index) {
  GenerateRequest r;
  const int prompt = 3 + static_cast<int>(rng() % 40);
  for (int i = 0; i < prompt; ++i) r.prompt.push_back(100 + static_cast<int32_t>(rng() % 20000));
  // Long enough that the admission's estimate (new_token_ratio < 1 of the remaining tokens)
  // falls short of what decode needs, beyond the slack of whole pages.
  r.sampling.max_new_tokens = 12 + static_cast<int>(rng() % 36);
  r.sampling.temperature = 0.8f;
  r.sampling.top_k = 40;
  r.sampling.seed = 1000 + index;
  r.sampling.ignore_eos = true;
  r.sampling.return_logprob = true;
  r.sampling.top_logprobs_num = 3;
  return r;
}

// 64 requests arriving at random steps (some at the start, the rest submitted from the update
// callbacks), prefilled in chunks of 37 tokens, through a pool of 384 tokens that a low
// --schedule-conservativeness over-commits so that decode retracts requests: each request's tokens
// and log-probabilities equal those of the request run alone and prefilled in one piece, and the
// pool is empty at the end.
TEST_F(EngineTest, RequestsAmongOthersChunkedAndRetractedEqualThemselvesAlone) {
  constexpr int kRequests = 64;
  Expected<Launch> batched = MakeLaunch({{"chunked_prefill_size", int64_t{37}},
                                         {"max_total_tokens", int64_t{384}},
                                         {"schedule_conservativeness", 0.2},
                                         {"max_running_requests", int64_t{24}}});
  ASSERT_TRUE(batched.ok()) << batched.status().ToString();
  Expected<Launch> alone = MakeLaunch({{"chunked_prefill_size", int64_t{-1}}});
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  std::mt19937 rng(7);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < kRequests; ++i) requests.push_back(RandomRequest(rng, i));

  std::map<int, Outcome> want;
  {
    auto engine = MakeEngine(*alone);
    ASSERT_NE(engine, nullptr);
    for (int i = 0; i < kRequests; ++i) {
      ASSERT_TRUE(engine
                      ->Submit(requests[i],
                               [&, i](const RequestUpdate& u) {
                                 Outcome& o = want[i];
                                 o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
                                 o.logprobs.insert(o.logprobs.end(), u.logprobs.begin(),
                                                   u.logprobs.end());
                                 o.finish = u.finish;
                               })
                      .ok());
      ASSERT_TRUE(engine->Run(Engine::RunUntil::kIdle).ok());
    }
  }

  std::map<int, Outcome> got;
  auto engine = MakeEngine(*batched);
  ASSERT_NE(engine, nullptr);
  int next = 0;
  std::function<void()> submit_some;
  std::function<void(int, const RequestUpdate&)> on_update = [&](int i, const RequestUpdate& u) {
    Outcome& o = got[i];
    ++o.updates;
    o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
    o.logprobs.insert(o.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
    o.finish = u.finish;
    if (rng() % 4 == 0) submit_some();  // new requests arrive between steps
  };
  submit_some = [&] {
    const int count = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < count && next < kRequests; ++k, ++next) {
      const int i = next;
      ASSERT_TRUE(
          engine->Submit(requests[i], [&, i](const RequestUpdate& u) { on_update(i, u); }).ok());
    }
  };
  for (int k = 0; k < 6; ++k) submit_some();
  while (next < kRequests || engine->Snapshot().running + engine->Snapshot().queued > 0) {
    ASSERT_TRUE(engine->Run(Engine::RunUntil::kIdle).ok());
    if (next < kRequests) submit_some();
  }
  const EngineSnapshot s = engine->Snapshot();
  EXPECT_GT(s.retractions, 0u) << "the pool was meant to force retractions";
  EXPECT_EQ(s.used_tokens, 0);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.queued, 0);
  EXPECT_EQ(s.requests_finished, static_cast<uint64_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(got[i].finish, FinishReason::kLength) << "request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_TRUE(SameLogprobs(got[i].logprobs, want[i].logprobs)) << "request " << i;
    EXPECT_EQ(static_cast<int>(got[i].tokens.size()), requests[i].sampling.max_new_tokens);
  }
  std::printf("64 requests: %llu retractions\n", static_cast<unsigned long long>(s.retractions));
}

// Cancelled requests end with abort and give their pages back; the others are unaffected.
TEST_F(EngineTest, CancelledRequestsEndWithAbortAndFreeTheirPages) {
  Expected<Launch> launch = MakeLaunch({{"chunked_prefill_size", int64_t{16}}});
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  auto engine = MakeEngine(*launch);
  ASSERT_NE(engine, nullptr);
  std::mt19937 rng(3);
  std::map<int, Outcome> got;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = RandomRequest(rng, i);
    r.sampling.max_new_tokens = 12;
    Expected<uint64_t> id = engine->Submit(r, [&, i](const RequestUpdate& u) {
      Outcome& o = got[i];
      o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
      o.finish = u.finish;
      o.detail = u.finish_detail;
      // Request 1 is cancelled after its third token, request 4 before it ever runs.
      if (i == 1 && o.tokens.size() == 3) engine->Cancel(ids[1]);
    });
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  engine->Cancel(ids[4]);
  ASSERT_TRUE(engine->Run(Engine::RunUntil::kIdle).ok());
  EXPECT_EQ(got[1].finish, FinishReason::kAbort);
  EXPECT_EQ(got[1].detail, "cancelled");
  EXPECT_EQ(got[1].tokens.size(), 3u);
  EXPECT_EQ(got[4].finish, FinishReason::kAbort);
  EXPECT_TRUE(got[4].tokens.empty());
  for (int i : {0, 2, 3, 5}) EXPECT_EQ(got[i].finish, FinishReason::kLength) << i;
  EXPECT_EQ(engine->Snapshot().used_tokens, 0);
  engine->Cancel(ids[0]);  // finished: ignored
  engine->Cancel(12345);   // unknown: ignored
  ASSERT_TRUE(engine->Run(Engine::RunUntil::kIdle).ok());
}

// --allow-auto-truncate keeps a too-long prompt's first tokens, leaving room for max_new_tokens
// in the pool and staying under SGLang's max_req_input_len; what no cut can fit is still refused.
TEST_F(EngineTest, AutoTruncateKeepsThePromptsFirstTokens) {
  Expected<Launch> launch =
      MakeLaunch({{"max_total_tokens", int64_t{256}}, {"allow_auto_truncate", true}});
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  auto engine = MakeEngine(*launch);
  ASSERT_NE(engine, nullptr);
  GenerateRequest r;
  for (int i = 0; i < 1000; ++i) r.prompt.push_back(100 + i);
  r.sampling.max_new_tokens = 16;
  r.sampling.ignore_eos = true;
  GenerateRequest cut = r;
  ASSERT_TRUE(engine->Prepare(cut).ok());
  ASSERT_EQ(cut.prompt.size(), 240u);  // 256 - 16 new tokens
  EXPECT_TRUE(std::equal(cut.prompt.begin(), cut.prompt.end(), r.prompt.begin()));
  r.sampling.max_new_tokens = 2;
  cut = r;
  ASSERT_TRUE(engine->Prepare(cut).ok());
  EXPECT_EQ(cut.prompt.size(), 249u);  // under max_req_input_len = 250
  int generated = 0;
  ASSERT_TRUE(
      engine
          ->Submit(r,
                   [&](const RequestUpdate& u) { generated += static_cast<int>(u.tokens.size()); })
          .ok());
  ASSERT_TRUE(engine->Run(Engine::RunUntil::kIdle).ok());
  EXPECT_EQ(generated, 2);
  r.sampling.max_new_tokens = 300;  // more than the pool: nothing to cut
  EXPECT_EQ(engine->Submit(r, nullptr).status().error_id(), "CTXPAR-ENGINE-006");
}

// Requests that cannot fit are refused at Submit with the counts; stop tokens end a request.
TEST_F(EngineTest, RefusesWhatCannotFitAndStopsOnStopTokens) {
  Expected<Launch> launch =
      MakeLaunch({{"max_total_tokens", int64_t{256}}, {"max_queued_requests", int64_t{1}}});
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  auto engine = MakeEngine(*launch);
  ASSERT_NE(engine, nullptr);
  GenerateRequest big;
  big.prompt.assign(200, 100);
  big.sampling.max_new_tokens = 100;
  Status st = engine->Submit(big, nullptr).status();
  EXPECT_EQ(st.error_id(), "CTXPAR-ENGINE-006");
  EXPECT_EQ(st.message(),
            "The request needs 300 tokens (200 prompt + 100 new), more than the KV pool holds "
            "(256 tokens: max_total_num_tokens).");
  big.sampling.max_new_tokens = 8000;
  EXPECT_EQ(engine->Submit(big, nullptr).status().error_id(), "CTXPAR-ENGINE-005");
  // SGLang's max_req_input_len, min(8192, 256) - 1 - 5 = 250, and its text (scheduler.py,
  // managers/utils.py validate_input_length).
  EXPECT_EQ(engine->max_req_input_len(), 250);
  big.prompt.assign(250, 100);
  big.sampling.max_new_tokens = 1;
  st = engine->Submit(big, nullptr).status();
  EXPECT_EQ(st.error_id(), "CTXPAR-ENGINE-016");
  EXPECT_EQ(st.message(),
            "Input length (250 tokens) exceeds the maximum allowed length (250 tokens). Use a "
            "shorter input or enable --allow-auto-truncate.");
  GenerateRequest bad;
  bad.prompt = {1, 49152};
  st = engine->Submit(bad, nullptr).status();
  EXPECT_EQ(st.message(), "prompt token 1 is 49152, outside the vocabulary [0, 49152).");
  bad.prompt = {1, 2};
  bad.sampling.top_p = 0.0f;
  EXPECT_EQ(engine->Submit(bad, nullptr).status().error_id(), "CTXPAR-SAMPLING-001");

  // Greedy: find the first token, then ask to stop on it.
  GenerateRequest r;
  r.prompt = {504, 3458, 282, 4649, 314};  // "The capital of France is"
  r.sampling.temperature = 0.0f;
  r.sampling.max_new_tokens = 5;
  Outcome first;
  std::vector<std::string> texts;  // one update per greedy token
  ASSERT_TRUE(engine
                  ->Submit(r,
                           [&](const RequestUpdate& u) {
                             first.tokens.insert(first.tokens.end(), u.tokens.begin(),
                                                 u.tokens.end());
                             texts.push_back(u.text);
                           })
                  .ok());
  EXPECT_EQ(engine->Submit(r, nullptr).status().error_id(), "CTXPAR-ENGINE-007");  // queue full
  ASSERT_TRUE(engine->Run(Engine::RunUntil::kIdle).ok());
  ASSERT_EQ(first.tokens.size(), 5u);
  ASSERT_GE(texts.size(), 2u);
  r.sampling.stop_token_ids = {first.tokens[1]};
  // The stop token is an output token; its text is trimmed (SGLang's trim_matched_stop) unless
  // no_stop_trim.
  for (const bool keep : {false, true}) {
    SCOPED_TRACE(keep);
    r.sampling.no_stop_trim = keep;
    Outcome stopped;
    std::string text;
    ASSERT_TRUE(engine
                    ->Submit(r,
                             [&](const RequestUpdate& u) {
                               stopped.tokens.insert(stopped.tokens.end(), u.tokens.begin(),
                                                     u.tokens.end());
                               text += u.text;
                               stopped.finish = u.finish;
                               stopped.detail = u.finish_detail;
                               stopped.matched_token = u.matched_token;
                             })
                    .ok());
    ASSERT_TRUE(engine->Run(Engine::RunUntil::kIdle).ok());
    EXPECT_EQ(stopped.finish, FinishReason::kStop);
    EXPECT_EQ(stopped.tokens, std::vector<int32_t>(first.tokens.begin(), first.tokens.begin() + 2));
    EXPECT_EQ(stopped.detail, "");
    EXPECT_EQ(stopped.matched_token, first.tokens[1]);
    EXPECT_EQ(text, keep ? texts[0] + texts[1] : texts[0]);
  }
}

}  // namespace
}  // namespace ctxpar
