// KvPool: the KV memory of one rank, shared by every request and every layer (the engine's memory
// pool; llama.cpp's "memory", SGLang's token-to-KV pool).
//
// Groups. The layers form groups (KvGroupSpec), each with its own pages, page allocator and
// block table; a model that declares none has one full-attention group of every layer, which is
// the pool as it always was. A group's retention is every position (window 0: full attention)
// or a sliding window of W positions: the token at position t sees the positions p with
// t - W < p <= t (W positions, itself included), as HF transformers and llama.cpp have it for
// Gemma 3. Group 0 must be a full-attention group: its tokens are SGLang's max_total_num_tokens
// (the accessors without a group argument are group 0's); a window group's are reported beside
// them (SGLang's swa_layer_tokens).
//
// Pages. A group holds num_pages physical pages (window_pages for a window group); page p of a
// group exists in every layer of the group, so one page id serves a sequence's tokens in all its
// layers. A request holds a slot: a block table row of max_pages_per_slot virtual pages in every
// group. With N = dcp_size ranks (1 for a group that DCP does not shard: every rank then stores
// every position), page size P and interleave size I, virtual page v of a sequence covers the
// P * N global positions [v*P*N, (v+1)*P*N); it is one physical page on every rank of the DCP
// group, holding that rank's local rows [v*P, (v+1)*P) of the sequence (kv_layout.h says which
// positions a rank owns and in which local row; P % I == 0). So a sequence of L tokens takes
// PagesFor(L) = ceil(L / (P*N)) pages of a full-attention group on each rank, and that group
// holds capacity_tokens() = num_pages * P * N tokens.
//
// Agreement without communication: the allocator is deterministic (the lowest free page first),
// and every rank of the group runs the same AcquireSlot / Reserve / Slide / AttachPage / HoldPage /
// DropPage / Truncate / ReleaseSlot calls in the same order (the engine broadcasts its plan), so
// slots and page ids agree on every rank.
//
// Sharing (the prefix cache). A page of a group counts its holders: the slots whose block table
// lists it and the prefix cache (HoldPage). Reserve hands out free pages with one reference;
// AttachPage makes a page in use the next virtual page of a slot as well; ReleaseSlot, Slide and
// DropPage each remove one reference, and a page is free again when none is left. DropPage only
// takes back a HoldPage reference. A shared page
// is only read: a slot that attaches cached pages writes from the first position after them.
//
// Sliding. A window group keeps its virtual pages at their absolute index: the block table entry
// of a page it gave back is 0 and no visible range (VisibleRange) reaches it. Slide(slot, pos0)
// says that the slot's next forward starts at position pos0: its rows see no position below
// pos0 - W + 1, so each window group gives back the slot's pages whose positions all lie below
// it. Reserve then allocates only the pages from the first one still held, so a window group
// holds at most the pages spanning the W - 1 positions before a chunk and the chunk itself.
//
// Agreement without communication: the allocators are deterministic (the lowest free page
// first), and every rank of the group runs the same AcquireSlot / Slide / Reserve / ReleaseSlot
// calls in the same order (the engine broadcasts its plan), so slots and page ids agree on every
// rank.
//
// Writes. Write(layer, slot, pos0, n, k, v) stores the K/V of positions [pos0, pos0 + n) in the
// layer's group; every rank passes the K/V of all n tokens (every rank can compute them) and
// stores only the positions it owns (all of them in a group DCP does not shard). K/V arrive in
// fp32 and are stored in `dtype` (bf16: rounded to nearest even; fp8: rounded to nearest even
// with a scale of 1 and saturated to the largest finite value, dtype.h).
// Shapes: k [n, num_kv_heads, head_dim_k], v [n, num_kv_heads, head_dim_v], fp32 row-major.
// GQA: v separate. Absorbed MLA: v_in_k, one KV head, V = the first head_dim_v elements of each K
// row, v is null.
//
// Storage. Per layer, K and V pools of its group's pages in `format` (attention.h: KvPageFormat,
// addressed through KvElementOffset), in buffers of the options' allocator (device.h; the host's
// by default: huge pages where the system allows it). The block tables stay in host memory.
// View(layer) is what PartialAttentionCpu / DcpAttention read; its block table is the layer's
// group's, and VisibleRange(layer, t) the local rows a query at position t sees in it.
//
// Thread safety: not thread-safe; a View stays valid until the next non-const call.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxpar/attention.h"
#include "ctxpar/device.h"
#include "ctxpar/dtype.h"
#include "ctxpar/kv_layout.h"
#include "ctxpar/status.h"

namespace ctxpar {

// A group of layers with one retention rule (see the top of this file).
struct KvGroupSpec {
  std::vector<int> layers;  // model layer indices in [0, num_layers); each layer in one group
  int window = 0;           // 0: every position (full attention); W >= 1: a sliding window of W
  // false: every DCP rank stores every position of the group. Its attention still runs through
  // DcpAttention (each rank's partial is the whole window's; the merge of equal states is that
  // state): correct, but no cheaper. docs/dcp.md measures why the models shard their windows.
  bool dcp_sharded = true;
};

struct KvPoolOptions {
  int num_layers = 0;
  int num_kv_heads = 0;  // KV heads this rank stores per layer
  int head_dim_k = 0;
  int head_dim_v = 0;
  bool v_in_k = false;
  DataType dtype = DataType::kF32;  // kF32, kBF16, kF8E4M3 or kF8E5M2
  // kTiles16 (the CPU kernels' fastest) needs v_in_k false and page_size % 16 == 0.
  KvPageFormat format = KvPageFormat::kRows;
  int page_size = 16;
  int dcp_size = 1;
  int dcp_rank = 0;
  int interleave_size = 1;
  int64_t num_pages = 0;       // physical pages of each full-attention group on this rank
  int64_t window_pages = 0;    // physical pages of each window group on this rank
  int max_slots = 0;           // requests that can hold KV at once
  int max_pages_per_slot = 0;  // virtual pages per request: at most this * P * N tokens
  // Empty: one full-attention group of every layer, sharded by DCP. Otherwise every layer is in
  // exactly one group, and groups[0] is a full-attention group.
  std::vector<KvGroupSpec> groups = {};
  // false: the pool only keeps its accounts (slots, pages, block table) and maps no K/V memory,
  // so that the planner can run the scheduler over a GPU-sized pool; Write is then
  // FailedPrecondition and View's k and v are null.
  bool map_storage = true;
  // Where the K/V pages live (not owned, outlives the pool): the compute seam the model runs on
  // (docs/compute.md); null: HostAllocator().
  const DeviceAllocator* allocator = nullptr;
  // Back every page of K/V memory at Create (Populate, device.h) instead of when a request first
  // writes it; Create then fails with Unavailable where the system cannot give the memory.
  bool populate = false;
};

class KvPool {
 public:
  // Bytes one physical page of group `group` takes on this rank over the group's layers, K and V
  // (with no groups: over every layer). Options must be valid.
  static int64_t PageBytes(const KvPoolOptions& options, int group = 0);
  // The groups `options` declares, or the one full group of every layer when it declares none.
  static std::vector<KvGroupSpec> GroupsOf(const KvPoolOptions& options);
  // Tokens group g of a pool with these options holds (capacity_tokens(g)).
  static int64_t GroupTokens(const KvPoolOptions& options, int g);
  // The first window group, or -1 when every group keeps every position.
  static int FirstWindowGroup(const KvPoolOptions& options);
  // Validates the options (naming the field, its value and the rule) and maps the pools.
  // Unavailable when the memory cannot be mapped.
  static Expected<KvPool> Create(const KvPoolOptions& options);

  // A free slot holding no page; OutOfRange when all max_slots are in use.
  Expected<int32_t> AcquireSlot();
  // Returns the slot and its reference to each of its pages, in every group.
  Status ReleaseSlot(int32_t slot);
  // Appends `page` of group g, which must be in use, as the next virtual page of `slot` in that
  // group (one more reference). InvalidArgument for a page not in use; OutOfRange beyond
  // max_pages_per_slot.
  Status AttachPage(int32_t slot, int32_t page, int g = 0);
  // One more / one less reference to a page of group g in use (the prefix cache's);
  // InvalidArgument for a page not in use. The last reference dropped frees the page.
  Status HoldPage(int32_t page, int g = 0);
  Status DropPage(int32_t page, int g = 0);
  // Makes `slot` able to hold positions [0, length) in every full-attention group, and in every
  // window group those from its first page still held (see Slide): allocates the virtual pages
  // it lacks. All or nothing: OutOfRange (nothing allocated) when the free pages of a group do
  // not suffice or length needs more than max_pages_per_slot pages. A smaller length than the
  // slot holds keeps its pages.
  Status Reserve(int32_t slot, int64_t length);
  // The slot's next forward starts at position pos0: each window group of W gives back the
  // slot's pages whose positions all lie below pos0 - W + 1. Positions only move forward: a page
  // given back is never held again by this slot (ReleaseSlot resets it). No-op without window
  // groups.
  Status Slide(int32_t slot, int64_t pos0);
  // Gives back, in every group, the virtual pages of `slot` past those that positions
  // [0, length) span (speculative decoding: the KV of rejected draft tokens). The pages kept are
  // unchanged, and a window group never gives back below its first held page. length >= 0.
  Status Truncate(int32_t slot, int64_t length);
  // Stores positions [pos0, pos0 + n) of layer `layer` (see the top of this file); the slot must
  // hold them (Reserve, and not given back by Slide). Positions need not be contiguous with what
  // was written before.
  Status Write(int layer, int32_t slot, int64_t pos0, int32_t n, const float* k, const float* v);

  int num_groups() const { return static_cast<int>(groups_.size()); }
  const KvGroupSpec& group(int g) const { return groups_[g].spec; }
  int group_of_layer(int layer) const { return layer_group_[layer]; }
  // Pages a sequence of `length` tokens spans on each rank in group g: ceil(length / (P * N_g)).
  int64_t PagesFor(int64_t length, int g = 0) const;
  // Pages group g must add so that `slot` (-1: a new slot, holding nothing) can run positions
  // [pos0, length) after Slide(slot, pos0): what Reserve(slot, length) would then allocate.
  int64_t PagesNeeded(int g, int32_t slot, int64_t pos0, int64_t length) const;
  // Pages of group g that Slide(slot, pos0) would give back (0 in a full-attention group).
  int64_t PagesFreed(int g, int32_t slot, int64_t pos0) const;
  // The most pages group g holds for a sequence that grows to `length` tokens in forwards of at
  // most `chunk` new tokens each: PagesFor(length) in a full group; in a window group of W, at
  // most the pages that W - 1 + chunk consecutive positions can span.
  int64_t PeakPages(int g, int64_t length, int64_t chunk) const;
  int64_t num_pages(int g = 0) const { return groups_[g].num_pages; }
  int64_t free_pages(int g = 0) const { return static_cast<int64_t>(groups_[g].free.size()); }
  // Pages `slot` holds in group g now (a window group's given-back pages not counted).
  int32_t slot_pages(int32_t slot, int g = 0) const {
    return groups_[g].used[slot] - groups_[g].first[slot];
  }
  // The page id of virtual page v of `slot` in group g (0 for a page given back by Slide).
  int32_t SlotPage(int32_t slot, int32_t v, int g = 0) const {
    return groups_[g].block_table[static_cast<size_t>(slot) * options_.max_pages_per_slot + v];
  }
  // Holders of `page` in group g (0: free).
  int32_t page_refs(int32_t page, int g = 0) const { return groups_[g].refs[page]; }
  // Whether every holder of `page` in group g is a HoldPage (the prefix cache's): dropping those
  // frees it. cache_only_pages(g) counts such pages.
  bool cache_only(int32_t page, int g = 0) const {
    return groups_[g].refs[page] > 0 && groups_[g].refs[page] == groups_[g].holds[page];
  }
  int64_t cache_only_pages(int g = 0) const { return groups_[g].cache_only; }
  // The first virtual page `slot` still holds in group g (those below were given back by Slide).
  int32_t first_page(int32_t slot, int g = 0) const { return groups_[g].first[slot]; }
  // The first virtual page of `per_page` positions that a window of W keeps for a forward
  // starting at pos0 (the page of position pos0 - W + 1).
  static int64_t FirstKept(int64_t pos0, int64_t window, int64_t per_page);
  int32_t free_slots() const;
  // Tokens group g holds (group 0: SGLang's max_total_num_tokens before any cap; a window
  // group: its swa_layer_tokens).
  int64_t capacity_tokens(int g = 0) const;
  // Local rows of this rank that a causal query at global position t sees in group 0.
  int32_t VisibleRows(int64_t t) const {
    return static_cast<int32_t>(layout_.VisibleLocalRows(options_.dcp_rank, t));
  }
  // Local rows of this rank that a query at global position t sees in layer `layer`'s group: the
  // positions (t - W, t] of a window group of W, [0, t] of a full one, as local rows. A full
  // group's layer may still attend through a window of its own (`window` > 0: a model whose every
  // layer has one keeps them in group 0, which retains every position): (t - window, t].
  LocalRange VisibleRange(int layer, int64_t t, int window = 0) const;
  const KvLayout& layout() const { return layout_; }
  const KvPoolOptions& options() const { return options_; }
  // The pages of `layer` and the block table [max_slots, max_pages_per_slot] of its group
  // (entries of pages not held are 0).
  PagedKv View(int layer) const;

 private:
  // One group's allocator. A slot holds its virtual pages [first, used): those below first were
  // given back by Slide.
  struct Group {
    KvGroupSpec spec;
    KvLayout layout;
    int64_t num_pages = 0;
    std::vector<int32_t> block_table = {};       // [max_slots, max_pages_per_slot]
    std::vector<int32_t> first = {}, used = {};  // per slot
    std::vector<int32_t> free = {};              // a min-heap of free page ids
    std::vector<int32_t> refs = {};              // holders of each page
    std::vector<int32_t> holds = {};             // of them, HoldPage's
    int64_t cache_only = 0;                      // pages whose holders are all HoldPage's
  };

  KvPool(const KvPoolOptions& options, KvLayout layout, std::vector<Group> groups,
         std::vector<int> layer_group, std::vector<DeviceBuffer> k, std::vector<DeviceBuffer> v);
  Status CheckPage(const char* what, int32_t page, int g) const;
  // Adds to a page's holders and HoldPage holders, keeping cache_only; frees it at 0 holders.
  static void Count(Group& g, int32_t page, int32_t refs, int32_t holds);
  static void Unref(Group& g, int32_t page);
  void Store(const PagedKv& kv, void* base, bool value, int64_t page, int slot, const float* src);
  Status CheckSlot(const char* what, int32_t slot) const;

  KvPoolOptions options_;
  KvLayout layout_;  // group 0's (the DCP layout)
  std::vector<Group> groups_;
  std::vector<int> layer_group_;
  std::vector<DeviceBuffer> k_, v_;  // per layer; v_ holds empty buffers with v_in_k
  std::vector<bool> in_use_;
  // KvElementOffset of (page 0, slot 0, head 0, d) for K and V: the part that depends on d.
  std::vector<int64_t> k_d_offset_, v_d_offset_;
};

}  // namespace ctxpar
