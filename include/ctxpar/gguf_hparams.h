// Model hyperparameters read from GGUF metadata with their rules checked where they are read: a
// file whose RoPE base is NaN or whose RMS epsilon is negative is refused at load with
// CTXPAR-GGUF-006, naming the file, the key and the rule, instead of running to NaN logits (or
// to no output at all). A missing key or a wrong type is CTXPAR-GGUF-004 / 005 as with
// GgufFile's lookups.
//
// Usage (a model's hyperparameter reader):
//   CTXPAR_ASSIGN_OR_RETURN(hp.dim, ReadIntHparam(f, a + "embedding_length", 1, 1 << 30));
//   CTXPAR_ASSIGN_OR_RETURN(hp.rope_base,
//                           ReadFloatHparam(f, a + "rope.freq_base", kRopeFreqBaseRange, 1e4));
//   if (hp.dim % hp.num_heads != 0) {
//     return HparamError(f, a + "embedding_length", hp.dim, "it must be divisible by ...");
//   }
//
// Thread safety: free functions over an immutable GgufFile.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ctxpar/gguf.h"
#include "ctxpar/status.h"

namespace ctxpar {

// An interval of finite values; `text` states it in the error ("in (0, 1)").
struct FloatRange {
  double min;
  double max;
  bool min_open;
  bool max_open;
  std::string_view text;
};

// RoPE's base frequency (theta): 1e4 for Llama 2, 5e5 for Llama 3; a base <= 1 has no rotation
// to speak of.
inline constexpr FloatRange kRopeFreqBaseRange = {1.0, 1e12, true, false, "in (1, 1e12]"};
// RMS norm epsilon: llama.cpp files hold 1e-5 or 1e-6; 0 divides by zero on a zero row.
inline constexpr FloatRange kRmsEpsilonRange = {0.0, 1.0, true, true, "in (0, 1)"};

// An integer key (any integer type) in [min, max]; `fallback` when the key is absent, if given.
Expected<int> ReadIntHparam(const GgufFile& file, std::string_view key, int min, int max,
                            std::optional<int> fallback = std::nullopt);

// A floating key (f32 or f64), finite and within `range`; `fallback` when absent, if given.
Expected<float> ReadFloatHparam(const GgufFile& file, std::string_view key, const FloatRange& range,
                                std::optional<float> fallback = std::nullopt);

// CTXPAR-GGUF-006 for a rule between values, or about a tensor: "The model file 'm.gguf' has
// {item} = {value}, but {rule}." `rule` is a clause such as "it must be even".
Status HparamError(const GgufFile& file, std::string_view item, const std::string& value,
                   std::string_view rule);
inline Status HparamError(const GgufFile& file, std::string_view item, long long value,
                          std::string_view rule) {
  return HparamError(file, item, std::to_string(value), rule);
}

}  // namespace ctxpar
