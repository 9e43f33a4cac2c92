// A paged KV cache for one rank of a DCP group, laid out as kv_layout.h says and read by
// PartialAttentionCpu (attention.h) through View().
//
// Pages. A rank holds num_pages physical pages of page_size local rows. A sequence's virtual page
// v covers the page_size * dcp_size global positions [v*P*N, (v+1)*P*N); it is one physical page
// with the same page id on every rank of the group, holding that rank's local rows
// [v*P, (v+1)*P) (this needs page_size % interleave_size == 0). Every rank runs the same
// AddSequence / Append / FreeSequence calls in the same order, so page ids agree across ranks
// without communication.
//
// Appends. Append(seq, k, v, n) extends a sequence by n tokens (decode: n = 1; prefill: the
// prompt); every rank passes the K/V of all n tokens (every rank can compute them) and only the
// owner of each position stores it. K/V arrive in fp32 and are stored in `dtype` (bf16: rounded
// to nearest even).
//
// Shapes: k [n, num_kv_heads, head_dim_qk], v [n, num_kv_heads, head_dim_v] (fp32, row-major).
// GQA: v separate. Absorbed MLA: v_in_k = true, num_kv_heads = 1, head_dim_qk = 576 (512 latent +
// 64 rope), head_dim_v = 512: V is the first 512 elements of each K row and v is null.
//
// Storage. Inside a page, K and V are laid out in `format` (attention.h's KvPageFormat; Append
// writes through KvElementOffset). The K and V pools are HostBuffers, so that the pages the
// kernels read are backed by huge pages where the system allows it.
//
// Thread safety: not thread-safe; View() stays valid until the next non-const call.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxpar/attention.h"
#include "ctxpar/host_buffer.h"
#include "ctxpar/kv_layout.h"
#include "ctxpar/status.h"

namespace ctxpar {

struct KvCacheOptions {
  int dcp_size = 1;
  int dcp_rank = 0;
  int interleave_size = 1;
  int page_size = 16;
  int num_pages = 0;          // physical pages on this rank
  int max_seqs = 0;           // sequence slots (rows of the block table)
  int max_pages_per_seq = 0;  // virtual pages per sequence: at most max_pages_per_seq*P*N tokens
  int num_kv_heads = 0;
  int head_dim_qk = 0;
  int head_dim_v = 0;
  bool v_in_k = false;
  DataType dtype = DataType::kF32;
  // kTiles16 is the layout the CPU kernels read fastest; it needs a separate V (v_in_k false)
  // and page_size % 16 == 0. kRows is the one the CUDA kernels read.
  KvPageFormat format = KvPageFormat::kRows;
};

class KvCache {
 public:
  // Rejects a non-positive size, dcp_rank outside [0, dcp_size), page_size not a multiple of
  // interleave_size, v_in_k with head_dim_v > head_dim_qk, and kTiles16 with v_in_k or with
  // page_size not a multiple of 16, naming the field and the value. Unavailable when the pools
  // cannot be mapped.
  static Expected<KvCache> Create(const KvCacheOptions& options);

  // A free sequence slot (length 0); OutOfRange when all max_seqs are in use.
  Expected<int> AddSequence();
  // Returns the sequence's pages to the free list.
  Status FreeSequence(int seq);
  // Appends n >= 0 tokens at positions [length(seq), length(seq) + n).
  Status Append(int seq, const float* k, const float* v, int n);

  int64_t length(int seq) const { return lengths_[seq]; }
  int64_t local_length(int seq) const {
    return layout_.LocalLength(options_.dcp_rank, length(seq));
  }
  // Local rows visible to a causal query at global position t of any sequence on this rank.
  int32_t VisibleRows(int64_t t) const {
    return static_cast<int32_t>(layout_.VisibleLocalRows(options_.dcp_rank, t));
  }
  const KvLayout& layout() const { return layout_; }
  const KvCacheOptions& options() const { return options_; }
  int free_pages() const { return static_cast<int>(free_.size()); }

  // The pages and block table [max_seqs, max_pages_per_seq] (unused entries 0).
  PagedKv View() const;

 private:
  KvCache(const KvCacheOptions& options, KvLayout layout, HostBuffer k, HostBuffer v);
  // Stores one token's K (or V when `value`), num_kv_heads rows of fp32, at (page, slot).
  void Store(const PagedKv& kv, bool value, int64_t page, int slot, const float* src);

  KvCacheOptions options_;
  KvLayout layout_;
  HostBuffer k_, v_;  // num_pages pages each, in dtype; v_ is empty with v_in_k
  std::vector<int32_t> block_table_;
  std::vector<int32_t> pages_used_;  // virtual pages allocated per sequence
  std::vector<int64_t> lengths_;
  std::vector<bool> in_use_;
  std::vector<int32_t> free_;  // a stack: the lowest page id on top
};

}  // namespace ctxpar
