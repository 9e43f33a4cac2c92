// The merge and pack kernels' launchers (internal to src/cuda). Validation lives in combine.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ctxpar/cuda_combine.h"

namespace ctxpar::cuda {

inline constexpr int kMaxMergeSources = 256;

// n source planes: source r's O of state s at (char*)o + r * o_stride_bytes, element
// s * head_dim; its lse at lse[r * lse_stride + s].
struct MergePlanes {
  const void* o = nullptr;
  int64_t o_stride_bytes = 0;
  const float* lse = nullptr;
  int lse_stride = 0;
  int n = 0;
  int num_states = 0;
  int head_dim = 0;
  float* out_o = nullptr;
  float* out_lse = nullptr;  // may be null
};

cudaError_t LaunchMerge(const MergePlanes& planes, DataType dtype, cudaStream_t stream);

cudaError_t LaunchPack(const float* o, const float* lse, void* send, const CudaA2aParams& a,
                       int64_t slot_bytes, int64_t lse_offset_bytes, cudaStream_t stream);

}  // namespace ctxpar::cuda
