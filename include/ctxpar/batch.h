// Batch: the work of one forward step, for many sequences at once.
//
// Each sequence of the batch brings its new tokens: a chunk of its prompt (prefill, possibly one of
// several chunks) or the one token it sampled last (decode). Its tokens take positions
// [pos0, pos0 + num_tokens); the KV pool already holds its positions [0, pos0), and the forward
// appends the new ones. Row t of a sequence attends causally to positions <= pos0 + t.
//
// Logits rows. The forward returns logits for the wanted rows only, in batch order: for each
// sequence, every new token's row when all_logits (prompt log-probabilities) and otherwise the
// row of its last new token. A sequence with want_logits = false (an intermediate prefill chunk)
// contributes no row.
//
// Layout of `tokens`: the sequences' new tokens back to back, sequence i's at
// [seqs[i].token_offset, seqs[i].token_offset + seqs[i].num_tokens).
//
// Batch invariance: a model computes each row by a sequence of operations that depends only on
// that row's sequence (its tokens, positions and KV), never on the other sequences of the batch,
// so a request's logits do not change with what it is batched with, how its prefill is chunked,
// or whether it was retracted and prefilled again.
//
// Thread safety: a value.
#pragma once

#include <cstdint>
#include <vector>

namespace ctxpar {

struct BatchSeq {
  int32_t slot = 0;          // the sequence's KV pool slot (kv_pool.h)
  int64_t pos0 = 0;          // position of its first new token = tokens already in the KV pool
  int32_t num_tokens = 0;    // >= 1
  int32_t token_offset = 0;  // index of its first new token in Batch::tokens
  bool want_logits = true;   // false: no logits row (an intermediate prefill chunk)
  bool all_logits = false;   // with want_logits: a row for every new token, not only the last
};

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<BatchSeq> seqs;

  // Appends a sequence's new tokens.
  void Add(int32_t slot, int64_t pos0, const int32_t* ids, int32_t n, bool want_logits = true,
           bool all_logits = false) {
    seqs.push_back({slot, pos0, n, static_cast<int32_t>(tokens.size()), want_logits, all_logits});
    tokens.insert(tokens.end(), ids, ids + n);
  }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Logits rows the forward returns for sequence i.
  int32_t LogitRows(std::size_t i) const {
    const BatchSeq& s = seqs[i];
    return !s.want_logits ? 0 : (s.all_logits ? s.num_tokens : 1);
  }
  int64_t TotalLogitRows() const {
    int64_t rows = 0;
    for (std::size_t i = 0; i < seqs.size(); ++i) rows += LogitRows(i);
    return rows;
  }
};

}  // namespace ctxpar
