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

uint64_t NgramStore::Key(const int32_t* first) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the key's ids
  for (int i = 0; i < kKey; ++i) h = (h ^ static_cast<uint32_t>(first[i])) * 0x100000001b3ull;
  return h;
}

void NgramStore::Add(std::span<const int32_t> tokens) {
  if (capacity_ <= 0) return;
  if (static_cast<int64_t>(tokens.size()) > capacity_) tokens = tokens.last(capacity_);
  const auto n = static_cast<int64_t>(tokens.size());
  if (n <= kKey) return;
  while (held_ + n > capacity_) EvictOldest();
  Stored& s = stored_.emplace_back(Stored{next_serial_++, {tokens.begin(), tokens.end()}});
  held_ += n;
  for (int64_t end = kKey; end < n; ++end)
    index_[Key(s.tokens.data() + end - kKey)] = {s.serial, end};
}

void NgramStore::EvictOldest() {
  const Stored& s = stored_.front();
  const auto n = static_cast<int64_t>(s.tokens.size());
  for (int64_t end = kKey; end < n; ++end) {
    const auto it = index_.find(Key(s.tokens.data() + end - kKey));
    if (it != index_.end() && it->second.serial == s.serial) index_.erase(it);
  }
  held_ -= n;
  stored_.pop_front();
}

std::vector<int32_t> NgramStore::Draft(std::span<const int32_t> tokens, int branch_length,
                                       int max_tokens) const {
  const int64_t want = std::min(max_tokens, branch_length);
  if (want <= 0 || static_cast<int64_t>(tokens.size()) < kKey || stored_.empty()) return {};
  const int32_t* key = tokens.data() + tokens.size() - kKey;
  const auto it = index_.find(Key(key));
  if (it == index_.end()) return {};
  const Stored& s = stored_[it->second.serial - stored_.front().serial];
  const int64_t end = it->second.end;
  // Another key with the same hash: no draft rather than a wrong one.
  if (!std::equal(key, key + kKey, s.tokens.data() + end - kKey)) return {};
  const int64_t stop = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()), end + want);
  return {s.tokens.begin() + end, s.tokens.begin() + stop};
}

}  // namespace ctxpar::engine
