#include "ctxpar/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

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

Expected<Sampler> Sampler::Create(const SamplerConfig& config) {
  CTXPAR_RETURN_IF_ERROR(ValidateSamplerConfig(config));
  return Sampler(config);
}

int Greedy(std::span<const float> logits) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

std::vector<std::pair<int, double>> Sampler::Distribution(std::span<const float> logits) const {
  std::vector<std::pair<int, double>> cand;
  if (config_.temperature == 0.0f) return cand;
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::size_t keep = order.size();
  if (config_.top_k > 0 && static_cast<std::size_t>(config_.top_k) < keep) {
    keep = config_.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  const double inv_t = 1.0 / double(config_.temperature);
  const double max_logit = double(logits[order[0]]) * inv_t;
  double total = 0.0;
  cand.reserve(keep);
  for (std::size_t i = 0; i < keep; ++i) {
    const double p = std::exp(double(logits[order[i]]) * inv_t - max_logit);
    cand.emplace_back(order[i], p);
    total += p;
  }
  double mass = 0.0;
  std::size_t n = 0;
  while (n < cand.size()) {
    mass += cand[n].second / total;
    ++n;
    if (mass >= double(config_.top_p)) break;
  }
  cand.resize(n);
  double kept = 0.0;
  for (const auto& c : cand) kept += c.second;
  for (auto& c : cand) c.second /= kept;
  return cand;
}

int Sampler::Sample(std::span<const float> logits) {
  if (config_.temperature == 0.0f) return Greedy(logits);
  const std::vector<std::pair<int, double>> cand = Distribution(logits);
  const double u = double(rng_() >> 11) * 0x1.0p-53;
  double acc = 0.0;
  for (const auto& [id, p] : cand) {
    acc += p;
    if (u < acc) return id;
  }
  return cand.back().first;
}

}  // namespace ctxpar
