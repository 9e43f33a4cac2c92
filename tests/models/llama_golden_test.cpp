// The Llama forward against llama.cpp (tests/data/llama_cpp/*.json, made by
// tools/golden/llama_cpp/make_model_golden.py with llama-cpp-python: fp32 K/V cache, no flash
// attention, the prompt in one batch): greedy continuations from the reference's own prompt
// ids, and the logits of the reference's top-5 tokens at the last prompt position and the first
// generated positions.
//
// - golden_f32_weights.json: llama.cpp on the file's weights dequantized to F32, i.e. with fp32
//   activations, the numerics of ctxpar's default forward: free-running greedy decoding must
//   follow it token for token, and the logits agree to fp32 summation-order rounding.
// - golden.json: llama.cpp on the Q4_1 file, which quantizes every matmul input to int8. That
//   forward is chaotic: a one-ulp change flips an int8 rounding, whose error flips more in the
//   next layers, and the logits move by tenths. llama.cpp itself moves by 0.32 and changes
//   chat_poem's first token when only its prompt batching changes (n_batch = n_ubatch = 1),
//   so no other implementation follows its free-running text without being bit-identical
//   (docs/model.md). Both ctxpar modes are therefore held to its tokens where it is decisive,
//   teacher-forced, and to its logits within the int8 noise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ctxpar/sampling.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

// The rule: free-running greedy output identical to the reference for >= 32 tokens.
// Against the F32-weights golden it has room: llama.cpp's smallest top-2 margin on its 6 x 48
// steps is 0.0035, 150 times the logit error below.
constexpr int kMinIdenticalTokens = 32;
// |logit - llama.cpp's| for its top-5 tokens, fp32 activations against the F32-weights golden:
// measured worst 2.2e-5 (fp32 summation order; the golden rounds logits to 1e-5).
constexpr double kLogitToleranceF32Weights = 1e-4;
// Against the Q4_1 golden (llama.cpp's int8 activations), teacher-forced: measured worst 0.61
// with fp32 activations (every ISA), and with ctxpar's int8 ones 0.64 on AVX2 and 0.75 on
// AVX-512 (Intel Xeon, VNNI), over the 6 prompts' 54 recorded positions. Since fp32 activations
// give llama.cpp's F32-weights logits to 2e-5, 0.61 is the int8-vs-fp32 activation difference of
// llama.cpp itself. The int8 forward's own figure depends on the ISA: the int8 dot products are
// the same integers on every path, but attention's fp32 sums are not (attention.h: about 1e-5),
// and a chaotic int8 forward grows such differences to the size of its quantization noise.
constexpr double kLogitToleranceQ41 = 0.8;
// Teacher-forced against the Q4_1 golden: where llama.cpp's top-2 margin is at least this, its
// argmax must be ours. The logits differ by up to kLogitToleranceQ41, which could move a margin
// by twice that; the largest margin where ctxpar's argmax differed was 0.14 (int8, chat_poem).
constexpr double kDecisiveMargin = 0.5;

using testing::ModelPath;
using testing::SequenceRunner;

nlohmann::json ReadGolden(const std::string& file) {
  std::ifstream in(std::string(CTXPAR_TEST_DATA_DIR) + "/llama_cpp/" + file);
  return nlohmann::json::parse(in);
}

struct RunStats {
  int identical = 0;  // leading generated tokens equal to the reference's
  int decisive = 0;   // teacher-forced steps with a margin >= kDecisiveMargin
  double worst_logit_diff = 0.0;
  double largest_overruled_margin = 0.0;  // teacher-forced: where our argmax differed
};

class LlamaGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const bool quantize : {false, true}) {
      Expected<Launch> launch = testing::TestLaunch(
          ModelPath(), {{"llama_cpp_numerics", quantize}, {"threads", int64_t{1}}});
      ASSERT_TRUE(launch.ok()) << launch.status().ToString()
                               << " (scripts/fetch-model.sh, or set CTXPAR_MODEL)";
      launches_.push_back(std::move(*launch));
    }
  }

  std::unique_ptr<SequenceRunner> MakeModel(bool quantize_activations) {
    const Launch& l = launches_[quantize_activations ? 1 : 0];
    auto runner = SequenceRunner::Create(*l.source, l.config, *world_[0]);
    EXPECT_TRUE(runner.ok()) << runner.status().ToString();
    return runner.ok() ? std::make_unique<SequenceRunner>(std::move(*runner)) : nullptr;
  }

  // Decodes the reference's greedy length after its prompt: free-running (our argmax is fed
  // back) or teacher-forced (the reference's token is). Checks the reference's top-5 logits at
  // every recorded position still on its path against tolerance, and, teacher-forced, our argmax
  // at every step where the reference's margin is decisive.
  static RunStats Run(SequenceRunner& model, const nlohmann::json& p, bool teacher_forced,
                      double tolerance) {
    const std::string name = p.at("name");
    const auto want = p.at("greedy_ids").get<std::vector<int32_t>>();
    const auto margins = p.at("margins").get<std::vector<double>>();
    const auto& top5 = p.at("top5");
    RunStats stats;
    EXPECT_TRUE(model.Reset().ok());
    auto logits = model.Forward(p.at("prompt_ids").get<std::vector<int32_t>>());
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!logits.ok()) {
        ADD_FAILURE() << name << ": " << logits.status().ToString();
        return stats;
      }
      const bool on_path = teacher_forced || stats.identical == static_cast<int>(i);
      if (i < top5.size() && on_path) {
        for (const auto& entry : top5[i]) {
          const int id = entry[0];
          const double diff = std::fabs((*logits)[id] - entry[1].get<double>());
          stats.worst_logit_diff = std::max(stats.worst_logit_diff, diff);
          EXPECT_LE(diff, tolerance) << name << " position " << i << " token " << id;
        }
      }
      const int32_t ours = Greedy(*logits);
      if (ours == want[i] && stats.identical == static_cast<int>(i)) ++stats.identical;
      if (ours != want[i]) {
        stats.largest_overruled_margin = std::max(stats.largest_overruled_margin, margins[i]);
      }
      if (teacher_forced && margins[i] >= kDecisiveMargin) {
        ++stats.decisive;
        EXPECT_EQ(ours, want[i]) << name << " step " << i << " (llama.cpp margin " << margins[i]
                                 << ")";
      }
      const int32_t next = teacher_forced ? want[i] : ours;
      logits = model.Forward(std::span<const int32_t>(&next, 1));
    }
    return stats;
  }

  std::vector<Launch> launches_;
  std::vector<std::unique_ptr<Communicator>> world_ = MakeInProcessGroup(1);
};

TEST_F(LlamaGolden, Fp32ActivationsFollowLlamaCppOnF32Weights) {
  const nlohmann::json golden = ReadGolden("golden_f32_weights.json");
  ASSERT_EQ(golden.at("model").get<std::string>(), "SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_EQ(golden.at("settings").at("type_k").get<std::string>(), "f32");
  auto model = MakeModel(/*quantize_activations=*/false);
  ASSERT_NE(model, nullptr);
  for (const auto& p : golden.at("prompts")) {
    const std::string name = p.at("name");
    const int n = static_cast<int>(p.at("greedy_ids").size());
    const RunStats s = Run(*model, p, /*teacher_forced=*/false, kLogitToleranceF32Weights);
    EXPECT_GE(s.identical, std::min(kMinIdenticalTokens, n)) << name;
    std::printf(
        "F32 weights, fp32 activations, %s: free greedy run identical for %d of %d "
        "tokens; worst top-5 logit diff %.6f\n",
        name.c_str(), s.identical, n, s.worst_logit_diff);
  }
}

TEST_F(LlamaGolden, BothModesAgreeWhereLlamaCppOnQ4_1IsDecisive) {
  const nlohmann::json golden = ReadGolden("golden.json");
  ASSERT_EQ(golden.at("model").get<std::string>(), "SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_EQ(golden.at("settings").at("type_k").get<std::string>(), "f32");
  for (const bool quantize : {false, true}) {
    auto model = MakeModel(quantize);
    ASSERT_NE(model, nullptr);
    for (const auto& p : golden.at("prompts")) {
      const std::string name = p.at("name");
      const RunStats s = Run(*model, p, /*teacher_forced=*/true, kLogitToleranceQ41);
      std::printf(
          "Q4_1, %s activations, %s: free greedy run identical for %d of %zu tokens; %d "
          "decisive steps agree, largest margin overruled %.4f; worst top-5 logit diff %.4f\n",
          quantize ? "int8" : "fp32", name.c_str(), s.identical, p.at("greedy_ids").size(),
          s.decisive, s.largest_overruled_margin, s.worst_logit_diff);
    }
  }
}

}  // namespace
}  // namespace ctxpar
