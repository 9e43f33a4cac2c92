// Merge of N partial states, a2a pack, and the fused a2a unpack + merge.
//
// One thread per (state, 8 consecutive dims): it computes the state's merge weights with
// merge.h's MergeScales (the n lse values are re-read by the head_dim / 8 threads of a state,
// from L1) and writes 8 merged outputs with 16-byte stores. Sources are addressed as planes with
// a byte stride, so the split-KV merge (planes of fp32 workspace) and the a2a unpack (slots of
// the receive buffer) are the same kernel.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ctxpar/cuda_combine.h"
#include "ctxpar/merge.h"
#include "cuda/combine_kernels.h"
#include "cuda/device_util.cuh"

namespace ctxpar::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ void LoadAsFloat8(const T* src, float* out);

template <>
__device__ __forceinline__ void LoadAsFloat8<float>(const float* src, float* out) {
  const float4 a = reinterpret_cast<const float4*>(src)[0];
  const float4 b = reinterpret_cast<const float4*>(src)[1];
  out[0] = a.x;
  out[1] = a.y;
  out[2] = a.z;
  out[3] = a.w;
  out[4] = b.x;
  out[5] = b.y;
  out[6] = b.z;
  out[7] = b.w;
}

template <>
__device__ __forceinline__ void LoadAsFloat8<uint16_t>(const uint16_t* src, float* out) {
  Bf16x8ToFloat(*reinterpret_cast<const uint4*>(src), out);
}

// kN > 0: the source count is a compile-time constant (the loops unroll, weights stay in
// registers); kN == 0: up to kMaxMergeSources sources, count at run time.
template <typename T, int kN>
__global__ void __launch_bounds__(kThreads) MergeKernel(const MergePlanes planes) {
  const int chunks = planes.head_dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= static_cast<int64_t>(planes.num_states) * chunks) return;
  const int state = static_cast<int>(idx / chunks);
  const int d0 = static_cast<int>(idx % chunks) * 8;
  const int n = kN > 0 ? kN : planes.n;

  float scale[kN > 0 ? kN : kMaxMergeSources];
  const float merged_lse = MergeScales(planes.lse + state, n, planes.lse_stride, scale);

  float out[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const char* base = static_cast<const char*>(planes.o);
  for (int r = 0; r < n; ++r) {
    if (scale[r] == 0.0f) continue;  // an empty (or poisoned) partial contributes nothing
    float v[8];
    LoadAsFloat8(reinterpret_cast<const T*>(base + r * planes.o_stride_bytes) +
                     static_cast<int64_t>(state) * planes.head_dim + d0,
                 v);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = fmaf(scale[r], v[i], out[i]);
  }
  float4* dst =
      reinterpret_cast<float4*>(planes.out_o + static_cast<int64_t>(state) * planes.head_dim + d0);
  dst[0] = make_float4(out[0], out[1], out[2], out[3]);
  dst[1] = make_float4(out[4], out[5], out[6], out[7]);
  if (d0 == 0 && planes.out_lse != nullptr) planes.out_lse[state] = merged_lse;
}

template <typename T>
cudaError_t LaunchMergeTyped(const MergePlanes& planes, cudaStream_t stream) {
  const int64_t threads = static_cast<int64_t>(planes.num_states) * (planes.head_dim / 8);
  if (threads == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  switch (planes.n) {
    case 1:
      MergeKernel<T, 1><<<blocks, kThreads, 0, stream>>>(planes);
      break;
    case 2:
      MergeKernel<T, 2><<<blocks, kThreads, 0, stream>>>(planes);
      break;
    case 4:
      MergeKernel<T, 4><<<blocks, kThreads, 0, stream>>>(planes);
      break;
    case 8:
      MergeKernel<T, 8><<<blocks, kThreads, 0, stream>>>(planes);
      break;
    default:
      MergeKernel<T, 0><<<blocks, kThreads, 0, stream>>>(planes);
      break;
  }
  return cudaGetLastError();
}

template <typename T>
__device__ __forceinline__ void StoreFromFloat8(const float* v, T* dst);

template <>
__device__ __forceinline__ void StoreFromFloat8<float>(const float* v, float* dst) {
  reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

template <>
__device__ __forceinline__ void StoreFromFloat8<uint16_t>(const float* v, uint16_t* dst) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(PackBf16x2(v[0], v[1]), PackBf16x2(v[2], v[3]),
                                              PackBf16x2(v[4], v[5]), PackBf16x2(v[6], v[7]));
}

// One thread per (row, widened head, 8 dims).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PackKernel(const float* o, const float* lse, char* send, int n, int batch, int h, int head_dim,
               int64_t slot_bytes, int64_t lse_offset_bytes) {
  const int chunks = head_dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= static_cast<int64_t>(batch) * n * h * chunks) return;
  const int64_t state = idx / chunks;  // (row, widened head)
  const int d0 = static_cast<int>(idx % chunks) * 8;
  const int row = static_cast<int>(state / (n * h));
  const int head = static_cast<int>(state % (n * h));
  const int peer = head / h;
  const int local = row * h + head % h;
  float v[8];
  LoadAsFloat8(o + state * head_dim + d0, v);
  char* slot = send + peer * slot_bytes;
  StoreFromFloat8(v, reinterpret_cast<T*>(slot) + static_cast<int64_t>(local) * head_dim + d0);
  if (d0 == 0) reinterpret_cast<float*>(slot + lse_offset_bytes)[local] = lse[state];
}

}  // namespace

cudaError_t LaunchMerge(const MergePlanes& planes, DataType dtype, cudaStream_t stream) {
  return dtype == DataType::kF32 ? LaunchMergeTyped<float>(planes, stream)
                                   : LaunchMergeTyped<uint16_t>(planes, stream);
}

cudaError_t LaunchPack(const float* o, const float* lse, void* send, const CudaA2aParams& a,
                       int64_t slot_bytes, int64_t lse_offset_bytes, cudaStream_t stream) {
  const int64_t threads = static_cast<int64_t>(a.batch) * a.n * a.heads_per_rank * (a.head_dim / 8);
  if (threads == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  char* dst = static_cast<char*>(send);
  if (a.o_dtype == DataType::kF32) {
    PackKernel<float><<<blocks, kThreads, 0, stream>>>(o, lse, dst, a.n, a.batch, a.heads_per_rank,
                                                       a.head_dim, slot_bytes, lse_offset_bytes);
  } else {
    PackKernel<uint16_t><<<blocks, kThreads, 0, stream>>>(
        o, lse, dst, a.n, a.batch, a.heads_per_rank, a.head_dim, slot_bytes, lse_offset_bytes);
  }
  return cudaGetLastError();
}

}  // namespace ctxpar::cuda
