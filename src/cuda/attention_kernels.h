// The attention kernels' parameters and launchers (internal to src/cuda). Validation lives in
// attention.cpp; the launchers assume valid params.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ctxpar::cuda {

// Everything a kernel reads, with device pointers. The kernels write split `s` of row `r`,
// head `h` to o[((s * num_rows + r) * num_q_heads + h) * head_dim_v] and lse[(s * num_rows + r) *
// num_q_heads + h]: the final output when num_splits == 1, else the workspace planes.
struct AttentionKernelParams {
  const float* q = nullptr;
  const uint16_t* k = nullptr;  // bf16 bits
  const uint16_t* v = nullptr;  // bf16 bits; GQA only
  const int32_t* block_table = nullptr;
  const int32_t* row_seq = nullptr;
  const int32_t* row_kv_len = nullptr;
  const int32_t* row_kv_start = nullptr;  // null: every row starts at key 0
  float* o = nullptr;
  float* lse = nullptr;
  int num_rows = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // GQA: qk == v
  int page_size = 0;
  int max_pages_per_seq = 0;
  int keys_per_split = 0;
  int num_splits = 1;
  float scale_log2 = 0.0f;  // softmax scale times log2(e): the kernels work in base 2
};

cudaError_t LaunchGqaAttention(const AttentionKernelParams& p, cudaStream_t stream);
cudaError_t LaunchMlaAttentionCudaCore(const AttentionKernelParams& p, cudaStream_t stream);
cudaError_t LaunchMlaAttentionTensorCore(const AttentionKernelParams& p, cudaStream_t stream);

}  // namespace ctxpar::cuda
