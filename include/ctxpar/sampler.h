// The sampler `ctxpar generate` used before the engine: one request's temperature, top-k and
// top-p, drawn by RequestSampler (sampling.h). It goes when generate moves to the engine.
//
// Contract
// - temperature == 0 is greedy (Greedy, sampling.h). Otherwise RequestSampler's order: the
//   logits divided by the temperature, top_k (0 = all), top_p, one draw from std::mt19937_64
//   seeded by `seed`.
// - Same seed, same config and same logits give the same sequence of tokens on every machine.
// - Thread safety: a Sampler is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "ctxpar/sampling.h"
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
  int Sample(std::span<const float> logits) { return sampler_.Sample(logits); }
  // The candidates and their probabilities (descending) that Sample draws from; empty for greedy.
  std::vector<std::pair<int, double>> Distribution(std::span<const float> logits) const {
    return sampler_.Distribution(logits);
  }

 private:
  explicit Sampler(const SamplerConfig& config);

  RequestSampler sampler_;
};

}  // namespace ctxpar
