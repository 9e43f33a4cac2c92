// Partial decode attention on one rank's shard of a paged KV cache (CPU kernels).
//
// Contract
// - Query rows: row i belongs to sequence row_seq[i] (or sequence i when row_seq is null) and
//   sees the local rows [row_kv_start[i], row_kv_len[i]) of that sequence's shard (row_kv_start
//   null: [0, row_kv_len[i])). Decode has one row per sequence with the whole shard visible;
//   causal prefill has one row per token, each seeing the shard rows whose global position is <=
//   the token's position; a sliding window of W also hides those <= t - W (kv_layout.h computes
//   both). Only the block-table entries of pages that hold a visible row are read.
// - Shapes (row-major, fp32 unless stated):
//     q   [num_rows, num_q_heads, head_dim_qk]
//     o   [num_rows, num_q_heads, head_dim_v]          written
//     lse [num_rows, num_q_heads]                      written, NATURAL log of sum_j exp(s_j)
//     kv.k  pages of page_size * num_kv_heads * head_dim_qk elements (fp32, bf16 or fp8)
//     kv.v  pages of page_size * num_kv_heads * head_dim_v elements, or null: then V is the
//           first head_dim_v elements of each K row (absorbed MLA: K = 512 latent + 64 rope,
//           V = latent)
//   Inside a page, kv.format says where K[slot][head][d] and V[slot][head][d] are
//   (KvElementOffset computes it):
//     kRows:    [page_size, num_kv_heads, D] for K and V: a token's row is contiguous.
//     kTiles16: [num_kv_heads, page_size / 16, tile]: a KV head's 16 consecutive slots form one
//               tile of 16 * D elements. With e = 4 / sizeof(element) (fp32 1, bf16 2, fp8 4)
//               elements per 32-bit word, the K tile is key-major, [D / e, 16 keys, e] (a word
//               holds e consecutive d of one key), and the V tile holds keys in groups of e, [16 /
//               e, D, e] (a word holds one d of e consecutive keys). A 64-byte line is then one
//               vector of 16 keys for q . k and one of 16 d for P V, so the CPU kernels need no
//               horizontal sums or shuffles. Needs a separate V (GQA) and page_size % 16 == 0.
//     kv.block_table [num_seqs, max_pages_per_seq]: local row r of sequence s lives in page
//           block_table[s * max_pages_per_seq + r / page_size], slot r % page_size.
//   Scores are s_j = scale * dot(q, k_j), or softcap * tanh(s_j / softcap) when softcap > 0
//   (Gemma 2's attention logit softcapping; elementwise, so the merge of partials is unchanged);
//   query head h reads KV head h / (num_q_heads / num_kv_heads) (GQA; num_q_heads must be a
//   multiple of num_kv_heads).
// - A row that sees no key gets O = 0 and lse = -inf, so the merge (merge.h) gives it weight 0.
// - Numerics: online softmax with a running max and sum in fp32, accumulation in fp32. bf16 and
//   fp8 K/V are widened exactly to fp32 (fp8 by dtype.h's Fp8*ToFloat steps, the same bits on
//   every path), except on the avx512_bf16 and amx paths (cpu_features.h) for bf16, and for fp8
//   in kTiles16 pages where the CPU has AVX512_VBMI (each code looked up to the exact bf16 of its
//   value), which feed vdpbf16ps or AMX's tdpbf16ps: Q (times scale) is rounded to bf16 once
//   per row and each block of softmax weights p_j to bf16 before O += p V (the sum of the
//   weights stays fp32).
//   Each rounding is a relative error of at most 2^-9, so O and lse agree with an exact
//   computation to about 1e-2 relative (typically 1e-3); fp32 KV: about 1e-5 on every path. On
//   amx with bf16 KV (kTiles16 pages; kRows and fp8 take avx512_bf16's kernels) each 16-key
//   block's P V is added to O inside a tile multiply, and the tile unit rounds its sums its
//   own way: the bits differ from avx512_bf16's, never between layouts or batches on one
//   machine.
// - Work is split over rows, KV heads and chunks of keys (split-KV); the chunks of one row are
//   merged with merge.h, so a single long sequence uses every thread. With kTiles16, up to four
//   (on the amx path with bf16 KV, 16 / G if more) consecutive rows of one sequence whose
//   row_kv_start and row_kv_len do not decrease (a causal prefill) share each chunk's task where
//   they start at the same key, and read each tile once for all of them.
// - Batch invariance: with split_kv_keys > 0, a row's chunks are its visible rows in [c *
//   split_kv_keys, (c + 1) * split_kv_keys), for the c that meet [row_kv_start, row_kv_len): the
//   chunk boundaries are absolute, not relative to the row's start. Each chunk is computed by one
//   task and merged in chunk order; the row's O and lse are then a fixed function of its q, its
//   keys, its range and split_kv_keys, bitwise the same whatever the other rows, their number,
//   the threads, or whether the row is a decode row or a causal-prefill token with the same
//   range. split_kv_keys = 0 sizes the chunks from the call's total keys and threads (one long
//   row uses every thread): not invariant.
// - Thread safety: a call reads its inputs and writes only o and lse; concurrent calls on
//   disjoint outputs are safe unless they share a pool. num_threads <= 0 means all hardware
//   threads. The SIMD path is the one SelectCpuIsa() picks (CTXPAR_CPU_ISA can force a lower
//   one).
#pragma once

#include <cstdint>
#include <vector>

#include "ctxpar/dtype.h"
#include "ctxpar/status.h"

namespace ctxpar {

// The layout inside a KV page (see the contract above). kRows is what the CUDA kernels read;
// kTiles16 is the fast layout for the CPU kernels.
enum class KvPageFormat { kRows, kTiles16 };

// bf16 elements are uint16_t bit patterns (the upper half of an IEEE fp32); fp8 (kF8E4M3,
// kF8E5M2) elements are uint8_t codes, read with a scale of 1.
struct PagedKv {
  const void* k = nullptr;
  const void* v = nullptr;  // null: V is the prefix of K (absorbed MLA)
  DataType dtype = DataType::kF32;
  int page_size = 0;
  int num_kv_heads = 0;
  int head_dim_qk = 0;  // a multiple of 16, at most 1024
  int head_dim_v = 0;   // a multiple of 16, at most 1024; <= head_dim_qk when v is null
  const int32_t* block_table = nullptr;
  int max_pages_per_seq = 0;
  int num_pages = 0;  // pages in k (and v); 0: block-table entries are only checked >= 0
  KvPageFormat format = KvPageFormat::kRows;
};

// The element offset of K[page][slot][head][d] in kv.k, or of V[...] in kv.v when `value` (in
// kv.k when kv.v is null), for kv's format, page_size, num_kv_heads, head dims and dtype. The
// one statement of the page layouts in code: the KV cache writes through it, and the tests hold
// the kernels' own addressing to it. Thread safety: a pure function.
int64_t KvElementOffset(const PagedKv& kv, bool value, int64_t page, int slot, int head, int d);

class ThreadPool;  // thread_pool.h

// The unmerged states of every chunk of every row (PartialAttentionParams::chunks): row i's
// chunks are [first[i], first[i + 1]), its absolute chunks of split_kv_keys local rows in order
// (an empty range is one empty chunk: O = 0, lse = -inf).
struct ChunkStates {
  std::vector<int64_t> first;  // [num_rows + 1]
  std::vector<float> o;        // [chunks, num_q_heads, head_dim_v]
  std::vector<float> lse;      // [chunks, num_q_heads]
};

struct PartialAttentionParams {
  const float* q = nullptr;
  float* o = nullptr;
  float* lse = nullptr;
  int num_rows = 0;
  int num_q_heads = 0;
  const int32_t* row_seq = nullptr;     // [num_rows] or null (row i is sequence i)
  const int32_t* row_kv_len = nullptr;  // [num_rows], each in [0, max_pages_per_seq * page_size]
  // [num_rows], each in [0, row_kv_len[i]], or null (every row starts at local row 0).
  const int32_t* row_kv_start = nullptr;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores capped to (-softcap, softcap) by tanh; 0: none
  PagedKv kv;
  int num_threads = 0;
  // When set, the tasks run on this pool and num_threads is its size; the caller must be the one
  // thread that drives the pool. Null: threads are started for the call (and joined by its end).
  ThreadPool* pool = nullptr;
  int num_seqs = 0;  // rows of block_table; 0: row_seq is only checked >= 0
  // Keys per split-KV chunk (batch invariant, see the contract); 0: chosen from the sizes and
  // num_threads.
  int split_kv_keys = 0;
  // Set: the chunks' states go here, unmerged, and o and lse are not written (the exact merge,
  // merge.h, takes them). Needs split_kv_keys > 0.
  ChunkStates* chunks = nullptr;
};

// Validates the params (naming the first bad field, its value and the rule) and computes O and
// LSE for every row and head.
Status PartialAttentionCpu(const PartialAttentionParams& params);

}  // namespace ctxpar
