// Plan, validation and dispatch of the CUDA attention kernels (cuda_attention.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "ctxpar/cuda_attention.h"
#include "ctxpar/cuda_combine.h"
#include "ctxpar/error_catalog.h"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_check.h"

namespace ctxpar {
namespace {

constexpr int kMaxGridDim = 65535;  // gridDim.y and gridDim.z
constexpr int kMlaDqk = 576;
constexpr int kMlaDv = 512;
constexpr int kMlaHeadTile = 16;
constexpr int kMinKeysPerSplit = 256;  // below this a split's fixed cost dominates
constexpr int kMaxSplits = 256;        // the merge takes at most 256 sources

enum class Shape { kGqa, kMla };

Status Bad(const std::string& field, int64_t value, const std::string& rule) {
  return InvalidArgument("PartialAttentionCuda: " + field + "=" + std::to_string(value) + " " +
                         rule);
}

Expected<Shape> ValidateShape(const PartialAttentionParams& p) {
  const PagedKv& kv = p.kv;
  if (kv.dtype != DataType::kBF16) {
    return InvalidArgument(
        "PartialAttentionCuda: kv.dtype must be kBF16 (the CUDA kernels read "
        "bf16 KV only)");
  }
  if (kv.format != KvPageFormat::kRows) {
    return InvalidArgument(
        "PartialAttentionCuda: kv.format must be KvPageFormat::kRows (the CUDA kernels read "
        "token rows; kTiles16 is the CPU kernels' layout)");
  }
  if (p.num_rows < 0 || p.num_rows > kMaxGridDim) {
    return Bad("num_rows", p.num_rows, "must be in [0, 65535]");
  }
  if (kv.page_size < 1) return Bad("kv.page_size", kv.page_size, "must be >= 1");
  if (kv.max_pages_per_seq < 1) {
    return Bad("kv.max_pages_per_seq", kv.max_pages_per_seq, "must be >= 1");
  }
  if (kv.num_kv_heads < 1) return Bad("kv.num_kv_heads", kv.num_kv_heads, "must be >= 1");
  if (p.num_q_heads < 1 || p.num_q_heads % kv.num_kv_heads != 0) {
    return Bad(
        "num_q_heads", p.num_q_heads,
        "must be a positive multiple of kv.num_kv_heads (" + std::to_string(kv.num_kv_heads) + ")");
  }
  if (!std::isfinite(p.scale)) {
    return InvalidArgument("PartialAttentionCuda: scale must be finite");
  }
  // The kernels compute plain scores: a softcap is refused rather than ignored.
  if (p.softcap != 0.0f) {
    return CatalogError("CTXPAR-DCP-008", {{"softcap", std::to_string(p.softcap)}});
  }
  if (kv.head_dim_qk == kMlaDqk) {
    if (kv.head_dim_v != kMlaDv) {
      return Bad("kv.head_dim_v", kv.head_dim_v, "must be 512 for absorbed MLA (head_dim_qk 576)");
    }
    if (kv.v != nullptr) {
      return InvalidArgument(
          "PartialAttentionCuda: kv.v must be null for absorbed MLA (V is the "
          "latent prefix of each K row)");
    }
    if (kv.num_kv_heads != 1) {
      return Bad("kv.num_kv_heads", kv.num_kv_heads, "must be 1 for absorbed MLA");
    }
    return Shape::kMla;
  }
  if (kv.head_dim_qk != 64 && kv.head_dim_qk != 128) {
    return Bad("kv.head_dim_qk", kv.head_dim_qk, "must be 64 or 128 (GQA) or 576 (absorbed MLA)");
  }
  if (kv.head_dim_v != kv.head_dim_qk) {
    return Bad("kv.head_dim_v", kv.head_dim_v,
               "must equal kv.head_dim_qk (" + std::to_string(kv.head_dim_qk) + ") for GQA");
  }
  if (kv.v == nullptr) return InvalidArgument("PartialAttentionCuda: kv.v is null for GQA");
  const int64_t blocks_y =
      static_cast<int64_t>(kv.num_kv_heads) * ((p.num_q_heads / kv.num_kv_heads + 7) / 8);
  if (blocks_y > kMaxGridDim) {
    return Bad("num_q_heads", p.num_q_heads, "gives more than 65535 head groups");
  }
  return Shape::kGqa;
}

// Thread blocks per split: the work items that run side by side without splitting.
int64_t BlocksPerSplit(const PartialAttentionParams& p, Shape shape) {
  const int64_t heads = shape == Shape::kMla ? (p.num_q_heads + kMlaHeadTile - 1) / kMlaHeadTile
                                             : static_cast<int64_t>(p.kv.num_kv_heads) *
                                                   ((p.num_q_heads / p.kv.num_kv_heads + 7) / 8);
  return std::max<int64_t>(1, heads * p.num_rows);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

Expected<CudaAttentionPlan> PlanPartialAttentionCuda(const PartialAttentionParams& params,
                                                     int max_kv_len, int num_sms, int num_splits) {
  CTXPAR_ASSIGN_OR_RETURN(const Shape shape, ValidateShape(params));
  if (max_kv_len < 0) return Bad("max_kv_len", max_kv_len, "must be >= 0");
  if (static_cast<int64_t>(max_kv_len) >
      static_cast<int64_t>(params.kv.max_pages_per_seq) * params.kv.page_size) {
    return Bad("max_kv_len", max_kv_len,
               "must be <= kv.max_pages_per_seq * kv.page_size (" +
                   std::to_string(static_cast<int64_t>(params.kv.max_pages_per_seq) *
                                  params.kv.page_size) +
                   ")");
  }
  if (num_sms < 1) return Bad("num_sms", num_sms, "must be >= 1");
  if (num_splits < 0 || num_splits > kMaxSplits) {
    return Bad("num_splits", num_splits, "must be in [0, 256] (0 chooses)");
  }
  const int quantum = kCudaKeysPerSplitQuantum;
  const int64_t len = std::max(max_kv_len, 1);
  int64_t splits = num_splits;
  if (splits == 0) {
    // Enough blocks for every SM to hold as many as fit at once (GQA: 4 of 128 threads at 128
    // registers; MLA: 2, by shared memory); never cut a row into chunks under kMinKeysPerSplit.
    const int64_t waves = shape == Shape::kGqa ? 4 : 2;
    const int64_t blocks = BlocksPerSplit(params, shape);
    const int64_t want = (waves * num_sms + blocks - 1) / blocks;
    splits =
        std::clamp<int64_t>(want, 1, std::clamp<int64_t>(len / kMinKeysPerSplit, 1, kMaxSplits));
  }
  CudaAttentionPlan plan;
  const int64_t per_split = (len + splits - 1) / splits;
  plan.keys_per_split = static_cast<int>((per_split + quantum - 1) / quantum * quantum);
  plan.num_splits = static_cast<int>((len + plan.keys_per_split - 1) / plan.keys_per_split);
  if (num_splits > 0 && plan.num_splits != num_splits) {
    return Bad("num_splits", num_splits,
               "leaves empty splits for max_kv_len=" + std::to_string(max_kv_len) +
                   " (splits hold multiples of " + std::to_string(quantum) + " keys)");
  }
  if (plan.num_splits > 1) {
    const int64_t states = static_cast<int64_t>(params.num_rows) * params.num_q_heads;
    plan.workspace_bytes =
        static_cast<size_t>(plan.num_splits) * states * (params.kv.head_dim_v + 1) * 4;
    plan.workspace_bytes = (plan.workspace_bytes + 15) / 16 * 16;
  }
  return plan;
}

Status PartialAttentionCuda(const PartialAttentionParams& params, const CudaAttentionPlan& plan,
                            void* workspace, void* stream, CudaMlaPath mla_path) {
  CTXPAR_ASSIGN_OR_RETURN(const Shape shape, ValidateShape(params));
  if (plan.num_splits < 1 || plan.keys_per_split < 1) {
    return Bad("plan.num_splits", plan.num_splits, "is not a plan from PlanPartialAttentionCuda");
  }
  if (plan.num_splits > 1 && (workspace == nullptr || !Aligned16(workspace))) {
    return InvalidArgument(
        "PartialAttentionCuda: workspace must be a 16-byte aligned device "
        "buffer of plan.workspace_bytes bytes");
  }
  if (params.num_rows == 0) return Status::Ok();
  if (params.q == nullptr || params.o == nullptr || params.lse == nullptr ||
      params.row_kv_len == nullptr || params.kv.k == nullptr || params.kv.block_table == nullptr) {
    return InvalidArgument(
        "PartialAttentionCuda: q, o, lse, row_kv_len, kv.k and "
        "kv.block_table must be device pointers");
  }
  if (!Aligned16(params.q) || !Aligned16(params.o) || !Aligned16(params.kv.k) ||
      (params.kv.v != nullptr && !Aligned16(params.kv.v))) {
    return InvalidArgument("PartialAttentionCuda: q, o, kv.k and kv.v must be 16-byte aligned");
  }
  if (shape == Shape::kMla && mla_path == CudaMlaPath::kTensorCore &&
      params.num_q_heads % kMlaHeadTile != 0) {
    return Bad("num_q_heads", params.num_q_heads,
               "must be a multiple of 16 for the tensor-core MLA path");
  }

  cuda::AttentionKernelParams k;
  k.q = params.q;
  k.k = static_cast<const uint16_t*>(params.kv.k);
  k.v = static_cast<const uint16_t*>(params.kv.v);
  k.block_table = params.kv.block_table;
  k.row_seq = params.row_seq;
  k.row_kv_len = params.row_kv_len;
  k.row_kv_start = params.row_kv_start;
  const int64_t states = static_cast<int64_t>(params.num_rows) * params.num_q_heads;
  if (plan.num_splits == 1) {
    k.o = params.o;
    k.lse = params.lse;
  } else {
    k.o = static_cast<float*>(workspace);
    k.lse = k.o + static_cast<int64_t>(plan.num_splits) * states * params.kv.head_dim_v;
  }
  k.num_rows = params.num_rows;
  k.num_q_heads = params.num_q_heads;
  k.num_kv_heads = params.kv.num_kv_heads;
  k.head_dim = params.kv.head_dim_qk;
  k.page_size = params.kv.page_size;
  k.max_pages_per_seq = params.kv.max_pages_per_seq;
  k.keys_per_split = plan.keys_per_split;
  k.num_splits = plan.num_splits;
  k.scale_log2 = params.scale * 1.4426950408889634f;

  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err;
  if (shape == Shape::kGqa) {
    err = cuda::LaunchGqaAttention(k, s);
  } else {
    const bool tensor_core =
        mla_path == CudaMlaPath::kTensorCore ||
        (mla_path == CudaMlaPath::kAuto && params.num_q_heads % kMlaHeadTile == 0);
    err = tensor_core ? cuda::LaunchMlaAttentionTensorCore(k, s)
                      : cuda::LaunchMlaAttentionCudaCore(k, s);
  }
  CTXPAR_RETURN_IF_ERROR(cuda::CudaStatus(err, "PartialAttentionCuda launch"));
  if (plan.num_splits == 1) return Status::Ok();

  CudaMergeParams merge;
  merge.o_parts = k.o;
  merge.lse_parts = k.lse;
  merge.o_dtype = DataType::kF32;
  merge.n = plan.num_splits;
  merge.num_states = static_cast<int>(states);
  merge.head_dim = params.kv.head_dim_v;
  merge.o = params.o;
  merge.lse = params.lse;
  return MergeStatesCuda(merge, stream);
}

Expected<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return Unavailable(std::string("no CUDA device: cudaGetDeviceCount failed with ") +
                       cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  }
  if (count == 0) return Unavailable("no CUDA device: cudaGetDeviceCount returned 0");
  return count;
}

Expected<int> CudaMultiprocessorCount() {
  int device = 0;
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  int sms = 0;
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace ctxpar
