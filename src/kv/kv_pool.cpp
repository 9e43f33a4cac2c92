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
  if (o.dtype != DataType::kF32 && o.dtype != DataType::kBF16) {
    return InvalidArgument(
        fmt::format("KvPool: dtype must be f32 or bf16, got {}", DataTypeName(o.dtype)));
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

// Elements of one page of one layer: K, and V unless it lives in K.
int64_t PageElements(const KvPoolOptions& o, bool value) {
  return int64_t{o.page_size} * o.num_kv_heads * (value ? o.head_dim_v : o.head_dim_k);
}

}  // namespace

int64_t KvPool::PageBytes(const KvPoolOptions& o) {
  const int64_t elements = PageElements(o, false) + (o.v_in_k ? 0 : PageElements(o, true));
  return elements * static_cast<int64_t>(DataTypeSize(o.dtype)) * o.num_layers;
}

Expected<KvPool> KvPool::Create(const KvPoolOptions& o) {
  CTXPAR_RETURN_IF_ERROR(CheckOptions(o));
  CTXPAR_ASSIGN_OR_RETURN(KvLayout layout, KvLayout::Create(o.dcp_size, o.interleave_size));
  const size_t element = DataTypeSize(o.dtype);
  std::vector<HostBuffer> k, v;
  for (int l = 0; o.map_storage && l < o.num_layers; ++l) {
    CTXPAR_ASSIGN_OR_RETURN(HostBuffer kb,
                            HostBuffer::Allocate(o.num_pages * PageElements(o, false) * element));
    k.push_back(std::move(kb));
    HostBuffer vb;
    if (!o.v_in_k) {
      CTXPAR_ASSIGN_OR_RETURN(vb,
                              HostBuffer::Allocate(o.num_pages * PageElements(o, true) * element));
    }
    v.push_back(std::move(vb));
  }
  return KvPool(o, layout, std::move(k), std::move(v));
}

KvPool::KvPool(const KvPoolOptions& o, KvLayout layout, std::vector<HostBuffer> k,
               std::vector<HostBuffer> v)
    : options_(o),
      layout_(layout),
      k_(std::move(k)),
      v_(std::move(v)),
      block_table_(static_cast<size_t>(o.max_slots) * o.max_pages_per_slot, 0),
      pages_used_(o.max_slots, 0),
      in_use_(o.max_slots, false) {
  // Ascending ids form a min-heap: the lowest free page is handed out first, on every rank.
  free_.reserve(o.num_pages);
  for (int64_t p = 0; p < o.num_pages; ++p) free_.push_back(static_cast<int32_t>(p));
  if (!o.map_storage) return;
  const PagedKv kv = View(0);
  for (int d = 0; d < o.head_dim_k; ++d)
    k_d_offset_.push_back(KvElementOffset(kv, false, 0, 0, 0, d));
  for (int d = 0; d < o.head_dim_v; ++d)
    v_d_offset_.push_back(KvElementOffset(kv, true, 0, 0, 0, d));
}

Expected<int32_t> KvPool::AcquireSlot() {
  for (int32_t s = 0; s < options_.max_slots; ++s) {
    if (!in_use_[s]) {
      in_use_[s] = true;
      pages_used_[s] = 0;
      return s;
    }
  }
  return OutOfRange(
      fmt::format("KvPool: all max_slots={} request slots are in use", options_.max_slots));
}

Status KvPool::ReleaseSlot(int32_t slot) {
  if (slot < 0 || slot >= options_.max_slots || !in_use_[slot]) {
    return InvalidArgument(fmt::format("KvPool::ReleaseSlot: slot {} is not in use", slot));
  }
  int32_t* table = block_table_.data() + static_cast<size_t>(slot) * options_.max_pages_per_slot;
  for (int32_t v = 0; v < pages_used_[slot]; ++v) {
    free_.push_back(table[v]);
    std::push_heap(free_.begin(), free_.end(), std::greater<>());
  }
  std::fill_n(table, options_.max_pages_per_slot, 0);
  pages_used_[slot] = 0;
  in_use_[slot] = false;
  return Status::Ok();
}

int64_t KvPool::PagesFor(int64_t length) const {
  const int64_t per_page = int64_t{options_.page_size} * options_.dcp_size;
  return length <= 0 ? 0 : (length + per_page - 1) / per_page;
}

int32_t KvPool::free_slots() const {
  return static_cast<int32_t>(std::count(in_use_.begin(), in_use_.end(), false));
}

Status KvPool::Reserve(int32_t slot, int64_t length) {
  if (slot < 0 || slot >= options_.max_slots || !in_use_[slot]) {
    return InvalidArgument(fmt::format("KvPool::Reserve: slot {} is not in use", slot));
  }
  const int64_t needed = PagesFor(length);
  if (needed > options_.max_pages_per_slot) {
    return OutOfRange(fmt::format(
        "KvPool::Reserve: {} tokens need {} pages of {} tokens, more than max_pages_per_slot={}",
        length, needed, int64_t{options_.page_size} * options_.dcp_size,
        options_.max_pages_per_slot));
  }
  const int64_t missing = needed - pages_used_[slot];
  if (missing <= 0) return Status::Ok();
  if (missing > free_pages()) {
    return OutOfRange(fmt::format("KvPool::Reserve: slot {} needs {} more pages, {} of {} are free",
                                  slot, missing, free_pages(), options_.num_pages));
  }
  int32_t* table = block_table_.data() + static_cast<size_t>(slot) * options_.max_pages_per_slot;
  for (; pages_used_[slot] < needed; ++pages_used_[slot]) {
    std::pop_heap(free_.begin(), free_.end(), std::greater<>());
    table[pages_used_[slot]] = free_.back();
    free_.pop_back();
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
    } else {
      uint16_t* out = static_cast<uint16_t*>(base) + at;
      for (int d = 0; d < dim; ++d) out[d_at[d]] = FloatToBf16(x[d]);
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
  if (slot < 0 || slot >= o.max_slots || !in_use_[slot]) {
    return InvalidArgument(fmt::format("KvPool::Write: slot {} is not in use", slot));
  }
  if (n < 0 || pos0 < 0) {
    return InvalidArgument(fmt::format("KvPool::Write: pos0={} and n={} must be >= 0", pos0, n));
  }
  if (n > 0 && (k == nullptr || (!o.v_in_k && v == nullptr))) {
    return InvalidArgument(o.v_in_k ? "KvPool::Write: k is null"
                                    : "KvPool::Write: k and v must both be non-null");
  }
  if (PagesFor(pos0 + n) > pages_used_[slot]) {
    return OutOfRange(fmt::format(
        "KvPool::Write: slot {} holds {} pages, positions up to {} need {} (Reserve first)", slot,
        pages_used_[slot], pos0 + n, PagesFor(pos0 + n)));
  }
  const PagedKv kv = View(layer);
  const int32_t* table = block_table_.data() + static_cast<size_t>(slot) * o.max_pages_per_slot;
  const size_t k_stride = static_cast<size_t>(o.num_kv_heads) * o.head_dim_k;
  const size_t v_stride = static_cast<size_t>(o.num_kv_heads) * o.head_dim_v;
  for (int32_t i = 0; i < n; ++i) {
    const int64_t p = pos0 + i;
    if (layout_.Owner(p) != o.dcp_rank) continue;
    const int64_t local = layout_.LocalRow(p);
    const int64_t page = table[local / o.page_size];
    const int in_page = static_cast<int>(local % o.page_size);
    Store(kv, k_[layer].data(), false, page, in_page, k + i * k_stride);
    if (!o.v_in_k) Store(kv, v_[layer].data(), true, page, in_page, v + i * v_stride);
  }
  return Status::Ok();
}

PagedKv KvPool::View(int layer) const {
  PagedKv kv;
  const bool mapped = options_.map_storage;
  kv.k = mapped ? k_[layer].data() : nullptr;
  kv.v = options_.v_in_k || !mapped ? nullptr : v_[layer].data();
  kv.dtype = options_.dtype;
  kv.page_size = options_.page_size;
  kv.num_kv_heads = options_.num_kv_heads;
  kv.head_dim_qk = options_.head_dim_k;
  kv.head_dim_v = options_.head_dim_v;
  kv.block_table = block_table_.data();
  kv.max_pages_per_seq = options_.max_pages_per_slot;
  kv.num_pages = static_cast<int>(options_.num_pages);
  kv.format = options_.format;
  return kv;
}

}  // namespace ctxpar
