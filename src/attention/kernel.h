// The per-ISA partial-attention kernels behind PartialAttentionCpu (internal).
//
// One call handles one task: one query row, kv_heads consecutive KV heads with their G query
// heads each, and the keys [key_begin, key_end) of that row's sequence. It writes the task's
// O [kv_heads * G, head_dim_v] and natural lse [kv_heads * G] (O = 0, lse = -inf for an empty
// range). A kTiles16 task may take several rows of one sequence that share key_begin (causal
// prefill): each tile is then read once for all of them, and each row's O and lse are the bits
// it gets alone. Each ISA's kernels live in their own
// translation unit, compiled with that ISA's flags; the caller picks one with SelectKernel after
// checking the CPU (cpu_features.h), so no wider instruction runs on a CPU that lacks it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "ctxpar/attention.h"
#include "ctxpar/cpu_features.h"

namespace ctxpar::attention_internal {

// Keys per block of the online softmax; a task's scratch holds one block of scores. A block is
// whole vectors of every path (16 lanes), and 16 rather than 32 measured faster from memory:
// fewer rows in flight between one KV head's slices and the next's.
inline constexpr int kKeyBlock = 16;
static_assert(kKeyBlock % 16 == 0, "the softmax and bf16 packing take whole 16-lane vectors");

// Rows per kTiles16 task: the consecutive prefill rows that share their tiles. Four rows of
// SmolLM2's three query heads per KV head are 12 (row, head) pairs: three full register tiles of
// AVX2's four heads (docs/perf-attention.md has the measurements).
inline constexpr int kMaxTaskRows = 4;
// The AMX path's tiles hold 16 (row, head) pairs of a KV head: it takes as many rows per task
// as fill them (16 / G, at least kMaxTaskRows), since a tile multiply costs the same for fewer.
inline constexpr int kAmxTileRows = 16;
inline int TaskRows(bool amx, int group) {
  return amx ? std::max(kMaxTaskRows, kAmxTileRows / group) : kMaxTaskRows;
}

// One row of a several-row task: its Q [kv_heads * G, head_dim_qk], where its O and lse go, and
// the end of its keys (> key_begin).
struct KernelRow {
  const float* q = nullptr;
  float* o = nullptr;
  float* lse = nullptr;
  int key_end = 0;
};

struct KernelArgs {
  const float* q = nullptr;  // [kv_heads * group, head_dim_qk]
  float* o = nullptr;        // [kv_heads * group, head_dim_v]
  float* lse = nullptr;      // [kv_heads * group]
  int kv_heads = 0;
  int group = 0;
  int head_dim_qk = 0;
  int head_dim_v = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: s = softcap * tanh(s / softcap) on each score (attention.h)
  // K row of local position r and the task's KV head i: k + (page(r) * page_size + r %
  // page_size) * k_row_stride + i * k_head_stride, page(r) = pages[r / page_size]; likewise V
  // (v null: V rows are the K rows).
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_row_stride = 0;
  int64_t v_row_stride = 0;
  int64_t k_head_stride = 0;
  int64_t v_head_stride = 0;
  int page_size = 0;
  const int32_t* pages = nullptr;
  int key_begin = 0;
  int key_end = 0;
  // kTiles16 (attention.h): the tile of KV head i and keys [16 b, 16 b + 16) of the page of
  // local position 16 b starts at k + page * k_page_stride + (i * page_size / 16 + b % (page_size
  // / 16)) * 16 * head_dim_qk (likewise V); the row strides above are then unused.
  bool tiles = false;
  int64_t k_page_stride = 0;
  int64_t v_page_stride = 0;
  // kTiles16 only: num_rows (2 to TaskRows) rows in non-decreasing key_end, instead of q, o,
  // lse and key_end; key_end must then be the last row's.
  const KernelRow* rows = nullptr;
  int num_rows = 1;
  float* scratch = nullptr;  // KernelScratchFloats(kv_heads, group, head_dim_qk, head_dim_v, rows)
  // No other row of the call reads this row's keys (a decode row), so they are not in cache
  // whatever their size: the kTiles16 kernels prefetch them. Changes speed only, never a bit.
  bool kv_cold = false;
};

using KernelFn = void (*)(const KernelArgs& args);

// fp8 K/V elements, one type per format so that each kernel's copy knows how to widen them.
struct Fp8E4M3 {
  uint8_t bits;
};
struct Fp8E5M2 {
  uint8_t bits;
};
template <class E>
inline constexpr bool kIsFp8 = std::is_same_v<E, Fp8E4M3> || std::is_same_v<E, Fp8E5M2>;

// Floats rounded up to whole 64-byte lines.
inline size_t ScratchLines(size_t floats) { return (floats + 15) / 16 * 16; }

// Per row: scaled Q, one block of scores of one KV head, running max and sum; for kTiles16 also
// the weights as bf16 pairs; then two V word-rows (the edges of a partial tile), and for several
// rows their O, and 8 * head_dim_v for the AMX path's copy of a partial V tile. Each part starts
// on a line (kernel_tiles.h's TilesState).
inline size_t KernelScratchFloats(int kv_heads, int group, int head_dim_qk, int head_dim_v,
                                  int rows = 1) {
  const size_t heads = static_cast<size_t>(kv_heads) * group * rows;
  const size_t pairs = static_cast<size_t>(group) * rows;
  return ScratchLines(heads * head_dim_qk) + ScratchLines(pairs * kKeyBlock) +
         2 * ScratchLines(heads) + ScratchLines(pairs * kKeyBlock / 2) +
         ScratchLines(2 * static_cast<size_t>(head_dim_v)) +
         ScratchLines(8 * static_cast<size_t>(head_dim_v)) +
         (rows > 1 ? ScratchLines(heads * head_dim_v) : 0);
}

void AttendScalarF32(const KernelArgs& args);
void AttendScalarBf16(const KernelArgs& args);
void AttendScalarFp8E4M3(const KernelArgs& args);
void AttendScalarFp8E5M2(const KernelArgs& args);
#if defined(CTXPAR_X86_KERNELS)
void AttendAvx2F32(const KernelArgs& args);
void AttendAvx2Bf16(const KernelArgs& args);
void AttendAvx2Fp8E4M3(const KernelArgs& args);
void AttendAvx2Fp8E5M2(const KernelArgs& args);
void AttendAvx512F32(const KernelArgs& args);
void AttendAvx512Bf16(const KernelArgs& args);
void AttendAvx512Fp8E4M3(const KernelArgs& args);
void AttendAvx512Fp8E5M2(const KernelArgs& args);
void AttendAvx512DpBf16(const KernelArgs& args);
// fp8 kTiles16 on vdpbf16ps (AVX512_VBMI too); kRows take AttendAvx512Fp8*.
void AttendAvx512DpFp8E4M3(const KernelArgs& args);
void AttendAvx512DpFp8E5M2(const KernelArgs& args);
void AttendAmxBf16(const KernelArgs& args);  // kTiles16 on AMX, other formats AttendAvx512DpBf16
#endif

KernelFn SelectKernel(CpuIsa isa, DataType dtype);

}  // namespace ctxpar::attention_internal
