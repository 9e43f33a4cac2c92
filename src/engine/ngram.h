// NGRAM drafts for speculative decoding (SGLang's --speculative-algorithm NGRAM, chains only):
// tokens that are likely to follow a sequence, found in the sequence itself.
//
// The draft for tokens t[0..n): for w from min(max_window, n - 1) down to min_window, the suffix
// t[n-w..n) is looked up in t[0..n-1); at its most recent occurrence t[j..j+w) (j + w < n), the
// draft is what followed it, t[j+w..), at most min(max_tokens, branch_length) tokens (fewer when
// the sequence ends first). The longest window with an occurrence wins; no occurrence of any
// window drafts nothing. Repetitive text (a ledger, a code edit that quotes its source) repeats
// whole lines, which this finds; whether a draft is right is for the verify step to say.
//
// Cost: O(n * max_window) token comparisons per window in the worst case, on the engine thread.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ctxpar::engine {

struct NgramOptions {
  int min_window = 1;
  int max_window = 12;
  int branch_length = 18;
};

std::vector<int32_t> NgramDraft(std::span<const int32_t> tokens, const NgramOptions& options,
                                int max_tokens);

}  // namespace ctxpar::engine
