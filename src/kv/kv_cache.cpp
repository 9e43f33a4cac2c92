#include "ctxpar/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "ctxpar/dtype.h"

namespace ctxpar {

namespace {
Status Positive(std::string_view field, int value) {
  if (value >= 1) return Status::Ok();
  return InvalidArgument(fmt::format("KvCache: {} must be >= 1, got {}={}", field, field, value));
}
}  // namespace

Expected<KvCache> KvCache::Create(const KvCacheOptions& o) {
  CTXPAR_ASSIGN_OR_RETURN(KvLayout layout, KvLayout::Create(o.dcp_size, o.interleave_size));
  CTXPAR_RETURN_IF_ERROR(Positive("page_size", o.page_size));
  CTXPAR_RETURN_IF_ERROR(Positive("num_pages", o.num_pages));
  CTXPAR_RETURN_IF_ERROR(Positive("max_seqs", o.max_seqs));
  CTXPAR_RETURN_IF_ERROR(Positive("max_pages_per_seq", o.max_pages_per_seq));
  CTXPAR_RETURN_IF_ERROR(Positive("num_kv_heads", o.num_kv_heads));
  CTXPAR_RETURN_IF_ERROR(Positive("head_dim_qk", o.head_dim_qk));
  CTXPAR_RETURN_IF_ERROR(Positive("head_dim_v", o.head_dim_v));
  if (o.dcp_rank < 0 || o.dcp_rank >= o.dcp_size) {
    return InvalidArgument(
        fmt::format("KvCache: dcp_rank must be in [0, dcp_size={}), got "
                    "dcp_rank={}",
                    o.dcp_size, o.dcp_rank));
  }
  if (o.page_size % o.interleave_size != 0) {
    return InvalidArgument(fmt::format(
        "KvCache: page_size must be a multiple of interleave_size so that a virtual page is one "
        "physical page on every rank, got page_size={} and interleave_size={}",
        o.page_size, o.interleave_size));
  }
  if (o.v_in_k && o.head_dim_v > o.head_dim_qk) {
    return InvalidArgument(fmt::format(
        "KvCache: with v_in_k, V is a prefix of K and head_dim_v must be <= head_dim_qk, got "
        "head_dim_v={} and head_dim_qk={}",
        o.head_dim_v, o.head_dim_qk));
  }
  if (o.format == KvPageFormat::kTiles16 && o.v_in_k) {
    return InvalidArgument(
        "KvCache: format=kTiles16 tiles K and V separately and needs v_in_k=false, got "
        "v_in_k=true");
  }
  if (o.format == KvPageFormat::kTiles16 && o.page_size % 16 != 0) {
    return InvalidArgument(fmt::format(
        "KvCache: format=kTiles16 needs page_size to be a multiple of 16 (a tile holds 16 "
        "slots), got page_size={}",
        o.page_size));
  }
  if (o.dtype != DataType::kF32 && o.dtype != DataType::kBF16) {
    return InvalidArgument(fmt::format("KvCache: dtype must be f32 or bf16, got {}",
                                       DataTypeName(o.dtype)));
  }
  const size_t element = DataTypeSize(o.dtype);
  const size_t rows = static_cast<size_t>(o.num_pages) * o.page_size * o.num_kv_heads;
  CTXPAR_ASSIGN_OR_RETURN(HostBuffer k, HostBuffer::Allocate(rows * o.head_dim_qk * element));
  HostBuffer v;
  if (!o.v_in_k) {
    CTXPAR_ASSIGN_OR_RETURN(v, HostBuffer::Allocate(rows * o.head_dim_v * element));
  }
  return KvCache(o, layout, std::move(k), std::move(v));
}

KvCache::KvCache(const KvCacheOptions& o, KvLayout layout, HostBuffer k, HostBuffer v)
    : options_(o),
      layout_(layout),
      k_(std::move(k)),
      v_(std::move(v)),
      block_table_(static_cast<size_t>(o.max_seqs) * o.max_pages_per_seq, 0),
      pages_used_(o.max_seqs, 0),
      lengths_(o.max_seqs, 0),
      in_use_(o.max_seqs, false) {
  for (int p = o.num_pages - 1; p >= 0; --p) free_.push_back(p);
}

Expected<int> KvCache::AddSequence() {
  for (int s = 0; s < options_.max_seqs; ++s) {
    if (!in_use_[s]) {
      in_use_[s] = true;
      lengths_[s] = 0;
      pages_used_[s] = 0;
      return s;
    }
  }
  return OutOfRange(fmt::format("KvCache::AddSequence: all max_seqs={} sequence slots are in use",
                                options_.max_seqs));
}

Status KvCache::FreeSequence(int seq) {
  if (seq < 0 || seq >= options_.max_seqs || !in_use_[seq]) {
    return InvalidArgument(
        fmt::format("KvCache::FreeSequence: seq={} is not a live sequence", seq));
  }
  // Pushed in reverse so that the lowest ids are reused first, the same on every rank.
  for (int v = pages_used_[seq] - 1; v >= 0; --v) {
    free_.push_back(block_table_[static_cast<size_t>(seq) * options_.max_pages_per_seq + v]);
  }
  std::fill_n(block_table_.begin() + static_cast<size_t>(seq) * options_.max_pages_per_seq,
              options_.max_pages_per_seq, 0);
  pages_used_[seq] = 0;
  lengths_[seq] = 0;
  in_use_[seq] = false;
  return Status::Ok();
}

// Element by element, as a kTiles16 row is not contiguous: KvElementOffset stays the one
// statement of the layout, and the stores are small beside the projections that made K and V.
void KvCache::Store(const PagedKv& kv, bool value, int64_t page, int slot, const float* src) {
  const int dim = value ? options_.head_dim_v : options_.head_dim_qk;
  void* base = value ? v_.data() : k_.data();
  for (int h = 0; h < options_.num_kv_heads; ++h) {
    for (int d = 0; d < dim; ++d) {
      const int64_t at = KvElementOffset(kv, value, page, slot, h, d);
      const float x = src[h * dim + d];
      if (options_.dtype == DataType::kF32) {
        static_cast<float*>(base)[at] = x;
      } else {
        static_cast<uint16_t*>(base)[at] = FloatToBf16(x);
      }
    }
  }
}

Status KvCache::Append(int seq, const float* k, const float* v, int n) {
  const KvCacheOptions& o = options_;
  if (seq < 0 || seq >= o.max_seqs || !in_use_[seq]) {
    return InvalidArgument(fmt::format("KvCache::Append: seq={} is not a live sequence", seq));
  }
  if (n < 0) return InvalidArgument(fmt::format("KvCache::Append: n must be >= 0, got n={}", n));
  if (n > 0 && (k == nullptr || (!o.v_in_k && v == nullptr))) {
    return InvalidArgument(o.v_in_k ? "KvCache::Append: k is null"
                                    : "KvCache::Append: k and v must both be non-null");
  }
  const int64_t virtual_tokens = int64_t{o.page_size} * o.dcp_size;
  const int64_t new_length = lengths_[seq] + n;
  const int64_t pages_needed = (new_length + virtual_tokens - 1) / virtual_tokens;
  if (pages_needed > o.max_pages_per_seq) {
    return OutOfRange(fmt::format(
        "KvCache::Append: sequence {} would reach {} tokens, more than max_pages_per_seq={} "
        "virtual pages of {} tokens hold",
        seq, new_length, o.max_pages_per_seq, virtual_tokens));
  }
  if (pages_needed - pages_used_[seq] > static_cast<int64_t>(free_.size())) {
    return OutOfRange(fmt::format(
        "KvCache::Append: sequence {} needs {} more pages but {} of num_pages={} are free", seq,
        pages_needed - pages_used_[seq], free_.size(), o.num_pages));
  }
  int32_t* table = block_table_.data() + static_cast<size_t>(seq) * o.max_pages_per_seq;
  for (; pages_used_[seq] < pages_needed; ++pages_used_[seq]) {
    table[pages_used_[seq]] = free_.back();
    free_.pop_back();
  }
  const PagedKv kv = View();
  const size_t k_stride = static_cast<size_t>(o.num_kv_heads) * o.head_dim_qk;
  const size_t v_stride = static_cast<size_t>(o.num_kv_heads) * o.head_dim_v;
  for (int i = 0; i < n; ++i) {
    const int64_t p = lengths_[seq] + i;
    if (layout_.Owner(p) != o.dcp_rank) continue;
    const int64_t local = layout_.LocalRow(p);
    const int64_t page = table[local / o.page_size];
    const int slot = static_cast<int>(local % o.page_size);
    Store(kv, false, page, slot, k + i * k_stride);
    if (!o.v_in_k) Store(kv, true, page, slot, v + i * v_stride);
  }
  lengths_[seq] = new_length;
  return Status::Ok();
}

PagedKv KvCache::View() const {
  PagedKv kv;
  kv.k = k_.data();
  kv.v = options_.v_in_k ? nullptr : v_.data();
  kv.dtype = options_.dtype;
  kv.page_size = options_.page_size;
  kv.num_kv_heads = options_.num_kv_heads;
  kv.head_dim_qk = options_.head_dim_qk;
  kv.head_dim_v = options_.head_dim_v;
  kv.block_table = block_table_.data();
  kv.max_pages_per_seq = options_.max_pages_per_seq;
  kv.num_pages = options_.num_pages;
  kv.format = options_.format;
  return kv;
}

}  // namespace ctxpar
