// The launchers of CudaCompute's kernels (internal to src/cuda; validation lives in
// cuda_compute.cpp). Plain structs only: nvcc compiles the kernels as C++17, without the seam's
// headers.
//
// Numerics: every kernel performs the CPU kernels' operations in their order (compute/linear.h's
// fp32 sequence, matmul_f32.h, elementwise.h), so results are their bits, except the gated
// activations, whose expf is CUDA's (within 2 ulp of glibc's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ctxpar::cuda {

// cudaSuccess when the current device can run these kernels (CMAKE_CUDA_ARCHITECTURES has its
// architecture), else the runtime's error.
cudaError_t ProbeKernelImage();

// The weight types the matmul kernel dequantizes (compute::WeightType's subset).
enum class KernelWeight { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1 };

// y[t * ldy + r] = sum_c W[r, c] x[t * ldx + c]; W in 32-element groups of block_bytes each.
struct MatMulArgs {
  KernelWeight type = KernelWeight::kF32;
  const std::uint8_t* w = nullptr;
  std::int64_t row_stride = 0;  // bytes
  std::int64_t block_bytes = 0;
  int rows = 0;
  int cols = 0;  // a multiple of 32
  const float* x = nullptr;
  std::int64_t ldx = 0;
  int n = 0;
  float* y = nullptr;
  std::int64_t ldy = 0;
};
cudaError_t LaunchMatMul(const MatMulArgs& a, cudaStream_t stream);

// The same over fp32 weights of any cols (matmul_f32.h's sequence).
struct MatMulF32Args {
  const float* w = nullptr;
  std::int64_t ldw = 0;
  int rows = 0;
  int cols = 0;
  const float* x = nullptr;
  std::int64_t ldx = 0;
  int n = 0;
  float* y = nullptr;
  std::int64_t ldy = 0;
};
cudaError_t LaunchMatMulF32(const MatMulF32Args& a, cudaStream_t stream);

// A row-major fp32 [rows, cols] view, ld elements between rows.
struct Rows {
  float* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;
};

// out = RmsNorm(in) * weight, or out += that when accumulate; out may be in.
cudaError_t LaunchRmsNorm(const Rows& in, const float* weight, float eps, const Rows& out,
                          bool accumulate, cudaStream_t stream);
cudaError_t LaunchSumsOfSquares(const Rows& x, int group, double* out, std::int64_t out_ld,
                                cudaStream_t stream);
// weight may be null.
cudaError_t LaunchScaleRows(const Rows& x, const float* scales, const float* weight,
                            cudaStream_t stream);
cudaError_t LaunchAddBias(const Rows& x, const float* bias, cudaStream_t stream);
cudaError_t LaunchAdd(const Rows& x, const Rows& y, cudaStream_t stream);
// Row r's heads rotate by cos_sin[r * rope_dims ...] (RopeAngles::CosSin's layout).
cudaError_t LaunchRope(bool neox, const Rows& x, int num_heads, int head_stride,
                       const float* cos_sin, int rope_dims, cudaStream_t stream);

enum class KernelGate { kSwiGlu, kGeGlu, kSwiGluOai };
// alpha, limit: SwiGluOai's constants (elementwise.h).
cudaError_t LaunchGated(KernelGate act, const Rows& gate, const Rows& up, const Rows& out,
                        float alpha, float limit, cudaStream_t stream);

}  // namespace ctxpar::cuda
