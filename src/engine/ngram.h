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
// NgramStore is the cache shared across requests (SGLang's n-gram cache): the tokens of finished
// requests, at most `capacity` tokens (the oldest requests go first), indexed by each run of
// kKey tokens. A request whose own tokens draft nothing drafts what followed the most recent
// stored occurrence of its last kKey tokens. About 50 bytes a token held.
//
// Thread safety: NgramDraft is a pure function; an NgramStore is used by one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

namespace ctxpar::engine {

struct NgramOptions {
  int min_window = 1;
  int max_window = 12;
  int branch_length = 18;
};

std::vector<int32_t> NgramDraft(std::span<const int32_t> tokens, const NgramOptions& options,
                                int max_tokens);

class NgramStore {
 public:
  static constexpr int kKey = 3;  // tokens a lookup matches: fewer match by chance across texts

  explicit NgramStore(int64_t capacity) : capacity_(capacity) {}
  // A finished request's prompt and output (the last `capacity` tokens of a longer one).
  void Add(std::span<const int32_t> tokens);
  // What followed the most recent stored occurrence of the last kKey of `tokens`: at most
  // min(max_tokens, branch_length) tokens, or none.
  std::vector<int32_t> Draft(std::span<const int32_t> tokens, int branch_length,
                             int max_tokens) const;
  int64_t size() const { return held_; }
  int64_t capacity() const { return capacity_; }

 private:
  struct Where {
    uint64_t serial;  // the stored sequence
    int64_t end;      // the key's end in it
  };
  struct Stored {
    uint64_t serial;
    std::vector<int32_t> tokens;
  };
  static uint64_t Key(const int32_t* first);
  void EvictOldest();

  int64_t capacity_;
  int64_t held_ = 0;
  uint64_t next_serial_ = 0;
  std::deque<Stored> stored_;
  std::unordered_map<uint64_t, Where> index_;  // a key's most recent occurrence with a successor
};

}  // namespace ctxpar::engine
