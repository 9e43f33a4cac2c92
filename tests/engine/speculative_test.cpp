// Speculative decoding (--speculative-algorithm NGRAM) with the real model: every request's tokens
// and log-probabilities (top 3 alternatives) are bit for bit those of the same requests decoded
// one token per step, under the same flags. SmolLM2-135M at tp 1 and at tp 3 / dcp 3 with every
// combine backend and interleave sizes 1 and 16 (ranks are threads of the in-process
// communicator). The batch mixes repetitive prompts (a ledger, a code edit), whose drafts the
// model accepts, with plain ones; prefills run in chunks of 37 tokens beside the verify steps; a
// pool of 240 tokens that admission over-commits makes decode retract requests; one request is
// cancelled partway; greedy and seeded sampling (temperature 0.8) both run. Gemma 3 270M, whose
// window layers slide during verify steps, at tp 1 and tp 4 / dcp 4.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ctxpar/tokenizer.h"
#include "engine/speculative_run.h"

namespace ctxpar {
namespace {

using testing::CancelAt;
using testing::Flags;
using testing::RunResult;
using testing::SameLogprobs;

constexpr int kCancelled = 5;  // the request cancelled after kCancelAfter tokens
constexpr int kCancelAfter = 6;

const char* const kTexts[] = {
    // A ledger: lines that repeat but for a few fields.
    "Deliveries ledger, March 2024\n"
    "2024-03-01 | Warehouse A | 12 crates of apples | received by J. Smith | status: complete\n"
    "2024-03-02 | Warehouse B | 8 crates of pears | received by J. Smith | status: complete\n"
    "2024-03-03 | Warehouse A | 15 crates of apples | received by M. Jones | status: complete\n"
    "2024-03-04 | Warehouse C | 6 crates of plums | received by J. Smith | status: complete\n"
    "2024-03-05 |",
    // A code edit that quotes its source.
    "Rename the function `add` to `plus` and keep everything else.\n\n"
    "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    result = a + b\n"
    "    return result\n\nAnswer:\n\ndef plus(a, b):\n",
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "List the days of the week: Monday, Tuesday, Wednesday,",
    "Count: one two three four five six seven eight nine ten one two three four five six",
};

std::vector<GenerateRequest> Requests(const std::string& model,
                                      const std::vector<std::string>& texts) {
  auto launch = testing::TestLaunch(model, {});
  EXPECT_TRUE(launch.ok()) << launch.status().ToString();
  std::vector<GenerateRequest> out;
  int index = 0;
  for (const std::string& text : texts) {
    GenerateRequest r;
    r.prompt = launch->source->tokenizer()->Encode(text);
    r.sampling.max_new_tokens = 40;
    r.sampling.temperature = index % 3 == 2 ? 0.8f : 0.0f;  // seeded sampling on two of them
    r.sampling.seed = 900 + index;
    r.sampling.ignore_eos = index != 3;  // one may end on EOS
    r.sampling.return_logprob = true;
    r.sampling.top_logprobs_num = 3;
    out.push_back(std::move(r));
    ++index;
  }
  return out;
}

struct Config {
  int tp, dcp;
  const char* backend;
  int interleave;
  const char* dtype =
      "float32";  // auto: int8 activations on the matrix units (batch-invariant too)
};

std::string ConfigName(const ::testing::TestParamInfo<Config>& info) {
  const Config& c = info.param;
  return "tp" + std::to_string(c.tp) + "_dcp" + std::to_string(c.dcp) + "_" + c.backend + "_i" +
         std::to_string(c.interleave) + "_" + c.dtype;
}

class SpeculativeTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(DefaultModelPath())) {
      GTEST_SKIP() << "no SmolLM2 GGUF at " << DefaultModelPath()
                   << ": run scripts/fetch-model.sh or set CTXPAR_MODEL";
    }
  }
};

TEST_P(SpeculativeTest, TokensAndLogprobsAreThoseOfPlainDecoding) {
  const Config c = GetParam();
  const Flags flags = {{"dcp_size", int64_t{c.dcp}},
                       {"dcp_comm_backend", std::string(c.backend)},
                       {"dcp_kv_cache_interleave_size", int64_t{c.interleave}},
                       {"chunked_prefill_size", int64_t{37}},
                       {"max_total_tokens", int64_t{240}},
                       {"schedule_conservativeness", 0.2},
                       {"dtype", std::string(c.dtype)}};
  Flags spec = flags;
  spec.push_back({"speculative_algorithm", std::string("NGRAM")});
  spec.push_back({"speculative_num_draft_tokens", int64_t{6}});
  const std::vector<GenerateRequest> requests =
      Requests(DefaultModelPath(), std::vector<std::string>(std::begin(kTexts), std::end(kTexts)));
  Status st;
  const CancelAt cancel{kCancelled, kCancelAfter};
  const RunResult plain =
      testing::RunRequests(DefaultModelPath(), requests, c.tp, flags, cancel, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const RunResult fast =
      testing::RunRequests(DefaultModelPath(), requests, c.tp, spec, cancel, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();

  const int n = static_cast<int>(std::size(kTexts));
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_EQ(fast.out.count(i), 1u);
    const testing::Outcome &a = plain.out.at(i), &b = fast.out.at(i);
    if (i == kCancelled) {
      testing::ExpectSameHead(a, b, kCancelAfter);
      continue;
    }
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_TRUE(SameLogprobs(a.logprobs, b.logprobs));
    EXPECT_EQ(a.finish, b.finish);
    EXPECT_EQ(a.spec_verify_ct, 0);
    // The first token comes from the prefill, and so does the next one after a retraction (the
    // prefill of prompt and output again); the others from verify steps.
    EXPECT_LE(b.spec_verify_tokens, static_cast<int>(b.tokens.size()) - 1);
    EXPECT_GT(b.spec_verify_tokens, 0);
    EXPECT_LE(b.spec_verify_ct, b.spec_verify_tokens);
  }
  // The ledger and the list of days repeat what came before: drafts were accepted (a verify step
  // gave more than 1.5 and 1.25 tokens on average; without an accepted draft it gives 1).
  EXPECT_LT(fast.out.at(0).spec_verify_ct * 3, fast.out.at(0).spec_verify_tokens * 2);
  EXPECT_LT(fast.out.at(4).spec_verify_ct * 5, fast.out.at(4).spec_verify_tokens * 4);
  EXPECT_GT(fast.stats.spec_verify_tokens_total, fast.stats.spec_verify_steps_total);
  EXPECT_EQ(plain.stats.spec_verify_steps_total, 0u);
  // The trace retracted requests (a small pool), and every page came back.
  EXPECT_GT(fast.stats.retractions, 0u);
  EXPECT_EQ(fast.stats.used_tokens, 0);
  EXPECT_EQ(fast.stats.cache_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SpeculativeTest,
                         ::testing::Values(Config{1, 1, "ag_rs", 1}, Config{3, 3, "ag_rs", 1},
                                           Config{3, 3, "ag_rs", 16}, Config{3, 3, "a2a", 1},
                                           Config{3, 3, "a2a", 16}, Config{3, 3, "shm_a2a", 1},
                                           Config{3, 3, "shm_a2a", 16},
                                           Config{1, 1, "ag_rs", 1, "auto"},
                                           Config{3, 3, "a2a", 16, "auto"}),
                         ConfigName);

// Gemma 3 270M: its sliding-window layers (W = 512) keep only the window's pages, and a verify
// step's rows past the window's start slide it. A ledger of about 700 tokens, prefilled in chunks
// of 128, decodes past the window with drafts; the tokens and log-probabilities are those of
// plain decoding at tp 1 and tp 4 / dcp 4.
class Gemma3SpeculativeTest : public ::testing::TestWithParam<std::pair<int, int>> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(testing::Gemma3ModelPath())) {
      GTEST_SKIP() << "no Gemma 3 model at " << testing::Gemma3ModelPath()
                   << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
    }
  }
};

TEST_P(Gemma3SpeculativeTest, WindowLayersVerifyTheDraftsOfPlainDecoding) {
  const auto [tp, dcp] = GetParam();
  std::string ledger = "Deliveries ledger, March 2024\n";
  const char* const kWhere[] = {"Warehouse A", "Warehouse B", "Warehouse C"};
  const char* const kWhat[] = {"apples", "pears", "plums", "figs"};
  for (int day = 1; day <= 24; ++day) {
    ledger += "2024-03-" + std::string(day < 10 ? "0" : "") + std::to_string(day) + " | " +
              kWhere[day % 3] + " | " + std::to_string(4 + day * 7 % 13) + " crates of " +
              kWhat[day % 4] + " | received by J. Smith | status: complete\n";
  }
  ledger += "2024-03-25 |";
  const std::string model = testing::Gemma3ModelPath();
  const std::vector<GenerateRequest> requests =
      Requests(model, {ledger, "The capital of France is", "Once upon a time, in a small village"});
  const Flags flags = {{"dcp_size", int64_t{dcp}},
                       {"dcp_comm_backend", std::string(dcp > 1 ? "a2a" : "ag_rs")},
                       {"chunked_prefill_size", int64_t{128}}};
  Flags spec = flags;
  spec.push_back({"speculative_algorithm", std::string("NGRAM")});
  Status st;
  const RunResult plain = testing::RunRequests(model, requests, tp, flags, {}, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const RunResult fast = testing::RunRequests(model, requests, tp, spec, {}, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_GT(requests[0].prompt.size() + 1, std::size_t{512}) << "the ledger must pass the window";
  for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(plain.out.at(i).tokens, fast.out.at(i).tokens);
    EXPECT_TRUE(SameLogprobs(plain.out.at(i).logprobs, fast.out.at(i).logprobs));
  }
  EXPECT_LT(fast.out.at(0).spec_verify_ct * 3, fast.out.at(0).spec_verify_tokens * 2);
  EXPECT_EQ(fast.stats.used_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(TpDcp, Gemma3SpeculativeTest,
                         ::testing::Values(std::pair{1, 1}, std::pair{4, 4}), [](const auto& info) {
                           return "tp" + std::to_string(info.param.first) + "_dcp" +
                                  std::to_string(info.param.second);
                         });

}  // namespace
}  // namespace ctxpar
