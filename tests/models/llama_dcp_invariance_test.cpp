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
};

const Config kConfigs[] = {
    {3, 1, "ag_rs", false}, {3, 3, "ag_rs", false},   {3, 3, "a2a", false},
    {3, 3, "a2a", true},    {3, 3, "shm_a2a", false}, {3, 3, "shm_a2a", true},
    {9, 1, "ag_rs", false}, {9, 3, "a2a", true},
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

  void CheckConfigs(const std::vector<int32_t>& prompt, std::span<const Config> configs) {
    Status st;
    const std::vector<int32_t> base = Generate({1, 1, "ag_rs", false}, prompt, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(base.size(), std::size_t(kNewTokens));
    for (const Config& c : configs) {
      const std::vector<int32_t> got = Generate(c, prompt, &st);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(got, base) << "tp " << c.tp << " dcp " << c.dcp << " " << c.backend
                           << (c.replicate_q ? " replicated Q" : "");
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

}  // namespace
}  // namespace ctxpar
