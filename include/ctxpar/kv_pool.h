// KvPool: the KV memory of one rank, shared by every request and every layer (the engine's memory
// pool; llama.cpp's "memory", SGLang's token-to-KV pool).
//
// Pages. The pool holds num_pages physical pages; page p exists in every layer, so one page id
// serves a sequence's tokens in all layers. A request holds a slot: a block table row of
// max_pages_per_slot virtual pages. With N = dcp_size ranks, page size P and interleave size I,
// virtual page v of a sequence covers the P * N global positions [v*P*N, (v+1)*P*N); it is one
// physical page on every rank of the DCP group, holding that rank's local rows [v*P, (v+1)*P) of
// the sequence (kv_layout.h says which positions a rank owns and in which local row; P % I == 0).
// So a sequence of L tokens takes PagesFor(L) = ceil(L / (P*N)) pages on each rank, and the pool
// holds capacity_tokens() = num_pages * P * N tokens.
//
// Agreement without communication: the allocator is deterministic (the lowest free page first),
// and every rank of the group runs the same AcquireSlot / Reserve / ReleaseSlot calls in the same
// order (the engine broadcasts its plan), so slots and page ids agree on every rank.
//
// Writes. Write(layer, slot, pos0, n, k, v) stores the K/V of positions [pos0, pos0 + n); every
// rank passes the K/V of all n tokens (every rank can compute them) and stores only the positions
// it owns. K/V arrive in fp32 and are stored in `dtype` (bf16: rounded to nearest even).
// Shapes: k [n, num_kv_heads, head_dim_k], v [n, num_kv_heads, head_dim_v], fp32 row-major.
// GQA: v separate. Absorbed MLA: v_in_k, one KV head, V = the first head_dim_v elements of each K
// row, v is null.
//
// Storage. Per layer, K and V pools of num_pages pages in `format` (attention.h: KvPageFormat,
// addressed through KvElementOffset), in HostBuffers (huge pages where the system allows it).
// View(layer) is what PartialAttentionCpu / DcpAttention read; its block table is the pool's.
//
// Thread safety: not thread-safe; a View stays valid until the next non-const call.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxpar/attention.h"
#include "ctxpar/dtype.h"
#include "ctxpar/host_buffer.h"
#include "ctxpar/kv_layout.h"
#include "ctxpar/status.h"

namespace ctxpar {

struct KvPoolOptions {
  int num_layers = 0;
  int num_kv_heads = 0;  // KV heads this rank stores per layer
  int head_dim_k = 0;
  int head_dim_v = 0;
  bool v_in_k = false;
  DataType dtype = DataType::kF32;  // kF32 or kBF16
  // kTiles16 (the CPU kernels' fastest) needs v_in_k false and page_size % 16 == 0.
  KvPageFormat format = KvPageFormat::kRows;
  int page_size = 16;
  int dcp_size = 1;
  int dcp_rank = 0;
  int interleave_size = 1;
  int64_t num_pages = 0;       // physical pages on this rank, each in every layer
  int max_slots = 0;           // requests that can hold KV at once
  int max_pages_per_slot = 0;  // virtual pages per request: at most this * P * N tokens
  // false: the pool only keeps its accounts (slots, pages, block table) and maps no K/V memory,
  // so that the planner can run the scheduler over a GPU-sized pool; Write is then
  // FailedPrecondition and View's k and v are null.
  bool map_storage = true;
};

class KvPool {
 public:
  // Bytes one physical page takes on this rank over all layers, K and V. Options must be valid.
  static int64_t PageBytes(const KvPoolOptions& options);
  // Validates the options (naming the field, its value and the rule) and maps the pools.
  // Unavailable when the memory cannot be mapped.
  static Expected<KvPool> Create(const KvPoolOptions& options);

  // A free slot holding no page; OutOfRange when all max_slots are in use.
  Expected<int32_t> AcquireSlot();
  // Returns the slot and all its pages.
  Status ReleaseSlot(int32_t slot);
  // Makes `slot` able to hold positions [0, length): allocates the virtual pages it lacks. All or
  // nothing: OutOfRange (nothing allocated) when the free pages do not suffice or length needs
  // more than max_pages_per_slot pages. A smaller length than the slot holds keeps its pages.
  Status Reserve(int32_t slot, int64_t length);
  // Stores positions [pos0, pos0 + n) of layer `layer` (see the top of this file); the slot must
  // hold them (Reserve). Positions need not be contiguous with what was written before.
  Status Write(int layer, int32_t slot, int64_t pos0, int32_t n, const float* k, const float* v);

  // Pages a sequence of `length` tokens needs on each rank.
  int64_t PagesFor(int64_t length) const;
  int64_t num_pages() const { return options_.num_pages; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int32_t slot_pages(int32_t slot) const { return pages_used_[slot]; }
  int32_t free_slots() const;
  // Tokens the whole pool holds (SGLang's max_total_num_tokens before any cap).
  int64_t capacity_tokens() const {
    return options_.num_pages * options_.page_size * options_.dcp_size;
  }
  // Local rows of this rank that a causal query at global position t sees.
  int32_t VisibleRows(int64_t t) const {
    return static_cast<int32_t>(layout_.VisibleLocalRows(options_.dcp_rank, t));
  }
  const KvLayout& layout() const { return layout_; }
  const KvPoolOptions& options() const { return options_; }
  // The pages of `layer` and the block table [max_slots, max_pages_per_slot] (unused entries 0).
  PagedKv View(int layer) const;

 private:
  KvPool(const KvPoolOptions& options, KvLayout layout, std::vector<HostBuffer> k,
         std::vector<HostBuffer> v);
  void Store(const PagedKv& kv, void* base, bool value, int64_t page, int slot, const float* src);

  KvPoolOptions options_;
  KvLayout layout_;
  std::vector<HostBuffer> k_, v_;  // per layer; v_ holds empty buffers with v_in_k
  std::vector<int32_t> block_table_;
  std::vector<int32_t> pages_used_;  // virtual pages allocated per slot
  std::vector<bool> in_use_;
  std::vector<int32_t> free_;  // a min-heap of free page ids
  // KvElementOffset of (page 0, slot 0, head 0, d) for K and V: the part that depends on d.
  std::vector<int64_t> k_d_offset_, v_d_offset_;
};

}  // namespace ctxpar
