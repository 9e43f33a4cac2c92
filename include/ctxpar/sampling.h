// Per-request sampling: SGLang's sampling parameters, the sampler that applies them to one row of
// logits, and log-probabilities.
//
// Order of operations on the logits of one step (SGLang's): the repetition penalty over the
// tokens of prompt + output (a positive logit is divided by it, a negative one multiplied), the
// frequency and presence penalties over the output tokens (logit -= frequency_penalty * count +
// presence_penalty * (count > 0)), then temperature == 0 takes the argmax (the lowest id among
// equal maxima); otherwise the logits are divided by the temperature, softmax in double, top_k
// (the k largest; ties by lower id), top_p (the smallest prefix of the descending order whose
// mass reaches top_p; at least one token), min_p (tokens with probability below min_p times the
// largest are dropped), renormalised, and one token is drawn with the request's own generator
// (std::mt19937_64 seeded by `seed`), so a request's tokens depend only on its own logits and
// seed, never on the other requests of a batch.
//
// Log-probabilities are those of the model's distribution: log_softmax of the raw logits of the
// row (before penalties and temperature), computed in double; the top alternatives are sorted by
// log-probability, ties by lower id.
//
// Thread safety: SamplingParams is a value; a RequestSampler belongs to one request and is used
// by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar {

struct SamplingParams {
  int max_new_tokens = 128;    // >= 0 (0: only prompt log-probabilities)
  float temperature = 1.0f;    // >= 0, finite; 0 is greedy
  float top_p = 1.0f;          // (0, 1]
  int top_k = -1;              // -1 or 0: all; else >= 1
  float min_p = 0.0f;          // [0, 1]
  float repetition_penalty = 1.0f;  // > 0, finite
  float frequency_penalty = 0.0f;   // [-2, 2]
  float presence_penalty = 0.0f;    // [-2, 2]
  std::optional<uint64_t> seed;     // unset: the engine's random_seed mixed with the request id
  std::vector<std::string> stop;    // stop strings (need a tokenizer); not part of the output
  std::vector<int32_t> stop_token_ids;  // generation ends on these too (the token is output)
  bool ignore_eos = false;              // do not end on the model's EOS tokens
  bool skip_special_tokens = true;      // control tokens give no text
  bool return_logprob = false;          // log-probability of each output token
  int top_logprobs_num = 0;             // and of its top alternatives, >= 0
};

// Rejects a value outside the ranges above, naming the field, the value and the rule, with the
// catalog ID CTXPAR-SAMPLING-001; a stop token id outside [0, vocab_size) is CTXPAR-SAMPLING-002.
Status ValidateSamplingParams(const SamplingParams& params, int vocab_size);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top alternatives, when asked
};

// log_softmax of `logits` at `token`, with the `top_n` most likely tokens.
TokenLogprob ComputeLogprob(std::span<const float> logits, int32_t token, int top_n);

class RequestSampler {
 public:
  // `prompt` seeds the repetition penalty's token set; `seed` is the generator's seed (the
  // caller resolves an unset SamplingParams::seed). The params must be valid.
  RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed);

  // The next token from one row of logits [vocab]; records it as an output token (penalties).
  int32_t Sample(std::span<const float> logits);
  // The distribution Sample draws from after the penalties, temperature and filters (descending
  // probability); empty for greedy. For tests.
  std::vector<std::pair<int32_t, double>> Distribution(std::span<const float> logits) const;

 private:
  std::vector<float> Penalized(std::span<const float> logits) const;

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> output_counts_;  // per token id, grown on demand
  std::vector<bool> seen_;              // in prompt or output, for the repetition penalty
};

}  // namespace ctxpar
