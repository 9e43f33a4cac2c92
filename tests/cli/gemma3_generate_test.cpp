// `ctxpar generate` and `check` on Gemma 3 270M, as a user runs them: the greedy ids of the
// golden's short prompt are HF transformers' (tests/data/gemma3/golden.json), from token ids and
// from text (the SentencePiece tokenizer adds BOS), at tp 1 and over four MPI ranks with DCP, and
// those of the 700-token prompt over four DCP ranks in prefill chunks;
// check shows both KV groups; --chat is refused for this file, which carries no chat template.
// Skips when the model file is absent (scripts/fetch-model.sh gemma3).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_ctxpar.h"

namespace ctxpar {
namespace {

using testing::RunCtxpar;
using testing::RunResult;

constexpr int kNewTokens = 6;

std::string Gemma3Path() {
  if (const char* p = std::getenv("CTXPAR_GEMMA3_MODEL"); p != nullptr && *p != '\0') return p;
  if (const char* dir = std::getenv("CTXPAR_MODEL_DIR"); dir != nullptr && *dir != '\0') {
    return std::string(dir) + "/gemma-3-270m-q4_k_m.gguf";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") +
         "/.cache/ctxpar/models/gemma-3-270m-q4_k_m.gguf";
}

class Gemma3Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = Gemma3Path();
    if (!std::filesystem::exists(path_)) {
      GTEST_SKIP() << "no Gemma 3 model at " << path_
                   << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
    }
    std::ifstream in(std::string(CTXPAR_TEST_DATA_DIR) + "/gemma3/golden.json");
    const nlohmann::json short_prompt = nlohmann::json::parse(in).at("prompts").at(0);
    text_ = short_prompt.at("text").get<std::string>();
    for (int32_t id : short_prompt.at("prompt_ids").get<std::vector<int32_t>>()) {
      ids_ += (ids_.empty() ? "" : ",") + std::to_string(id);
    }
    const auto greedy = short_prompt.at("greedy").get<std::vector<int32_t>>();
    for (int i = 0; i < kNewTokens; ++i) want_ += (i ? " " : "") + std::to_string(greedy[i]);
  }

  RunResult Generate(std::vector<std::string> args) const {
    std::vector<std::string> all = {"generate",
                                    "--model-path",
                                    path_,
                                    "--print-ids",
                                    "--ignore-eos",
                                    "--max-new-tokens",
                                    std::to_string(kNewTokens)};
    all.insert(all.end(), args.begin(), args.end());
    return RunCtxpar(all, {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                           "OMPI_MCA_rmaps_base_oversubscribe=1"});
  }

  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  std::string path_, text_, ids_, want_;
};

TEST_F(Gemma3Cli, GreedyIdsAreHfsFromIdsAndFromText) {
  const RunResult from_ids = Generate({"--input-ids", ids_});
  ASSERT_EQ(from_ids.exit_status, 0) << from_ids.err;
  EXPECT_EQ(Trim(from_ids.out), want_);
  const RunResult from_text = Generate({text_});
  ASSERT_EQ(from_text.exit_status, 0) << from_text.err;
  EXPECT_EQ(Trim(from_text.out), want_);
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  const RunResult ranks = Generate({"--tp-size", "4", "--dcp-size", "4", "--dcp-comm-backend",
                                    "a2a", "--threads", "1", "--input-ids", ids_});
  ASSERT_EQ(ranks.exit_status, 0) << ranks.err;
  EXPECT_EQ(Trim(ranks.out), want_);
}

// The 700-token prompt, past the 512-token window, in prefill chunks of 128 over four ranks
// whose DCP group shards both KV groups.
TEST_F(Gemma3Cli, PromptPastTheWindowOverDcpRanksInChunks) {
  if (std::string(CTXPAR_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  std::ifstream in(std::string(CTXPAR_TEST_DATA_DIR) + "/gemma3/golden.json");
  const nlohmann::json long_prompt = nlohmann::json::parse(in).at("prompts").at(1);
  std::string ids, want;
  for (int32_t id : long_prompt.at("prompt_ids").get<std::vector<int32_t>>()) {
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  }
  const auto greedy = long_prompt.at("greedy").get<std::vector<int32_t>>();
  for (int i = 0; i < kNewTokens; ++i) want += (i ? " " : "") + std::to_string(greedy[i]);
  const RunResult r =
      Generate({"--tp-size", "4", "--dcp-size", "4", "--dcp-comm-backend", "shm_a2a", "--threads",
                "1", "--chunked-prefill-size", "128", "--input-ids", ids});
  ASSERT_EQ(r.exit_status, 0) << r.err;
  EXPECT_EQ(Trim(r.out), want);
}

TEST_F(Gemma3Cli, CheckShowsBothKvGroupsAndChatIsRefused) {
  const RunResult check =
      RunCtxpar({"check", "--model-path", path_, "--tp-size", "4", "--dcp-size", "4", "--json"});
  ASSERT_EQ(check.exit_status, 0) << check.err;
  const nlohmann::json j = nlohmann::json::parse(check.out);
  EXPECT_EQ(j.at("valid"), true);
  EXPECT_GT(j.at("max_total_num_tokens").get<int64_t>(), 0);
  EXPECT_GT(j.at("swa_max_total_num_tokens").get<int64_t>(), 0);
  const RunResult chat = RunCtxpar({"generate", "--model-path", path_, "--chat", "Hi"});
  EXPECT_EQ(chat.exit_status, 2);
  EXPECT_NE(chat.err.find("CTXPAR-CHAT-001"), std::string::npos) << chat.err;
  const RunResult tp3 = RunCtxpar({"check", "--model-path", path_, "--tp-size", "3"});
  EXPECT_EQ(tp3.exit_status, 2);
  EXPECT_NE(tp3.err.find("CTXPAR-MODEL-002"), std::string::npos) << tp3.err;
}

}  // namespace
}  // namespace ctxpar
