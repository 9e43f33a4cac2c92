// Where each token's K/V lives in a DCP group: the one place for the sharding math (docs/dcp.md).
//
// With N = dcp_size ranks and interleave size I (default 1), the token at global position p
// (0-based) lives on rank (p / I) % N, in that rank's local row (p / (I*N)) * I + p % I. Ranks
// store their tokens in position order, so a rank's local rows are dense: the tokens of positions
// [0, L) occupy local rows [0, LocalLength(rank, L)), and those of [a, b) the local rows
// [LocalLength(rank, a), LocalLength(rank, b)).
//
// Thread safety: a value type with pure member functions.
#pragma once

#include <cstdint>

#include "ctxpar/status.h"

namespace ctxpar {

// Local rows [begin, end) of one rank's shard.
struct LocalRange {
  int64_t begin = 0;
  int64_t end = 0;
};

class KvLayout {
 public:
  // Rejects dcp_size < 1 (CTXPAR-DCP-001) and interleave_size < 1.
  static Expected<KvLayout> Create(int dcp_size, int interleave_size = 1);

  int dcp_size() const { return n_; }
  int interleave_size() const { return i_; }

  // Positions p >= 0 throughout.
  int Owner(int64_t p) const { return static_cast<int>((p / i_) % n_); }
  int64_t LocalRow(int64_t p) const { return (p / (int64_t{i_} * n_)) * i_ + p % i_; }

  // The number of positions in [start, length) that `rank` owns (0 when start >= length): the
  // local rows a sequence of `length` tokens has on `rank`, less those of its first `start`.
  int64_t LocalLength(int rank, int64_t length, int64_t start = 0) const;

  // The local rows of `rank` that a causal query at global position t sees: its tokens at
  // positions <= t. For a decode row of a sequence of length L, t = L - 1.
  int64_t VisibleLocalRows(int rank, int64_t t) const { return LocalLength(rank, t + 1); }

  // The local rows of `rank` that a query at global position t sees through a sliding window of
  // `window` positions (0: no window, all positions <= t): the positions p with t - window < p
  // <= t, p >= 0. They are dense local rows, [LocalLength(rank, t - window + 1), VisibleLocalRows
  // (rank, t)); empty (begin == end) when the rank owns none of them.
  LocalRange WindowLocalRows(int rank, int64_t t, int64_t window) const;

 private:
  KvLayout(int n, int i) : n_(n), i_(i) {}
  int n_;
  int i_;
};

}  // namespace ctxpar
