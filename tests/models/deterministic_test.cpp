// --enable-deterministic-inference (the exact merge of 16-key chunks, DcpOptions::exact): the
// logits of the prompt and of 24 greedy steps are the same bits at tp 1 and over tp 3 / dcp 3 with
// every combine backend and replicated Q on SmolLM2, and at tp 2 / dcp 2 and tp 4 / dcp 4 on
// Gemma 3 (its window layers included), on the fast path (--dtype auto: int8 activations, whose
// rounding turns any 1-ulp difference into a different token within a few steps) and with fp8 KV,
// and on a model in BF16 (the bf16 products, tp 2 / dcp 2).
// Without the flag the same fast path gives other bits at dcp 3 (asserted: the test can fail).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/sampling.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

constexpr int kSteps = 24;

struct Config {
  int tp;
  int dcp;
  const char* backend;
  bool replicate_q;
};

struct Outputs {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // every step's, concatenated
};

Outputs Generate(const std::string& path, const Config& c, const std::vector<int32_t>& prompt,
                 bool deterministic, const char* kv_cache_dtype, Status* status) {
  Outputs run;
  std::mutex mu;
  *status = RunInProcess(c.tp, [&](Communicator& comm) -> Status {
    CTXPAR_ASSIGN_OR_RETURN(
        Launch launch, testing::TestLaunch(path, {{"tp_size", int64_t{c.tp}},
                                                  {"dcp_size", int64_t{c.dcp}},
                                                  {"dcp_comm_backend", std::string(c.backend)},
                                                  {"dcp_replicate_q_proj", c.replicate_q},
                                                  {"enable_deterministic_inference", deterministic},
                                                  {"dtype", std::string("auto")},
                                                  {"kv_cache_dtype", std::string(kv_cache_dtype)},
                                                  {"threads", int64_t{1}}}));
    CTXPAR_ASSIGN_OR_RETURN(testing::SequenceRunner model,
                            testing::SequenceRunner::Create(*launch.source, launch.config, comm));
    CTXPAR_ASSIGN_OR_RETURN(std::vector<float> logits, model.Forward(prompt));
    Outputs mine;
    for (int i = 0; i < kSteps; ++i) {
      const int32_t next = Greedy(logits);
      mine.tokens.push_back(next);
      mine.logits.insert(mine.logits.end(), logits.begin(), logits.end());
      if (i + 1 < kSteps) {
        CTXPAR_ASSIGN_OR_RETURN(logits, model.Forward(std::span<const int32_t>(&next, 1)));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    if (comm.rank() == 0) run = std::move(mine);
    return Status::Ok();
  });
  return run;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<int32_t> GoldenPrompt(const std::string& dir, const std::string& name) {
  std::ifstream in(std::string(CTXPAR_TEST_DATA_DIR) + "/" + dir + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  for (const auto& p : golden.at("prompts")) {
    if (name.empty() || p.at("name") == name) {
      return p.at("prompt_ids").get<std::vector<int32_t>>();
    }
  }
  return {};
}

void ExpectSameBits(const std::string& path, const std::vector<int32_t>& prompt,
                    std::span<const Config> configs, const char* kv_cache_dtype) {
  Status st;
  const Outputs base = Generate(path, {1, 1, "ag_rs", false}, prompt, true, kv_cache_dtype, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(base.tokens.size(), std::size_t(kSteps));
  for (const Config& c : configs) {
    const Outputs got = Generate(path, c, prompt, true, kv_cache_dtype, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const std::string what = "tp " + std::to_string(c.tp) + " dcp " + std::to_string(c.dcp) + " " +
                             c.backend + (c.replicate_q ? " replicated Q " : " ") + kv_cache_dtype;
    EXPECT_EQ(got.tokens, base.tokens) << what;
    EXPECT_TRUE(SameBits(got.logits, base.logits)) << what;
  }
}

TEST(DeterministicInference, SmolLm2LogitsAreTheSameBitsOnEveryLayout) {
  const std::vector<int32_t> prompt = GoldenPrompt("llama_cpp", "chat_poem");
  ASSERT_FALSE(prompt.empty());
  const Config configs[] = {{3, 1, "ag_rs", false},
                            {3, 3, "ag_rs", false},
                            {3, 3, "a2a", false},
                            {3, 3, "a2a", true},
                            {3, 3, "shm_a2a", false}};
  ExpectSameBits(testing::ModelPath(), prompt, configs, "auto");
  const Config fp8[] = {{3, 3, "ag_rs", false}, {3, 3, "a2a", false}, {3, 3, "a2a", true}};
  for (const char* kv : {"fp8_e4m3", "fp8_e5m2"})
    ExpectSameBits(testing::ModelPath(), prompt, fp8, kv);
}

TEST(DeterministicInference, WithoutItTheFastPathDependsOnTheLayout) {
  const std::vector<int32_t> prompt = GoldenPrompt("llama_cpp", "chat_poem");
  Status st;
  const Outputs one =
      Generate(testing::ModelPath(), {1, 1, "ag_rs", false}, prompt, false, "auto", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const Outputs three =
      Generate(testing::ModelPath(), {3, 3, "a2a", false}, prompt, false, "auto", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(SameBits(one.logits, three.logits));
}

TEST(DeterministicInference, Gemma3LogitsAreTheSameBitsOnEveryLayout) {
  const std::string path = testing::Gemma3ModelPath();
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << "no Gemma 3 model at " << path
                 << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
  }
  const std::vector<int32_t> prompt = GoldenPrompt("gemma3", "");
  ASSERT_FALSE(prompt.empty());
  const Config configs[] = {{2, 2, "a2a", false}, {4, 4, "ag_rs", false}, {4, 2, "a2a", true}};
  ExpectSameBits(path, prompt, configs, "auto");
}

// BF16 weights take the bf16 products under --dtype auto where AVX512-BF16 or AMX-BF16 runs
// (linear_bf16.h; elsewhere the fp32 sequence): the tiny transformers Llama in BF16 over a
// 700-token prompt (token blocks of 32 and 16 in the AMX kernel, deterministic chunks of 64 keys)
// gives the same bits at tp 1, tp 2 and tp 2 / dcp 2 with either backend and replicated Q.
TEST(DeterministicInference, Bf16WeightsGiveTheSameBitsOnEveryLayout) {
  const std::string path = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/llama/llama-bf16.gguf";
  const std::vector<int32_t> prompt = GoldenPrompt("hf_tiny/llama", "ids_700");
  ASSERT_EQ(prompt.size(), 700u);
  const Config configs[] = {
      {2, 1, "ag_rs", false}, {2, 2, "ag_rs", false}, {2, 2, "a2a", false}, {2, 2, "a2a", true}};
  ExpectSameBits(path, prompt, configs, "auto");
}

}  // namespace
}  // namespace ctxpar
