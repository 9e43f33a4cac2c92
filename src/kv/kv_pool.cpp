#include "ctxpar/kv_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

namespace ctxpar {

namespace {

Status Positive(std::string_view field, int64_t value) {
  if (value >= 1) return Status::Ok();
  return InvalidArgument(fmt::format("KvPool: {} must be >= 1, got {}={}", field, field, value));
}

Status CheckOptions(const KvPoolOptions& o) {
  CTXPAR_RETURN_IF_ERROR(Positive("num_layers", o.num_layers));
  CTXPAR_RETURN_IF_ERROR(Positive("num_kv_heads", o.num_kv_heads));
  CTXPAR_RETURN_IF_ERROR(Positive("head_dim_k", o.head_dim_k));
  CTXPAR_RETURN_IF_ERROR(Positive("head_dim_v", o.head_dim_v));
  CTXPAR_RETURN_IF_ERROR(Positive("page_size", o.page_size));
  CTXPAR_RETURN_IF_ERROR(Positive("num_pages", o.num_pages));
  CTXPAR_RETURN_IF_ERROR(Positive("max_slots", o.max_slots));
  CTXPAR_RETURN_IF_ERROR(Positive("max_pages_per_slot", o.max_pages_per_slot));
  if (o.num_pages > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument(fmt::format(
        "KvPool: num_pages must fit a block-table entry (< 2^31), got {}", o.num_pages));
  }
  if (o.dcp_rank < 0 || o.dcp_rank >= o.dcp_size) {
    return InvalidArgument(fmt::format(
        "KvPool: dcp_rank must be in [0, dcp_size={}), got dcp_rank={}", o.dcp_size, o.dcp_rank));
  }
  if (o.page_size % o.interleave_size != 0) {
    return InvalidArgument(fmt::format(
        "KvPool: page_size must be a multiple of interleave_size so that a virtual page is one "
        "physical page on every rank, got page_size={} and interleave_size={}",
        o.page_size, o.interleave_size));
  }
  if (o.dtype != DataType::kF32 && o.dtype != DataType::kBF16 && o.dtype != DataType::kF8E4M3 &&
      o.dtype != DataType::kF8E5M2) {
    return InvalidArgument(fmt::format(
        "KvPool: dtype must be f32, bf16, f8_e4m3 or f8_e5m2, got {}", DataTypeName(o.dtype)));
  }
  if (o.v_in_k && o.head_dim_v > o.head_dim_k) {
    return InvalidArgument(fmt::format(
        "KvPool: with v_in_k, V is a prefix of K and head_dim_v must be <= head_dim_k, got "
        "head_dim_v={} and head_dim_k={}",
        o.head_dim_v, o.head_dim_k));
  }
  if (o.format == KvPageFormat::kTiles16 && o.v_in_k) {
    return InvalidArgument(
        "KvPool: format=kTiles16 tiles K and V separately and needs v_in_k=false, got "
        "v_in_k=true");
  }
  if (o.format == KvPageFormat::kTiles16 && o.page_size % 16 != 0) {
    return InvalidArgument(fmt::format(
        "KvPool: format=kTiles16 needs page_size to be a multiple of 16 (a tile holds 16 slots), "
        "got page_size={}",
        o.page_size));
  }
  return Status::Ok();
}

Status CheckGroups(const KvPoolOptions& o) {
  if (o.groups.empty()) return Status::Ok();
  std::vector<int> seen(o.num_layers, -1);
  bool window = false;
  for (size_t g = 0; g < o.groups.size(); ++g) {
    const KvGroupSpec& spec = o.groups[g];
    if (spec.window < 0) {
      return InvalidArgument(
          fmt::format("KvPool: groups[{}].window must be >= 0 (0: full attention), got window={}",
                      g, spec.window));
    }
    if (spec.layers.empty()) {
      return InvalidArgument(fmt::format("KvPool: groups[{}] has no layer", g));
    }
    window = window || spec.window > 0;
    for (int layer : spec.layers) {
      if (layer < 0 || layer >= o.num_layers) {
        return InvalidArgument(
            fmt::format("KvPool: groups[{}] names layer {}, outside [0, num_layers={})", g, layer,
                        o.num_layers));
      }
      if (seen[layer] >= 0) {
        return InvalidArgument(
            fmt::format("KvPool: layer {} is in groups[{}] and groups[{}]", layer, seen[layer], g));
      }
      seen[layer] = static_cast<int>(g);
    }
  }
  for (int layer = 0; layer < o.num_layers; ++layer) {
    if (seen[layer] < 0) {
      return InvalidArgument(fmt::format("KvPool: layer {} is in no group", layer));
    }
  }
  if (o.groups[0].window != 0) {
    return InvalidArgument(fmt::format(
        "KvPool: groups[0] must be a full-attention group (its tokens are max_total_num_tokens), "
        "got window={}",
        o.groups[0].window));
  }
  if (window) CTXPAR_RETURN_IF_ERROR(Positive("window_pages", o.window_pages));
  if (o.window_pages > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument(fmt::format(
        "KvPool: window_pages must fit a block-table entry (< 2^31), got {}", o.window_pages));
  }
  return Status::Ok();
}

// Elements of one page of one layer: K, and V unless it lives in K.
int64_t PageElements(const KvPoolOptions& o, bool value) {
  return int64_t{o.page_size} * o.num_kv_heads * (value ? o.head_dim_v : o.head_dim_k);
}

void Free(std::vector<int32_t>& heap, int32_t page) {
  heap.push_back(page);
  std::push_heap(heap.begin(), heap.end(), std::greater<>());
}

// The first virtual page a window group keeps for a forward from pos0: the page of position
// pos0 - W + 1, the first that row pos0 sees.
}  // namespace

int64_t KvPool::FirstKept(int64_t pos0, int64_t window, int64_t per_page) {
  return std::max<int64_t>(0, pos0 - window + 1) / per_page;
}

std::vector<KvGroupSpec> KvPool::GroupsOf(const KvPoolOptions& o) {
  if (!o.groups.empty()) return o.groups;
  KvGroupSpec all;
  for (int l = 0; l < o.num_layers; ++l) all.layers.push_back(l);
  return {all};
}

int64_t KvPool::PageBytes(const KvPoolOptions& o, int group) {
  const int64_t elements = PageElements(o, false) + (o.v_in_k ? 0 : PageElements(o, true));
  const int64_t layers = o.groups.empty() ? o.num_layers : int64_t(o.groups[group].layers.size());
  return elements * static_cast<int64_t>(DataTypeSize(o.dtype)) * layers;
}

Expected<KvPool> KvPool::Create(const KvPoolOptions& o) {
  CTXPAR_RETURN_IF_ERROR(CheckOptions(o));
  CTXPAR_RETURN_IF_ERROR(CheckGroups(o));
  CTXPAR_ASSIGN_OR_RETURN(KvLayout layout, KvLayout::Create(o.dcp_size, o.interleave_size));
  std::vector<Group> groups;
  std::vector<int> layer_group(o.num_layers, 0);
  for (const KvGroupSpec& spec : GroupsOf(o)) {
    CTXPAR_ASSIGN_OR_RETURN(KvLayout group_layout,
                            spec.dcp_sharded ? Expected<KvLayout>(layout) : KvLayout::Create(1));
    Group g{.spec = spec, .layout = group_layout};
    g.num_pages = spec.window > 0 ? o.window_pages : o.num_pages;
    g.block_table.assign(static_cast<size_t>(o.max_slots) * o.max_pages_per_slot, 0);
    g.first.assign(o.max_slots, 0);
    g.used.assign(o.max_slots, 0);
    // Ascending ids form a min-heap: the lowest free page is handed out first, on every rank.
    for (int64_t p = 0; p < g.num_pages; ++p) g.free.push_back(static_cast<int32_t>(p));
    g.refs.assign(g.num_pages, 0);
    g.holds.assign(g.num_pages, 0);
    for (int l : spec.layers) layer_group[l] = static_cast<int>(groups.size());
    groups.push_back(std::move(g));
  }
  const size_t element = DataTypeSize(o.dtype);
  const DeviceAllocator& memory = o.allocator != nullptr ? *o.allocator : HostAllocator();
  std::vector<DeviceBuffer> k, v;
  for (int l = 0; o.map_storage && l < o.num_layers; ++l) {
    const int64_t pages = groups[layer_group[l]].num_pages;
    CTXPAR_ASSIGN_OR_RETURN(DeviceBuffer kb,
                            memory.Allocate(pages * PageElements(o, false) * element));
    DeviceBuffer vb;
    if (!o.v_in_k) {
      CTXPAR_ASSIGN_OR_RETURN(vb, memory.Allocate(pages * PageElements(o, true) * element));
    }
    if (o.populate) {
      CTXPAR_RETURN_IF_ERROR(Populate(kb));
      CTXPAR_RETURN_IF_ERROR(Populate(vb));
    }
    k.push_back(std::move(kb));
    v.push_back(std::move(vb));
  }
  return KvPool(o, layout, std::move(groups), std::move(layer_group), std::move(k), std::move(v));
}

KvPool::KvPool(const KvPoolOptions& o, KvLayout layout, std::vector<Group> groups,
               std::vector<int> layer_group, std::vector<DeviceBuffer> k,
               std::vector<DeviceBuffer> v)
    : options_(o),
      layout_(layout),
      groups_(std::move(groups)),
      layer_group_(std::move(layer_group)),
      k_(std::move(k)),
      v_(std::move(v)),
      in_use_(o.max_slots, false) {
  if (!o.map_storage) return;
  const PagedKv kv = View(0);
  for (int d = 0; d < o.head_dim_k; ++d)
    k_d_offset_.push_back(KvElementOffset(kv, false, 0, 0, 0, d));
  for (int d = 0; d < o.head_dim_v; ++d)
    v_d_offset_.push_back(KvElementOffset(kv, true, 0, 0, 0, d));
}

Status KvPool::CheckSlot(const char* what, int32_t slot) const {
  if (slot >= 0 && slot < options_.max_slots && in_use_[slot]) return Status::Ok();
  return InvalidArgument(fmt::format("KvPool::{}: slot {} is not in use", what, slot));
}

Expected<int32_t> KvPool::AcquireSlot() {
  for (int32_t s = 0; s < options_.max_slots; ++s) {
    if (!in_use_[s]) {
      in_use_[s] = true;
      return s;
    }
  }
  return OutOfRange(
      fmt::format("KvPool: all max_slots={} request slots are in use", options_.max_slots));
}

Status KvPool::ReleaseSlot(int32_t slot) {
  CTXPAR_RETURN_IF_ERROR(CheckSlot("ReleaseSlot", slot));
  for (Group& g : groups_) {
    int32_t* table = g.block_table.data() + static_cast<size_t>(slot) * options_.max_pages_per_slot;
    for (int32_t v = g.first[slot]; v < g.used[slot]; ++v) Unref(g, table[v]);
    std::fill_n(table, options_.max_pages_per_slot, 0);
    g.first[slot] = g.used[slot] = 0;
  }
  in_use_[slot] = false;
  return Status::Ok();
}

void KvPool::Count(Group& g, int32_t page, int32_t refs, int32_t holds) {
  auto cache_only = [&] { return g.refs[page] > 0 && g.refs[page] == g.holds[page]; };
  const bool was = cache_only();
  g.refs[page] += refs;
  g.holds[page] += holds;
  g.cache_only += int64_t{cache_only()} - int64_t{was};
  if (g.refs[page] == 0) Free(g.free, page);
}

void KvPool::Unref(Group& g, int32_t page) { Count(g, page, -1, 0); }

Status KvPool::CheckPage(const char* what, int32_t page, int g) const {
  if (g < 0 || g >= num_groups()) {
    return InvalidArgument(fmt::format("KvPool::{}: group {} of {}", what, g, num_groups()));
  }
  if (page >= 0 && page < groups_[g].num_pages && groups_[g].refs[page] > 0) return Status::Ok();
  return InvalidArgument(fmt::format("KvPool::{}: page {} is not in use", what, page));
}

Status KvPool::AttachPage(int32_t slot, int32_t page, int g) {
  CTXPAR_RETURN_IF_ERROR(CheckSlot("AttachPage", slot));
  CTXPAR_RETURN_IF_ERROR(CheckPage("AttachPage", page, g));
  Group& group = groups_[g];
  if (group.used[slot] >= options_.max_pages_per_slot) {
    return OutOfRange(fmt::format("KvPool::AttachPage: slot {} holds max_pages_per_slot={} pages",
                                  slot, options_.max_pages_per_slot));
  }
  group.block_table[static_cast<size_t>(slot) * options_.max_pages_per_slot + group.used[slot]++] =
      page;
  Count(group, page, 1, 0);
  return Status::Ok();
}

Status KvPool::HoldPage(int32_t page, int g) {
  CTXPAR_RETURN_IF_ERROR(CheckPage("HoldPage", page, g));
  Count(groups_[g], page, 1, 1);
  return Status::Ok();
}

Status KvPool::DropPage(int32_t page, int g) {
  CTXPAR_RETURN_IF_ERROR(CheckPage("DropPage", page, g));
  if (groups_[g].holds[page] == 0) {
    return InvalidArgument(
        fmt::format("KvPool::DropPage: page {} of group {} is not held", page, g));
  }
  Count(groups_[g], page, -1, -1);
  return Status::Ok();
}

int64_t KvPool::PagesFor(int64_t length, int g) const {
  const int64_t per_page = int64_t{options_.page_size} * groups_[g].layout.dcp_size();
  return length <= 0 ? 0 : (length + per_page - 1) / per_page;
}

int64_t KvPool::GroupTokens(const KvPoolOptions& o, int g) {
  const KvGroupSpec spec = GroupsOf(o)[g];
  return (spec.window > 0 ? o.window_pages : o.num_pages) * o.page_size *
         (spec.dcp_sharded ? o.dcp_size : 1);
}

int KvPool::FirstWindowGroup(const KvPoolOptions& o) {
  for (size_t g = 0; g < o.groups.size(); ++g) {
    if (o.groups[g].window > 0) return static_cast<int>(g);
  }
  return -1;
}

int64_t KvPool::capacity_tokens(int g) const { return GroupTokens(options_, g); }

int64_t KvPool::PagesNeeded(int g, int32_t slot, int64_t pos0, int64_t length) const {
  const Group& group = groups_[g];
  int64_t from = slot < 0 ? 0 : group.used[slot];
  if (group.spec.window > 0) {
    const int64_t per_page = int64_t{options_.page_size} * group.layout.dcp_size();
    from = std::max(from, FirstKept(pos0, group.spec.window, per_page));
  }
  return std::max<int64_t>(0, PagesFor(length, g) - from);
}

int64_t KvPool::PagesFreed(int g, int32_t slot, int64_t pos0) const {
  const Group& group = groups_[g];
  if (group.spec.window == 0 || slot < 0) return 0;
  const int64_t per_page = int64_t{options_.page_size} * group.layout.dcp_size();
  const int64_t keep =
      std::min<int64_t>(FirstKept(pos0, group.spec.window, per_page), group.used[slot]);
  return std::max<int64_t>(0, keep - group.first[slot]);
}

int64_t KvPool::PeakPages(int g, int64_t length, int64_t chunk) const {
  const int64_t all = PagesFor(length, g);
  const int window = groups_[g].spec.window;
  if (window == 0) return all;
  // Any `span` consecutive positions lie in at most ceil((span - 1) / per_page) + 1 pages.
  const int64_t per_page = int64_t{options_.page_size} * groups_[g].layout.dcp_size();
  const int64_t span = window - 1 + std::max<int64_t>(1, chunk);
  return std::min(all, (span + per_page - 2) / per_page + 1);
}

int32_t KvPool::free_slots() const {
  return static_cast<int32_t>(std::count(in_use_.begin(), in_use_.end(), false));
}

Status KvPool::Reserve(int32_t slot, int64_t length) {
  CTXPAR_RETURN_IF_ERROR(CheckSlot("Reserve", slot));
  for (int g = 0; g < num_groups(); ++g) {
    const int64_t needed = PagesFor(length, g);
    if (needed > options_.max_pages_per_slot) {
      return OutOfRange(fmt::format(
          "KvPool::Reserve: {} tokens need {} pages of {} tokens, more than max_pages_per_slot={}",
          length, needed, int64_t{options_.page_size} * groups_[g].layout.dcp_size(),
          options_.max_pages_per_slot));
    }
    const int64_t missing = needed - groups_[g].used[slot];
    if (missing > free_pages(g)) {
      return OutOfRange(
          fmt::format("KvPool::Reserve: slot {} needs {} more pages{}, {} of {} are free", slot,
                      missing, num_groups() > 1 ? fmt::format(" in group {}", g) : std::string(),
                      free_pages(g), groups_[g].num_pages));
    }
  }
  for (Group& g : groups_) {
    const int64_t needed = PagesFor(length, static_cast<int>(&g - groups_.data()));
    int32_t* table = g.block_table.data() + static_cast<size_t>(slot) * options_.max_pages_per_slot;
    for (; g.used[slot] < needed; ++g.used[slot]) {
      std::pop_heap(g.free.begin(), g.free.end(), std::greater<>());
      table[g.used[slot]] = g.free.back();
      g.refs[g.free.back()] = 1;
      g.free.pop_back();
    }
  }
  return Status::Ok();
}

Status KvPool::Slide(int32_t slot, int64_t pos0) {
  CTXPAR_RETURN_IF_ERROR(CheckSlot("Slide", slot));
  if (pos0 < 0) return InvalidArgument(fmt::format("KvPool::Slide: pos0={} must be >= 0", pos0));
  for (Group& g : groups_) {
    if (g.spec.window == 0) continue;
    const int64_t per_page = int64_t{options_.page_size} * g.layout.dcp_size();
    const auto keep = static_cast<int32_t>(
        std::min<int64_t>(FirstKept(pos0, g.spec.window, per_page), options_.max_pages_per_slot));
    int32_t* table = g.block_table.data() + static_cast<size_t>(slot) * options_.max_pages_per_slot;
    for (int32_t v = g.first[slot]; v < std::min(keep, g.used[slot]); ++v) {
      Unref(g, table[v]);
      table[v] = 0;
    }
    g.first[slot] = std::max(g.first[slot], keep);
    g.used[slot] = std::max(g.used[slot], g.first[slot]);
  }
  return Status::Ok();
}

Status KvPool::Truncate(int32_t slot, int64_t length) {
  CTXPAR_RETURN_IF_ERROR(CheckSlot("Truncate", slot));
  if (length < 0) {
    return InvalidArgument(fmt::format("KvPool::Truncate: length={} must be >= 0", length));
  }
  for (int gi = 0; gi < num_groups(); ++gi) {
    Group& g = groups_[gi];
    const auto keep = static_cast<int32_t>(std::max<int64_t>(PagesFor(length, gi), g.first[slot]));
    int32_t* table = g.block_table.data() + static_cast<size_t>(slot) * options_.max_pages_per_slot;
    for (int32_t v = keep; v < g.used[slot]; ++v) {
      Unref(g, table[v]);
      table[v] = 0;
    }
    g.used[slot] = std::min(g.used[slot], keep);
  }
  return Status::Ok();
}

// Element by element, as a kTiles16 row is not contiguous. KvElementOffset stays the one
// statement of the layout: in every format it is the offset of (page, slot, head, d = 0) plus that
// of d alone (page_format_test checks it), so one call per head and the d part, from a table,
// place a row.
void KvPool::Store(const PagedKv& kv, void* base, bool value, int64_t page, int slot,
                   const float* src) {
  const int dim = value ? options_.head_dim_v : options_.head_dim_k;
  const std::vector<int64_t>& d_at = value ? v_d_offset_ : k_d_offset_;
  for (int h = 0; h < options_.num_kv_heads; ++h) {
    const int64_t at = KvElementOffset(kv, value, page, slot, h, 0);
    const float* x = src + static_cast<size_t>(h) * dim;
    if (options_.dtype == DataType::kF32) {
      float* out = static_cast<float*>(base) + at;
      for (int d = 0; d < dim; ++d) out[d_at[d]] = x[d];
    } else if (options_.dtype == DataType::kBF16) {
      uint16_t* out = static_cast<uint16_t*>(base) + at;
      for (int d = 0; d < dim; ++d) out[d_at[d]] = FloatToBf16(x[d]);
    } else {
      // fp8 with a per-tensor scale of 1 (our GGUFs carry no k_scale / v_scale).
      uint8_t* out = static_cast<uint8_t*>(base) + at;
      const bool e4m3 = options_.dtype == DataType::kF8E4M3;
      for (int d = 0; d < dim; ++d)
        out[d_at[d]] = e4m3 ? FloatToFp8E4M3(x[d]) : FloatToFp8E5M2(x[d]);
    }
  }
}

Status KvPool::Write(int layer, int32_t slot, int64_t pos0, int32_t n, const float* k,
                     const float* v) {
  const KvPoolOptions& o = options_;
  if (!o.map_storage) return FailedPrecondition("KvPool::Write: the pool maps no K/V storage");
  if (layer < 0 || layer >= o.num_layers) {
    return InvalidArgument(
        fmt::format("KvPool::Write: layer {} is outside [0, {})", layer, o.num_layers));
  }
  CTXPAR_RETURN_IF_ERROR(CheckSlot("Write", slot));
  if (n < 0 || pos0 < 0) {
    return InvalidArgument(fmt::format("KvPool::Write: pos0={} and n={} must be >= 0", pos0, n));
  }
  if (n > 0 && (k == nullptr || (!o.v_in_k && v == nullptr))) {
    return InvalidArgument(o.v_in_k ? "KvPool::Write: k is null"
                                    : "KvPool::Write: k and v must both be non-null");
  }
  const int g = layer_group_[layer];
  const Group& group = groups_[g];
  if (PagesFor(pos0 + n, g) > group.used[slot]) {
    return OutOfRange(fmt::format(
        "KvPool::Write: slot {} holds {} pages, positions up to {} need {} (Reserve first)", slot,
        group.used[slot], pos0 + n, PagesFor(pos0 + n, g)));
  }
  if (n > 0 && PagesFor(pos0 + 1, g) - 1 < group.first[slot]) {
    return OutOfRange(fmt::format(
        "KvPool::Write: slot {} gave back the pages below virtual page {} of layer {}'s window of "
        "{}, position {} lies in page {}",
        slot, group.first[slot], layer, group.spec.window, pos0, PagesFor(pos0 + 1, g) - 1));
  }
  const int rank = group.spec.dcp_sharded ? o.dcp_rank : 0;
  const PagedKv kv = View(layer);
  const int32_t* table =
      group.block_table.data() + static_cast<size_t>(slot) * o.max_pages_per_slot;
  const size_t k_stride = static_cast<size_t>(o.num_kv_heads) * o.head_dim_k;
  const size_t v_stride = static_cast<size_t>(o.num_kv_heads) * o.head_dim_v;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t p = pos0 + i;
    if (group.layout.Owner(p) != rank) continue;
    const int64_t local = group.layout.LocalRow(p);
    const int64_t page = table[local / o.page_size];
    const int in_page = static_cast<int>(local % o.page_size);
    Store(kv, k_[layer].data(), false, page, in_page, k + i * k_stride);
    if (!o.v_in_k) Store(kv, v_[layer].data(), true, page, in_page, v + i * v_stride);
  }
  return Status::Ok();
}

LocalRange KvPool::VisibleRange(int layer, int64_t t, int window) const {
  const Group& g = groups_[layer_group_[layer]];
  return g.layout.WindowLocalRows(g.spec.dcp_sharded ? options_.dcp_rank : 0, t,
                                  g.spec.window > 0 ? g.spec.window : window);
}

PagedKv KvPool::View(int layer) const {
  const Group& g = groups_[layer_group_[layer]];
  PagedKv kv;
  const bool mapped = options_.map_storage;
  kv.k = mapped ? k_[layer].data() : nullptr;
  kv.v = options_.v_in_k || !mapped ? nullptr : v_[layer].data();
  kv.dtype = options_.dtype;
  kv.page_size = options_.page_size;
  kv.num_kv_heads = options_.num_kv_heads;
  kv.head_dim_qk = options_.head_dim_k;
  kv.head_dim_v = options_.head_dim_v;
  kv.block_table = g.block_table.data();
  kv.max_pages_per_seq = options_.max_pages_per_slot;
  kv.num_pages = static_cast<int>(g.num_pages);
  kv.format = options_.format;
  return kv;
}

}  // namespace ctxpar
