// KvElementOffset: the page layouts of attention.h, in one place.
#include "ctxpar/attention.h"

namespace ctxpar {

int64_t KvElementOffset(const PagedKv& kv, bool value, int64_t page, int slot, int head, int d) {
  const bool in_k = !value || kv.v == nullptr;
  const int64_t row_dim = in_k ? kv.head_dim_qk : kv.head_dim_v;
  const int64_t page_elems = static_cast<int64_t>(kv.page_size) * kv.num_kv_heads * row_dim;
  if (kv.format == KvPageFormat::kRows) {
    return page * page_elems + (static_cast<int64_t>(slot) * kv.num_kv_heads + head) * row_dim + d;
  }
  // kTiles16: e elements per 32-bit word.
  const int e = 4 / static_cast<int>(DataTypeSize(kv.dtype));
  const int64_t tile = static_cast<int64_t>(head) * (kv.page_size / 16) + slot / 16;
  const int key = slot % 16;
  const int64_t in_tile = !value ? (static_cast<int64_t>(d / e) * 16 + key) * e + d % e
                                 : (static_cast<int64_t>(key / e) * row_dim + d) * e + key % e;
  return page * page_elems + tile * 16 * row_dim + in_tile;
}

}  // namespace ctxpar
