// Token sampling from logits: greedy, or seeded sampling with temperature, top-k and top-p.
//
// Contract
// - temperature == 0 is greedy: the argmax, the lowest token id among equal maxima. Otherwise
//   the logits are divided by the temperature, restricted to the top_k largest (0 = all; ties
//   broken by lower id), turned into probabilities (softmax in double), restricted to the
//   smallest prefix of the descending order whose mass reaches top_p (always at least one
//   token), renormalized, and one token is drawn with a std::mt19937_64 seeded by `seed`.
// - Same seed, same config and same logits give the same sequence of tokens on every machine.
// - Thread safety: a Sampler is used by one thread at a time.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar {

struct SamplerConfig {
  float temperature = 0.0f;  // >= 0, finite
  int top_k = 0;             // >= 0
  float top_p = 1.0f;        // in (0, 1]
  std::uint64_t seed = 0;
};

// Rejects a config outside the ranges above, naming the field, the value and the rule.
Status ValidateSamplerConfig(const SamplerConfig& config);

class Sampler {
 public:
  static Expected<Sampler> Create(const SamplerConfig& config);

  // The next token id; logits must be non-empty.
  int Sample(std::span<const float> logits);
  // The candidates and their probabilities (descending) that Sample draws from; empty for greedy.
  std::vector<std::pair<int, double>> Distribution(std::span<const float> logits) const;

 private:
  explicit Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {}

  SamplerConfig config_;
  std::mt19937_64 rng_;
};

// The argmax, lowest id among equal maxima.
int Greedy(std::span<const float> logits);

}  // namespace ctxpar
