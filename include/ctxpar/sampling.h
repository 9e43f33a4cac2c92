// Per-request sampling: SGLang's sampling parameters, the sampler that applies them to one row of
// logits, and log-probabilities.
//
// Order of operations on the logits of one step (SGLang's): the repetition penalty over the
// tokens of prompt + output (a positive logit is divided by it, a negative one multiplied; the
// prompt counts as in vLLM and Hugging Face, SGLang's current penalizer only counts the output),
// the frequency and presence penalties over the output tokens (logit -= frequency_penalty * count
// + presence_penalty * (count > 0)), then temperature == 0 takes the argmax (the lowest id among
// equal maxima); otherwise the logits are divided by the temperature, softmax in double, top_k
// (the k largest; ties by lower id), renormalised, top_p (the smallest prefix of the descending
// order, ties by lower id, whose renormalised mass reaches top_p; at least one token: SGLang's
// top_k_renorm_prob then top_p_renorm_prob), min_p (tokens with probability below min_p times the
// largest are dropped, the largest always stays), renormalised, and one token is drawn with the
// request's own generator (std::mt19937_64 seeded by `seed`, one 64-bit draw per token drawn),
// so a request's tokens depend only on its own logits and seed, never on the other requests of a
// batch.
//
// Cost per Sample on a vocabulary V: the penalties touch only the tokens seen; greedy and top_k
// scan V once without sorting; without top_k, softmax costs V exponentials and top_p / min_p
// find their cut in linear time, without sorting (`ctxpar bench sampling` times them).
//
// Log-probabilities are those of the model's distribution: log_softmax (natural log) of the raw
// logits of the row (before penalties and temperature), computed in double; the top alternatives
// are sorted by log-probability, ties by lower id.
//
// Thread safety: SamplingParams is a value; a RequestSampler belongs to one request and is used
// by one thread at a time; the free functions are pure.
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

// Every member has a default member initializer, so that designated initializers naming a few
// fields do not trip -Wmissing-field-initializers.
struct SamplingParams {
  int max_new_tokens = 128;         // >= 0 (0: only prompt log-probabilities)
  float temperature = 1.0f;         // >= 0, finite; 0 is greedy
  float top_p = 1.0f;               // (0, 1]
  int top_k = -1;                   // -1 or 0: all; else >= 1
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // (0, 2], SGLang's range; 1 is none
  float frequency_penalty = 0.0f;   // [-2, 2]
  float presence_penalty = 0.0f;    // [-2, 2]
  std::optional<uint64_t> seed{};   // unset: the engine's random_seed mixed with the request id
  std::vector<std::string> stop{};  // stop strings (need a tokenizer); not part of the text
  // Generation ends on these too; the token is an output token, its text not part of the text.
  std::vector<int32_t> stop_token_ids{};
  bool no_stop_trim = false;        // the matched stop string or token's text is kept
  bool ignore_eos = false;          // do not end on the model's EOS tokens
  bool skip_special_tokens = true;  // control tokens give no text
  bool return_logprob = false;      // log-probability of each output token
  int top_logprobs_num = 0;         // and of its top alternatives, >= 0
};

// Rejects a value outside the ranges above (NaN included), naming the field as a request names
// it, the value and the valid range, with the catalog ID CTXPAR-SAMPLING-001; a stop token id
// outside [0, vocab_size) is CTXPAR-SAMPLING-002. Both are kInvalidArgument.
Status ValidateSamplingParams(const SamplingParams& params, int vocab_size);

// The argmax of a non-empty row, the lowest id among equal maxima.
int32_t Greedy(std::span<const float> logits);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top alternatives, when asked
};

// log_softmax of `logits` (non-empty, finite) at `token` (in range), with the min(top_n,
// logits.size()) most likely tokens.
TokenLogprob ComputeLogprob(std::span<const float> logits, int32_t token, int top_n);

class RequestSampler {
 public:
  // `prompt` seeds the repetition penalty's token set; `seed` is the generator's seed (the
  // caller resolves an unset SamplingParams::seed). The params must be valid.
  RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed);

  // The next token from one row of logits [vocab] (non-empty, finite); records it as an output
  // token (penalties).
  int32_t Sample(std::span<const float> logits);
  // The distribution Sample draws from after the penalties, temperature and filters (descending
  // probability); empty for greedy. For tests.
  std::vector<std::pair<int32_t, double>> Distribution(std::span<const float> logits) const;

 private:
  std::vector<float> Penalized(std::span<const float> logits) const;

  bool Penalizes() const;
  void See(int32_t token);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> output_counts_;  // per token id, grown on demand
  std::vector<int32_t> output_ids_;     // the distinct output tokens, for the penalties' loops
  std::vector<bool> seen_;              // in prompt or output, for the repetition penalty
  std::vector<int32_t> seen_ids_;       // the distinct tokens of seen_
};

}  // namespace ctxpar
