// Split-KV partial decode attention on a CUDA device (sm_90a) over a paged bf16 KV cache.
//
// Contract: the same semantics and layouts as PartialAttentionCpu (attention.h), with every
// pointer of PartialAttentionParams (q, o, lse, row_seq, row_kv_len, row_kv_start, kv.k, kv.v,
// kv.block_table) a DEVICE pointer, kv.dtype == DataType::kBF16 and num_threads ignored. A row
// sees its keys [row_kv_start, row_kv_len) (row_kv_start null: from 0; a sliding window): the
// splits stay the absolute chunks [s * keys_per_split, (s + 1) * keys_per_split), and those before
// the row's start are empty (O = 0, lse = -inf, weight 0 in the merge).
//   q   [num_rows, num_q_heads, head_dim_qk]  fp32
//   o   [num_rows, num_q_heads, head_dim_v]   fp32, written
//   lse [num_rows, num_q_heads]               fp32, written, NATURAL log of sum_j exp(s_j)
// A row that sees no key gets O = 0 and lse = -inf.
//
// Two shapes are served:
//   GQA: head_dim_qk == head_dim_v in {64, 128}, kv.v set, any num_q_heads / num_kv_heads (a
//     thread block serves up to 8 query heads of one KV head; kv heads x head groups <= 65535).
//   absorbed MLA: head_dim_qk 576 (512 latent + 64 rope), head_dim_v 512, kv.v null (V is the
//     latent prefix of each K row), num_kv_heads 1, any num_q_heads >= 1; the tensor-core path
//     (mma.sync bf16 m16n8k16) needs num_q_heads % 16 == 0, the CUDA-core path takes any.
//
// Plan, then run: the plan splits each row's keys into chunks processed by separate thread
// blocks (split-KV, so that one long sequence fills the GPU) and sizes the workspace that holds
// the per-split partial states; the run computes them and merges them with merge.h's math.
// Thread safety: a plan is a value; a run only enqueues work on `stream` and reads device
// memory, so concurrent runs on disjoint outputs and workspaces are safe.
#pragma once

#include <cstddef>

#include "ctxpar/attention.h"
#include "ctxpar/status.h"

namespace ctxpar {

enum class CudaMlaPath { kAuto, kCudaCore, kTensorCore };

struct CudaAttentionPlan {
  int num_splits = 1;          // key chunks per row
  int keys_per_split = 0;      // a multiple of kCudaKeysPerSplitQuantum
  size_t workspace_bytes = 0;  // device bytes the run needs (0 when num_splits == 1)
};

inline constexpr int kCudaKeysPerSplitQuantum = 64;

// Validates the shape fields of `params` (pointers are not dereferenced) and chooses the split.
// max_kv_len: host-side upper bound of row_kv_len[] (>= 0). num_sms: the device's
// multiprocessor count (> 0), used to fill the GPU. num_splits > 0 forces that many splits
// (benchmarks, tests); 0 chooses.
Expected<CudaAttentionPlan> PlanPartialAttentionCuda(const PartialAttentionParams& params,
                                                     int max_kv_len, int num_sms,
                                                     int num_splits = 0);

// Enqueues the attention on `stream` (a cudaStream_t; null is the legacy default stream).
// workspace: device memory of at least plan.workspace_bytes bytes, 16-byte aligned (may be null
// when plan.workspace_bytes == 0). Every row_kv_len[i] must be <= the plan's max_kv_len and
// <= max_pages_per_seq * page_size. Returns the launch error, if any (kernel faults surface at
// the next synchronization, as with every CUDA launch).
Status PartialAttentionCuda(const PartialAttentionParams& params, const CudaAttentionPlan& plan,
                            void* workspace, void* stream,
                            CudaMlaPath mla_path = CudaMlaPath::kAuto);

// The number of CUDA devices, or kUnavailable naming the runtime's reason when there is none
// (no driver, no device). Tests and the CLI use it to skip or refuse GPU work.
Expected<int> CudaDeviceCount();

// The multiprocessor count of the current device.
Expected<int> CudaMultiprocessorCount();

}  // namespace ctxpar
