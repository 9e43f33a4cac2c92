#include "ctxpar/sampler.h"

#include <fmt/format.h>

#include <cmath>

namespace ctxpar {

Status ValidateSamplerConfig(const SamplerConfig& config) {
  if (!(config.temperature >= 0.0f) || !std::isfinite(config.temperature)) {
    return InvalidArgument(fmt::format(
        "temperature must be a finite number >= 0 (0 = greedy), but got {}", config.temperature));
  }
  if (config.top_k < 0) {
    return InvalidArgument(
        fmt::format("top_k must be >= 0 (0 = no top-k), but got {}", config.top_k));
  }
  if (!(config.top_p > 0.0f && config.top_p <= 1.0f)) {
    return InvalidArgument(fmt::format("top_p must be in (0, 1], but got {}", config.top_p));
  }
  return Status::Ok();
}

Sampler::Sampler(const SamplerConfig& config)
    : sampler_({.temperature = config.temperature, .top_p = config.top_p, .top_k = config.top_k},
               {}, config.seed) {}

Expected<Sampler> Sampler::Create(const SamplerConfig& config) {
  CTXPAR_RETURN_IF_ERROR(ValidateSamplerConfig(config));
  return Sampler(config);
}

}  // namespace ctxpar
