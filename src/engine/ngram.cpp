#include "engine/ngram.h"

#include <algorithm>

namespace ctxpar::engine {

std::vector<int32_t> NgramDraft(std::span<const int32_t> tokens, const NgramOptions& options,
                                int max_tokens) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t want = std::min(max_tokens, options.branch_length);
  if (want <= 0 || n < 2) return {};
  for (int64_t w = std::min<int64_t>(options.max_window, n - 1); w >= options.min_window; --w) {
    const int32_t* suffix = tokens.data() + (n - w);
    // The most recent occurrence that ends before the sequence's last token.
    for (int64_t j = n - w - 1; j >= 0; --j) {
      if (tokens[j] != suffix[0] || !std::equal(suffix, suffix + w, tokens.data() + j)) continue;
      const int64_t end = std::min(n, j + w + want);
      return {tokens.begin() + (j + w), tokens.begin() + end};
    }
  }
  return {};
}

}  // namespace ctxpar::engine
