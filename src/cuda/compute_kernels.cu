// CudaCompute's kernels. Built with --fmad=false (CMakeLists.txt), as the CPU kernels are with
// -ffp-contract=off: a product followed by an add must round twice, as it does there, and the
// fused multiply-adds the sequences prescribe are written as fmaf.
//
// The matmuls and the row reductions give each output to a half-warp: lane l accumulates the
// elements c with c % 16 == l in increasing c, and the 16 lanes then reduce pairwise (l + 8,
// l + 4, l + 2, l + 1) by shuffles, which is the CPU's 16-lane sequence itself.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/compute_kernels.h"

namespace ctxpar::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kLanes = 16;
constexpr int kThreads = 128;
constexpr int kHalvesPerBlock = kThreads / kLanes;
constexpr int kTokenTile = 8;  // tokens a half-warp computes per weight row it reads
constexpr int kMaxGridY = 65535;
constexpr int kElementwiseBlocks = 4096;             // grid-stride loops cover the rest
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // elementwise.cpp's constant

template <typename T>
__device__ __forceinline__ T ReduceHalfWarp(T v) {
  v += __shfl_down_sync(kFullMask, v, 8, kLanes);
  v += __shfl_down_sync(kFullMask, v, 4, kLanes);
  v += __shfl_down_sync(kFullMask, v, 2, kLanes);
  v += __shfl_down_sync(kFullMask, v, 1, kLanes);
  return v;
}

__device__ __forceinline__ float HalfAt(const std::uint8_t* p) {
  // Byte loads: a block's scale need not be 2-byte aligned in every layout.
  const auto bits = static_cast<unsigned short>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

// Elements l and 16 + l of the group at blk, dequantized as linear.h's fp32 sequence does.
template <KernelWeight kType>
__device__ __forceinline__ void GroupWeights(const std::uint8_t* blk, int l, float& w0, float& w1) {
  if constexpr (kType == KernelWeight::kF32) {
    const auto* f = reinterpret_cast<const float*>(blk);
    w0 = f[l];
    w1 = f[16 + l];
  } else if constexpr (kType == KernelWeight::kF16) {
    w0 = HalfAt(blk + 2 * l);
    w1 = HalfAt(blk + 2 * (16 + l));
  } else if constexpr (kType == KernelWeight::kBF16) {
    w0 = __uint_as_float(static_cast<unsigned>(blk[2 * l] | (blk[2 * l + 1] << 8)) << 16);
    w1 = __uint_as_float(static_cast<unsigned>(blk[32 + 2 * l] | (blk[33 + 2 * l] << 8)) << 16);
  } else if constexpr (kType == KernelWeight::kQ8_0) {
    const float d = HalfAt(blk);
    w0 = float(static_cast<std::int8_t>(blk[2 + l])) * d;
    w1 = float(static_cast<std::int8_t>(blk[18 + l])) * d;
  } else if constexpr (kType == KernelWeight::kQ4_0) {
    const float d = HalfAt(blk);
    const int q = blk[2 + l];
    w0 = float((q & 0xF) - 8) * d;
    w1 = float((q >> 4) - 8) * d;
  } else {
    static_assert(kType == KernelWeight::kQ4_1);
    const float d = HalfAt(blk);
    const float m = HalfAt(blk + 2);
    const int q = blk[4 + l];
    w0 = fmaf(float(q & 0xF), d, m);
    w1 = fmaf(float(q >> 4), d, m);
  }
}

// Block (x, y): rows [8x, 8x + 8), one per half-warp, times tokens [8y, 8y + 8) (token_base
// added). Each group's weights are dequantized once for the tile's tokens.
template <KernelWeight kType>
__global__ void __launch_bounds__(kThreads) MatMulKernel(const MatMulArgs a, int token_base) {
  const int lane = threadIdx.x % kLanes;
  const int row = blockIdx.x * kHalvesPerBlock + threadIdx.x / kLanes;
  const int t0 = token_base + blockIdx.y * kTokenTile;
  const int nt = min(kTokenTile, a.n - t0);
  const bool valid = row < a.rows;
  float acc[kTokenTile];
#pragma unroll
  for (int t = 0; t < kTokenTile; ++t) acc[t] = 0.0f;
  if (valid) {
    const std::uint8_t* wr = a.w + row * a.row_stride;
    const float* x = a.x + static_cast<std::int64_t>(t0) * a.ldx;
    const int groups = a.cols / 32;
    for (int g = 0; g < groups; ++g) {
      float w0, w1;
      GroupWeights<kType>(wr + g * a.block_bytes, lane, w0, w1);
      const int c = g * 32 + lane;
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) {
        if (t < nt) {
          const float* xt = x + t * a.ldx;
          acc[t] = fmaf(w0, xt[c], acc[t]);
          acc[t] = fmaf(w1, xt[c + 16], acc[t]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTokenTile; ++t) {
    const float v = ReduceHalfWarp(acc[t]);
    if (valid && lane == 0 && t < nt) a.y[static_cast<std::int64_t>(t0 + t) * a.ldy + row] = v;
  }
}

__global__ void __launch_bounds__(kThreads) MatMulF32Kernel(const MatMulF32Args a, int token_base) {
  const int lane = threadIdx.x % kLanes;
  const int row = blockIdx.x * kHalvesPerBlock + threadIdx.x / kLanes;
  const int t0 = token_base + blockIdx.y * kTokenTile;
  const int nt = min(kTokenTile, a.n - t0);
  const bool valid = row < a.rows;
  float acc[kTokenTile];
#pragma unroll
  for (int t = 0; t < kTokenTile; ++t) acc[t] = 0.0f;
  if (valid) {
    const float* wr = a.w + row * a.ldw;
    const float* x = a.x + static_cast<std::int64_t>(t0) * a.ldx;
    for (int c = lane; c < a.cols; c += kLanes) {
      const float w = wr[c];
#pragma unroll
      for (int t = 0; t < kTokenTile; ++t) {
        if (t < nt) acc[t] = fmaf(x[t * a.ldx + c], w, acc[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTokenTile; ++t) {
    const float v = ReduceHalfWarp(acc[t]);
    if (valid && lane == 0 && t < nt) a.y[static_cast<std::int64_t>(t0 + t) * a.ldy + row] = v;
  }
}

// Launches kernel over rows in blocks of 8 and tokens in tiles of 8, in slices of tokens that
// keep gridDim.y within its limit.
template <typename Args, typename Kernel>
cudaError_t LaunchRowsByTokens(Kernel kernel, const Args& a, cudaStream_t stream) {
  if (a.rows == 0 || a.n == 0) return cudaSuccess;
  const unsigned row_blocks = (a.rows + kHalvesPerBlock - 1) / kHalvesPerBlock;
  const int tiles = (a.n + kTokenTile - 1) / kTokenTile;
  for (int tile = 0; tile < tiles; tile += kMaxGridY) {
    const dim3 grid(row_blocks, std::min(kMaxGridY, tiles - tile));
    kernel<<<grid, kThreads, 0, stream>>>(a, tile * kTokenTile);
  }
  return cudaGetLastError();
}

// SumOfSquares (elementwise.h) of x[0, dim) by the half-warp, in every lane.
__device__ __forceinline__ double SumOfSquares(const float* x, std::int64_t dim, int lane) {
  double s = 0.0;
  for (std::int64_t i = lane; i < dim; i += kLanes) {
    const double v = x[i];
    s += v * v;
  }
  return __shfl_sync(kFullMask, ReduceHalfWarp(s), 0, kLanes);
}

__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const Rows in, const float* weight, float eps, const Rows out, bool accumulate) {
  const int lane = threadIdx.x % kLanes;
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * kHalvesPerBlock + threadIdx.x / kLanes;
  const bool valid = row < in.rows;
  const float* x = in.data + (valid ? row : 0) * in.ld;
  const double sum = SumOfSquares(x, valid ? in.cols : 0, lane);
  if (!valid) return;
  const float scale = 1.0f / sqrtf(float(sum / double(in.cols)) + eps);
  float* y = out.data + row * out.ld;
  for (std::int64_t i = lane; i < in.cols; i += kLanes) {
    const float v = x[i] * scale * weight[i];
    y[i] = accumulate ? y[i] + v : v;
  }
}

__global__ void __launch_bounds__(kThreads)
    SumsOfSquaresKernel(const Rows x, int group, double* out, std::int64_t out_ld) {
  const int lane = threadIdx.x % kLanes;
  const std::int64_t groups = x.cols / group;
  const std::int64_t item =
      static_cast<std::int64_t>(blockIdx.x) * kHalvesPerBlock + threadIdx.x / kLanes;
  const bool valid = item < x.rows * groups;
  const std::int64_t r = valid ? item / groups : 0;
  const std::int64_t g = valid ? item % groups : 0;
  const double sum = SumOfSquares(x.data + r * x.ld + g * group, valid ? group : 0, lane);
  if (valid && lane == 0) out[r * out_ld + g] = sum;
}

unsigned HalfWarpBlocks(std::int64_t items) {
  return static_cast<unsigned>((items + kHalvesPerBlock - 1) / kHalvesPerBlock);
}

// Calls f(r, c) for each element of a [rows, cols] grid, one thread per element, grid-stride.
template <typename F>
__device__ __forceinline__ void ForEachElement(std::int64_t rows, std::int64_t cols, F f) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < rows * cols; i += stride) {
    f(i / cols, i % cols);
  }
}

__global__ void ScaleRowsKernel(const Rows x, const float* scales, const float* weight) {
  ForEachElement(x.rows, x.cols, [&](std::int64_t r, std::int64_t c) {
    float& v = x.data[r * x.ld + c];
    v = v * scales[r];
    if (weight != nullptr) v = v * weight[c];
  });
}

__global__ void AddBiasKernel(const Rows x, const float* bias) {
  ForEachElement(x.rows, x.cols,
                 [&](std::int64_t r, std::int64_t c) { x.data[r * x.ld + c] += bias[c]; });
}

__global__ void AddKernel(const Rows x, const Rows y) {
  ForEachElement(x.rows, x.cols, [&](std::int64_t r, std::int64_t c) {
    x.data[r * x.ld + c] += y.data[r * y.ld + c];
  });
}

// One thread per (row, head, pair) element of the grid [rows, num_heads * half].
__global__ void RopeKernel(bool neox, const Rows x, int num_heads, int head_stride,
                           const float* cos_sin, int rope_dims) {
  const int half = rope_dims / 2;
  const std::int64_t pairs = static_cast<std::int64_t>(num_heads) * half;
  ForEachElement(x.rows, pairs, [&](std::int64_t r, std::int64_t c) {
    const int h = static_cast<int>(c / half);
    const int p = static_cast<int>(c % half);
    const float cs = cos_sin[r * rope_dims + 2 * p];
    const float sn = cos_sin[r * rope_dims + 2 * p + 1];
    float* v = x.data + r * x.ld + static_cast<std::int64_t>(h) * head_stride;
    const int i0 = neox ? p : 2 * p;
    const int i1 = neox ? p + half : 2 * p + 1;
    const float x0 = v[i0];
    const float x1 = v[i1];
    v[i0] = x0 * cs - x1 * sn;
    v[i1] = x0 * sn + x1 * cs;
  });
}

template <KernelGate kAct>
__global__ void GatedKernel(const Rows gate, const Rows up, const Rows out, float alpha,
                            float limit) {
  ForEachElement(gate.rows, gate.cols, [&](std::int64_t r, std::int64_t c) {
    const float g = gate.data[r * gate.ld + c];
    const float u = up.data[r * up.ld + c];
    float y;
    if constexpr (kAct == KernelGate::kSwiGlu) {
      y = g / (1.0f + expf(-g)) * u;
    } else if constexpr (kAct == KernelGate::kGeGlu) {
      const float cube = 0.044715f * g * g * g;
      const float arg = -2.0f * (kSqrt2OverPi * (g + cube));
      y = g / (1.0f + expf(arg)) * u;
    } else {
      // std::min and std::clamp's comparisons, so that NaN passes through as on the CPU.
      const float gc = limit < g ? limit : g;
      const float uc = u < -limit ? -limit : (limit < u ? limit : u);
      y = gc / (1.0f + expf(-alpha * gc)) * (uc + 1.0f);
    }
    out.data[r * out.ld + c] = y;
  });
}

unsigned ElementBlocks(std::int64_t elements) {
  return static_cast<unsigned>(
      std::clamp<std::int64_t>((elements + kThreads - 1) / kThreads, 1, kElementwiseBlocks));
}

}  // namespace

cudaError_t ProbeKernelImage() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, MatMulF32Kernel);
}

cudaError_t LaunchMatMul(const MatMulArgs& a, cudaStream_t stream) {
  switch (a.type) {
    case KernelWeight::kF32:
      return LaunchRowsByTokens(MatMulKernel<KernelWeight::kF32>, a, stream);
    case KernelWeight::kF16:
      return LaunchRowsByTokens(MatMulKernel<KernelWeight::kF16>, a, stream);
    case KernelWeight::kBF16:
      return LaunchRowsByTokens(MatMulKernel<KernelWeight::kBF16>, a, stream);
    case KernelWeight::kQ8_0:
      return LaunchRowsByTokens(MatMulKernel<KernelWeight::kQ8_0>, a, stream);
    case KernelWeight::kQ4_0:
      return LaunchRowsByTokens(MatMulKernel<KernelWeight::kQ4_0>, a, stream);
    case KernelWeight::kQ4_1:
      return LaunchRowsByTokens(MatMulKernel<KernelWeight::kQ4_1>, a, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchMatMulF32(const MatMulF32Args& a, cudaStream_t stream) {
  return LaunchRowsByTokens(MatMulF32Kernel, a, stream);
}

cudaError_t LaunchRmsNorm(const Rows& in, const float* weight, float eps, const Rows& out,
                          bool accumulate, cudaStream_t stream) {
  if (in.rows == 0) return cudaSuccess;
  RmsNormKernel<<<HalfWarpBlocks(in.rows), kThreads, 0, stream>>>(in, weight, eps, out, accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchSumsOfSquares(const Rows& x, int group, double* out, std::int64_t out_ld,
                                cudaStream_t stream) {
  const std::int64_t items = x.rows * (x.cols / group);
  if (items == 0) return cudaSuccess;
  SumsOfSquaresKernel<<<HalfWarpBlocks(items), kThreads, 0, stream>>>(x, group, out, out_ld);
  return cudaGetLastError();
}

cudaError_t LaunchScaleRows(const Rows& x, const float* scales, const float* weight,
                            cudaStream_t stream) {
  if (x.rows * x.cols == 0) return cudaSuccess;
  ScaleRowsKernel<<<ElementBlocks(x.rows * x.cols), kThreads, 0, stream>>>(x, scales, weight);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(const Rows& x, const float* bias, cudaStream_t stream) {
  if (x.rows * x.cols == 0) return cudaSuccess;
  AddBiasKernel<<<ElementBlocks(x.rows * x.cols), kThreads, 0, stream>>>(x, bias);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(const Rows& x, const Rows& y, cudaStream_t stream) {
  if (x.rows * x.cols == 0) return cudaSuccess;
  AddKernel<<<ElementBlocks(x.rows * x.cols), kThreads, 0, stream>>>(x, y);
  return cudaGetLastError();
}

cudaError_t LaunchRope(bool neox, const Rows& x, int num_heads, int head_stride,
                       const float* cos_sin, int rope_dims, cudaStream_t stream) {
  const std::int64_t elements = x.rows * num_heads * (rope_dims / 2);
  if (elements == 0) return cudaSuccess;
  RopeKernel<<<ElementBlocks(elements), kThreads, 0, stream>>>(neox, x, num_heads, head_stride,
                                                               cos_sin, rope_dims);
  return cudaGetLastError();
}

cudaError_t LaunchGated(KernelGate act, const Rows& gate, const Rows& up, const Rows& out,
                        float alpha, float limit, cudaStream_t stream) {
  const std::int64_t elements = gate.rows * gate.cols;
  if (elements == 0) return cudaSuccess;
  const unsigned blocks = ElementBlocks(elements);
  switch (act) {
    case KernelGate::kSwiGlu:
      GatedKernel<KernelGate::kSwiGlu>
          <<<blocks, kThreads, 0, stream>>>(gate, up, out, alpha, limit);
      break;
    case KernelGate::kGeGlu:
      GatedKernel<KernelGate::kGeGlu><<<blocks, kThreads, 0, stream>>>(gate, up, out, alpha, limit);
      break;
    case KernelGate::kSwiGluOai:
      GatedKernel<KernelGate::kSwiGluOai>
          <<<blocks, kThreads, 0, stream>>>(gate, up, out, alpha, limit);
      break;
  }
  return cudaGetLastError();
}

}  // namespace ctxpar::cuda
