#include "ctxpar/kv_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "ctxpar/error_catalog.h"

namespace ctxpar {

Expected<KvLayout> KvLayout::Create(int dcp_size, int interleave_size) {
  if (dcp_size < 1) {
    return CatalogError("CTXPAR-DCP-001", {{"dcp_size", std::to_string(dcp_size)}});
  }
  if (interleave_size < 1) {
    return InvalidArgument(fmt::format(
        "KV layout: interleave_size must be >= 1, got interleave_size={}", interleave_size));
  }
  return KvLayout(dcp_size, interleave_size);
}

int64_t KvLayout::LocalLength(int rank, int64_t length, int64_t start) const {
  // Positions [0, length) owned by `rank`: I per full cycle of I*N, plus its part of the last.
  auto prefix = [&](int64_t len) {
    if (len <= 0) return int64_t{0};
    const int64_t cycle = int64_t{i_} * n_;
    const int64_t rem = len % cycle;
    return (len / cycle) * i_ + std::clamp<int64_t>(rem - int64_t{rank} * i_, 0, i_);
  };
  return std::max<int64_t>(0, prefix(length) - prefix(start));
}

LocalRange KvLayout::WindowLocalRows(int rank, int64_t t, int64_t window) const {
  const int64_t end = VisibleLocalRows(rank, t);
  if (window <= 0) return {0, end};
  return {std::min(end, LocalLength(rank, t - window + 1)), end};
}

}  // namespace ctxpar
