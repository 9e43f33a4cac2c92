// DCP invariance: the greedy output of 128 new tokens is the same for (tp, dcp) = (1, 1), (3, 1)
// and (3, 3) with every combine backend (ag_rs, a2a, shm_a2a), with and without replicated Q,
// and for tp 9 (each of SmolLM2's 3 KV heads replicated over 3 ranks, or sharded over a DCP
// group of 3), for a chat prompt; for a prompt of 2,025 tokens with (1, 1), (3, 1) and each
// backend once (about 10 s of CPU per 2,025-token prefill keeps the rest for the CI budget).
// Ranks are threads (the in-process communicator); the MPI run of the binary is in
// tests/cli/generate_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
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

constexpr int kNewTokens = 128;

using testing::ModelPath;

struct Config {
  int tp;
  int dcp;
  const char* backend;
  bool replicate_q;
  const char* kv_cache_dtype = "auto";
};

const Config kConfigs[] = {
    {3, 1, "ag_rs", false},   {3, 3, "ag_rs", false},  {3, 3, "a2a", false},   {3, 3, "a2a", true},
    {3, 3, "shm_a2a", false}, {3, 3, "shm_a2a", true}, {9, 1, "ag_rs", false}, {9, 3, "a2a", true},
};

const Config kLongConfigs[] = {
    {3, 1, "ag_rs", false},
    {3, 3, "ag_rs", false},
    {3, 3, "a2a", true},
    {3, 3, "shm_a2a", false},
};

class DcpInvariance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream in(std::string(CTXPAR_TEST_DATA_DIR) + "/llama_cpp/golden.json");
    golden_ = new nlohmann::json(nlohmann::json::parse(in));
  }
  static void TearDownTestSuite() { delete golden_; }

  // The prompt ids of a golden.json prompt (llama.cpp's tokenization), `repeat` times.
  static std::vector<int32_t> Prompt(const std::string& name, int repeat) {
    for (const auto& p : golden_->at("prompts")) {
      if (p.at("name") == name) {
        const auto ids = p.at("prompt_ids").get<std::vector<int32_t>>();
        std::vector<int32_t> out;
        for (int i = 0; i < repeat; ++i) out.insert(out.end(), ids.begin(), ids.end());
        return out;
      }
    }
    return {};
  }

  static std::vector<int32_t> Generate(const Config& c, const std::vector<int32_t>& prompt,
                                       Status* status) {
    std::vector<int32_t> tokens;
    std::mutex mu;
    *status = RunInProcess(c.tp, [&](Communicator& comm) -> Status {
      CTXPAR_ASSIGN_OR_RETURN(
          Launch launch,
          testing::TestLaunch(ModelPath(), {{"tp_size", int64_t{c.tp}},
                                            {"dcp_size", int64_t{c.dcp}},
                                            {"dcp_comm_backend", std::string(c.backend)},
                                            {"dcp_replicate_q_proj", c.replicate_q},
                                            {"kv_cache_dtype", std::string(c.kv_cache_dtype)},
                                            {"threads", int64_t{1}}}));
      CTXPAR_ASSIGN_OR_RETURN(testing::SequenceRunner model,
                              testing::SequenceRunner::Create(*launch.source, launch.config, comm));
      CTXPAR_ASSIGN_OR_RETURN(std::vector<float> logits, model.Forward(prompt));
      std::vector<int32_t> out;
      for (int i = 0; i < kNewTokens; ++i) {
        const int32_t next = Greedy(logits);
        out.push_back(next);
        if (i + 1 < kNewTokens) {
          CTXPAR_ASSIGN_OR_RETURN(logits, model.Forward(std::span<const int32_t>(&next, 1)));
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      if (comm.rank() == 0) tokens = out;
      return Status::Ok();
    });
    return tokens;
  }

  void CheckConfigs(const std::vector<int32_t>& prompt, std::span<const Config> configs,
                    const char* kv_cache_dtype = "auto") {
    Status st;
    const std::vector<int32_t> base = Generate({1, 1, "ag_rs", false, kv_cache_dtype}, prompt, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(base.size(), std::size_t(kNewTokens));
    for (const Config& c : configs) {
      const std::vector<int32_t> got = Generate(c, prompt, &st);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(got, base) << "tp " << c.tp << " dcp " << c.dcp << " " << c.backend
                           << (c.replicate_q ? " replicated Q" : "") << " " << c.kv_cache_dtype;
    }
  }

  static nlohmann::json* golden_;
};
nlohmann::json* DcpInvariance::golden_ = nullptr;

TEST_F(DcpInvariance, ChatPrompt) { CheckConfigs(Prompt("chat_poem", 1), kConfigs); }

TEST_F(DcpInvariance, PromptOf2025Tokens) {
  const std::vector<int32_t> prompt = Prompt("long_history", 9);
  ASSERT_GE(prompt.size(), 2000u);
  CheckConfigs(prompt, kLongConfigs);
}

// fp8 KV keeps the invariance over TP (tp 3 and 9, dcp 1), where every rank runs whole heads
// through the same kernel. Over DCP it is not promised without --enable-deterministic-inference
// (tests/models/deterministic_test.cpp holds both formats to the same bits at tp 3 / dcp 3): the
// avx512_bf16 path rounds the softmax weights to bf16 against a running max that depends on the
// keys a rank holds, and e4m3's greedy tokens on this prompt measured to part from tp 1's at the
// first token at dcp 3 there; on the exact-widening paths e4m3 kept them and e5m2 parted after
// 5-21 tokens.
TEST_F(DcpInvariance, ChatPromptFp8Kv) {
  for (const char* dtype : {"fp8_e4m3", "fp8_e5m2"}) {
    const Config configs[] = {{3, 1, "ag_rs", false, dtype}, {9, 1, "ag_rs", false, dtype}};
    CheckConfigs(Prompt("chat_poem", 1), configs, dtype);
  }
}

// fp8 KV against fp32 KV at tp 1: the greedy tokens that agree before the first difference,
// measured out of 128 on the avx512_bf16 path (Q and the weights rounded to bf16) and, in
// brackets, on the paths that widen fp8 exactly to fp32 (CTXPAR_CPU_ISA=avx512, avx2, scalar);
// bf16 KV: 128 on all but plain_code's 75 (and chat_sky's 89 widened exactly):
//   prompt         e4m3       e5m2
//   long_history   128 (128)  128 (128)
//   plain_france    26  (71)   24  (10)
//   plain_code      63  (51)    6   (6)
//   plain_story      8   (8)   10  (10)
//   chat_sky        16   (1)    1   (1)
//   chat_poem        4   (0)    0   (0)
// SmolLM2-135M's K reach |22| (no saturation), but 3 or 2 mantissa bits move scores enough to
// swap near-tied tokens of the chat prompts at once; which near-tie flips first depends on the
// path's rounding, not on one path being closer (their NLL agrees within 0.1 %,
// docs/perf-attention.md). Asserted, with margin: half of the smaller of the two long_history
// and plain_france (e4m3) counts.
TEST_F(DcpInvariance, Fp8KvKeepsFp32sFirstTokens) {
  struct Want {
    const char* prompt;
    const char* dtype;
    size_t min_same;
  };
  for (const Want& w : {Want{"long_history", "fp8_e4m3", 64}, Want{"long_history", "fp8_e5m2", 64},
                        Want{"plain_france", "fp8_e4m3", 13}}) {
    Status st;
    const std::vector<int32_t> prompt = Prompt(w.prompt, 1);
    const std::vector<int32_t> f32 = Generate({1, 1, "ag_rs", false}, prompt, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    const std::vector<int32_t> got = Generate({1, 1, "ag_rs", false, w.dtype}, prompt, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    size_t same = 0;
    while (same < got.size() && got[same] == f32[same]) ++same;
    EXPECT_GE(same, w.min_same) << w.prompt << " " << w.dtype;
  }
}

}  // namespace
}  // namespace ctxpar
