// Per-request sampling (sampling.h): validation, penalties, the filters and the seeded draw, and
// log-probabilities.
#include "ctxpar/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <numeric>

#include "ctxpar/error_catalog.h"

namespace ctxpar {
namespace {

// A field outside its range: CTXPAR-SAMPLING-001 with the field's name as a request spells it.
template <typename T>
Status FieldOutOfRange(std::string_view field, std::string_view rule, T value) {
  return CatalogError("CTXPAR-SAMPLING-001", {{"field", std::string(field)},
                                              {"rule", std::string(rule)},
                                              {"value", fmt::format("{}", value)}});
}

bool InRange(float v, float lo, float hi) { return v >= lo && v <= hi; }  // false for NaN

// The k largest entries of `v` (k clamped to its size), descending, ties by lower id. A bounded
// heap for small k reads the row once and rarely touches the heap; large k selects then sorts.
std::vector<int32_t> TopIndices(std::span<const float> v, size_t k) {
  const auto n = static_cast<int32_t>(v.size());
  k = std::min(k, v.size());
  auto before = [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  std::vector<int32_t> top;
  if (k * 8 < v.size()) {
    top.reserve(k);
    // A heap ordered by `before` keeps its worst member at the front.
    for (int32_t i = 0; i < n; ++i) {
      if (top.size() < k) {
        top.push_back(i);
        std::push_heap(top.begin(), top.end(), before);
      } else if (before(i, top.front())) {
        std::pop_heap(top.begin(), top.end(), before);
        top.back() = i;
        std::push_heap(top.begin(), top.end(), before);
      }
    }
  } else {
    top.resize(v.size());
    std::iota(top.begin(), top.end(), 0);
    std::nth_element(top.begin(), top.begin() + k, top.end(), before);
    top.resize(k);
  }
  std::sort(top.begin(), top.end(), before);
  return top;
}

using Weighted = std::vector<std::pair<int32_t, double>>;  // id, unnormalised probability

// The descending order of the filters: larger weight first, then lower id (a strict total order).
bool Before(const std::pair<int32_t, double>& a, const std::pair<int32_t, double>& b) {
  return a.second > b.second || (a.second == b.second && a.first < b.first);
}

// Rearranges `cand` so that its first n entries are the smallest prefix in the order Before whose
// mass reaches `target`, and returns n (the whole size when even that falls short). A quickselect
// on mass rather than on rank: expected linear time, and no sort of the nucleus.
size_t SelectNucleus(Weighted& cand, double target) {
  // Invariant: cand[0, lo) precedes cand[lo, hi), its mass `acc` < target, and n is in (lo, hi].
  size_t lo = 0, hi = cand.size();
  double acc = 0.0;
  while (hi - lo > 1) {
    const auto pivot = cand[lo + (hi - lo) / 2];
    const auto first = cand.begin() + lo, last = cand.begin() + hi;
    const auto mid = std::partition(first, last, [&](const auto& e) { return Before(e, pivot); });
    double left = 0.0;
    for (auto it = first; it != mid; ++it) left += it->second;
    if (acc + left >= target) {
      hi = mid - cand.begin();
      continue;
    }
    std::iter_swap(mid, std::find(mid, last, pivot));
    acc += left + mid->second;
    lo = mid - cand.begin() + 1;
    if (acc >= target) return lo;
  }
  return hi;
}

// Weights in (0, 1] by eighths of an octave, 0 for the largest; 64 octaves, then one bucket for
// the rest. Monotone in the weight, as the bits of a positive double are.
constexpr int kBuckets = 512;
int Bucket(double w) {
  constexpr uint64_t kOne = std::bit_cast<uint64_t>(1.0) >> 49;
  return static_cast<int>(
      std::min<uint64_t>(kOne - (std::bit_cast<uint64_t>(w) >> 49), kBuckets - 1));
}

// What the draw chooses among, with weights exp((l - max) / T), in the order the draw walks it:
// descending after top_k, id order otherwise (no sort). The result lives in a buffer of the
// calling thread, reused by its next call, so that a full vocabulary costs no allocation.
const Weighted& Candidates(std::span<const float> s, const SamplingParams& p) {
  thread_local Weighted cand, work;
  const double inv_t = 1.0 / double(p.temperature);
  const size_t vocab = s.size();
  cand.clear();
  // Every filter keeps the top token, whose weight is exp(0) = 1: min_p's floor is min_p.
  const double floor = p.min_p;
  if (p.top_k >= 1 && static_cast<size_t>(p.top_k) < vocab) {
    const std::vector<int32_t> top = TopIndices(s, p.top_k);
    const double m = s[top[0]];
    double total = 0.0;
    for (int32_t id : top) total += cand.emplace_back(id, std::exp((s[id] - m) * inv_t)).second;
    size_t n = 0;
    double mass = 0.0;
    while (n < cand.size() && mass < double(p.top_p) * total) mass += cand[n++].second;
    while (n > 1 && cand[n - 1].second < floor) --n;
    cand.resize(n);
    return cand;
  }
  // top_p and min_p both keep a prefix of the descending order, so the kept set is the shorter:
  // min_p's set, unless top_p's nucleus ends inside it. The nucleus is found without a sort: the
  // bucket masses locate the bucket where it ends, and a selection inside that bucket the token.
  const bool nucleus = p.top_p < 1.0f;
  std::array<double, kBuckets> bucket_mass{};
  const double m = *std::max_element(s.begin(), s.end());
  double total = 0.0;
  for (size_t i = 0; i < vocab; ++i) {
    const double w = std::exp((s[i] - m) * inv_t);
    total += w;
    if (nucleus) bucket_mass[Bucket(w)] += w;
    if (w >= floor) cand.emplace_back(static_cast<int32_t>(i), w);
  }
  if (!nucleus) return cand;
  const double target = double(p.top_p) * total;
  int end = 0;
  double before = 0.0;
  while (end < kBuckets - 1 && before + bucket_mass[end] < target) before += bucket_mass[end++];
  work.clear();
  for (const auto& e : cand) {
    if (Bucket(e.second) == end) work.push_back(e);
  }
  if (work.empty()) return cand;  // min_p emptied the bucket: its set ends first
  const size_t n = SelectNucleus(work, target - before);
  const auto last = *std::max_element(work.begin(), work.begin() + n, Before);
  std::erase_if(cand, [&](const auto& e) { return Before(last, e); });
  return cand;
}

}  // namespace

Status ValidateSamplingParams(const SamplingParams& p, int vocab_size) {
  if (p.max_new_tokens < 0)
    return FieldOutOfRange("max_new_tokens", "at least 0", p.max_new_tokens);
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return FieldOutOfRange("temperature", "a non-negative finite number (0 is greedy)",
                           p.temperature);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return FieldOutOfRange("top_p", "in (0, 1]", p.top_p);
  if (p.top_k < -1) return FieldOutOfRange("top_k", "-1 or 0 (all tokens) or at least 1", p.top_k);
  if (!InRange(p.min_p, 0.0f, 1.0f)) return FieldOutOfRange("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 2.0f)) {
    return FieldOutOfRange("repetition_penalty", "in (0, 2] (1 is no penalty)",
                           p.repetition_penalty);
  }
  if (!InRange(p.frequency_penalty, -2.0f, 2.0f)) {
    return FieldOutOfRange("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
  if (!InRange(p.presence_penalty, -2.0f, 2.0f)) {
    return FieldOutOfRange("presence_penalty", "in [-2, 2]", p.presence_penalty);
  }
  if (p.top_logprobs_num < 0) {
    return FieldOutOfRange("top_logprobs_num", "at least 0", p.top_logprobs_num);
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return CatalogError("CTXPAR-SAMPLING-002", {{"max_id", std::to_string(vocab_size - 1)},
                                                  {"token_id", std::to_string(id)}});
    }
  }
  return Status::Ok();
}

int32_t Greedy(std::span<const float> logits) {
  // kLanes independent maxima (each the first of its lane), so that no compare waits on the
  // last; then the lanes' best, the lowest id among equals. A vocabulary of 262,144 took 0.36 ms
  // a row with one running maximum.
  constexpr int kLanes = 16;
  const auto n = static_cast<int32_t>(logits.size());
  if (n < kLanes) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return best;
  }
  float value[kLanes];
  int32_t id[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    value[l] = logits[l];
    id[l] = l;
  }
  int32_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const bool greater = logits[i + l] > value[l];
      value[l] = greater ? logits[i + l] : value[l];
      id[l] = greater ? i + l : id[l];
    }
  }
  for (; i < n; ++i) {
    const int l = i % kLanes;
    if (logits[i] > value[l]) {
      value[l] = logits[i];
      id[l] = i;
    }
  }
  int32_t best = id[0];
  float best_value = value[0];
  for (int l = 1; l < kLanes; ++l) {
    if (value[l] > best_value || (value[l] == best_value && id[l] < best)) {
      best_value = value[l];
      best = id[l];
    }
  }
  return best;
}

TokenLogprob ComputeLogprob(std::span<const float> logits, int32_t token, int top_n) {
  const double m = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l - m);
  const double lse = m + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(logits[token] - lse);
  if (top_n > 0) {
    for (int32_t id : TopIndices(logits, top_n)) {
      out.top.emplace_back(id, static_cast<float>(logits[id] - lse));
    }
  }
  return out;
}

RequestSampler::RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt,
                               uint64_t seed)
    : params_(params), rng_(seed) {
  for (int32_t id : prompt) See(id);
}

void RequestSampler::See(int32_t token) {
  if (token < 0) return;
  const auto i = static_cast<size_t>(token);
  if (i >= seen_.size()) seen_.resize(i + 1, false);
  if (!seen_[i]) {
    seen_[i] = true;
    seen_ids_.push_back(token);
  }
}

bool RequestSampler::Penalizes() const {
  return params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
         params_.presence_penalty != 0.0f;
}

// SGLang's penalizers, in float as its tensors are; ids past the row are not in the vocabulary.
std::vector<float> RequestSampler::Penalized(std::span<const float> logits) const {
  std::vector<float> out(logits.begin(), logits.end());
  const float rep = params_.repetition_penalty;
  if (rep != 1.0f) {
    for (int32_t id : seen_ids_) {
      if (static_cast<size_t>(id) >= out.size()) continue;
      out[id] = out[id] < 0.0f ? out[id] * rep : out[id] / rep;
    }
  }
  for (int32_t id : output_ids_) {
    if (static_cast<size_t>(id) >= out.size()) continue;
    out[id] -= params_.frequency_penalty * static_cast<float>(output_counts_[id]);
    out[id] -= params_.presence_penalty;
  }
  return out;
}

int32_t RequestSampler::Sample(std::span<const float> logits) {
  std::vector<float> penalized;
  if (Penalizes()) {
    penalized = Penalized(logits);
    logits = penalized;
  }
  int32_t token = 0;
  if (params_.temperature == 0.0f) {
    token = Greedy(logits);
  } else {
    const Weighted& cand = Candidates(logits, params_);
    double total = 0.0;
    for (const auto& c : cand) total += c.second;
    // The top 53 bits as a double in [0, 1), as the old Sampler and std::generate_canonical do.
    const double target = double(rng_() >> 11) * 0x1.0p-53 * total;
    token = cand.back().first;
    double acc = 0.0;
    for (const auto& [id, w] : cand) {
      acc += w;
      if (target < acc) {
        token = id;
        break;
      }
    }
  }
  const auto i = static_cast<size_t>(token);
  if (i >= output_counts_.size()) output_counts_.resize(i + 1, 0);
  if (output_counts_[i]++ == 0) output_ids_.push_back(token);
  See(token);
  return token;
}

std::vector<std::pair<int32_t, double>> RequestSampler::Distribution(
    std::span<const float> logits) const {
  if (params_.temperature == 0.0f) return {};
  const std::vector<float> penalized = Penalized(logits);
  Weighted cand = Candidates(penalized, params_);
  double total = 0.0;
  for (const auto& c : cand) total += c.second;
  for (auto& c : cand) c.second /= total;
  std::sort(cand.begin(), cand.end(), Before);
  return cand;
}

}  // namespace ctxpar
