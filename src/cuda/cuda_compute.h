// CudaCompute: the compute seam (compute/compute.h) on one CUDA device.
//
// Contract and limits:
// - Memory: Allocate hands out zero-filled managed memory (cudaMallocManaged), which the host
//   and the kernels both address; every Tensor an op takes is kCuda, fp32, and in memory the
//   device can address (managed, device or pinned host memory; pageable host memory is refused).
// - Weights: QuantMatrix and F32Matrix data are host pointers to immutable data (the mmapped
//   GGUF file). Each matrix is uploaded to device memory the first time an op uses it, cached by
//   its host address and size for the CudaCompute's life, and must not change afterwards. The
//   small host arrays (norm weights, biases, row scales, RoPE's cos/sin table, which the host
//   computes from RopeAngles) are copied to device scratch at every call: pageable memory is read
//   before the call returns, managed or pinned memory when the op runs on the stream.
// - MatMul takes F32, F16, BF16, Q8_0, Q4_0 and Q4_1 weights with fp32 activations
//   (act_format() is kF32), computed by linear.h's fp32 sequence; MatMulF32 by matmul_f32.h's.
//   Both, and RmsNorm, AddRmsNorm, SumsOfSquares, ScaleRows, AddBias, Add and Rope, give the CPU
//   kernels' bits; the gated activations differ from them by CUDA's expf (a few ulp).
// - Errors: an op that returns void enqueues nothing when it refuses an argument (MatMul: that
//   output) and records the error; Synchronize returns the first recorded error (or a CUDA fault)
//   once, then clears it. A weight type outside the list above also fills that output's y with NaN,
//   as the CPU does for an activation format it refuses (linear.h's CheckActFormat).
// - PartialAttention: PartialAttentionCuda's shapes (cuda_attention.h) over bf16 KV in kRows
//   pages; other KV dtypes are Unimplemented, and so are chunk states (params.chunks).
//   row_kv_len is read by the host to plan the split, so it must be managed or pinned memory
//   that no pending device work writes. split_kv_keys > 0 (a multiple of 64) keeps the split at
//   those absolute chunks (batch invariance) wherever the cache's capacity allows; otherwise the
//   plan chooses from the batch's longest row.
//
// Thread safety: one rank thread drives a CudaCompute (ops run in order on its stream);
// Allocate may be called from any thread. Both make the compute's device current on the calling
// thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "compute/compute.h"
#include "ctxpar/attention.h"
#include "ctxpar/cuda_attention.h"
#include "ctxpar/device.h"
#include "ctxpar/status.h"

namespace ctxpar::cuda {

class CudaCompute final : public compute::Compute {
 public:
  // The compute of CUDA device `device`, with its own non-blocking stream: Unavailable naming
  // the runtime's reason where there is no such device, FailedPrecondition where the kernels
  // were not built for its architecture (CMAKE_CUDA_ARCHITECTURES).
  static Expected<std::unique_ptr<CudaCompute>> Create(int device = 0);
  ~CudaCompute() override;
  CudaCompute(const CudaCompute&) = delete;
  CudaCompute& operator=(const CudaCompute&) = delete;

  // Ok for the weight types MatMul takes; Unimplemented naming the type otherwise.
  static Status CheckWeightType(compute::WeightType type);
  // Ok when `t` has the device, dtype and shape the ops take (kCuda, fp32, ld >= cols >= 0,
  // rows >= 0, data set unless empty); InvalidArgument naming `what` otherwise. Its memory is
  // checked by the ops.
  static Status CheckTensor(const compute::Tensor& t, const char* what);

  Device device() const override { return Device::kCuda; }
  Expected<DeviceBuffer> Allocate(std::size_t bytes) const override;

  std::string Describe() const override;
  compute::ActFormat act_format() const override { return compute::ActFormat::kF32; }
  // The host loops around the ops run on the caller's thread.
  ThreadPool* host_threads() const override { return nullptr; }

  void MatMul(std::span<const compute::MatMulOut> outs, const compute::Tensor& x) override;
  void MatMul(const compute::F32Matrix& w, const compute::Tensor& x,
              const compute::Tensor& y) override;
  void RmsNorm(const compute::Tensor& x, const float* weight, float eps,
               const compute::Tensor& y) override;
  void AddRmsNorm(const compute::Tensor& y, const float* weight, float eps,
                  const compute::Tensor& x) override;
  void SumsOfSquares(const compute::Tensor& x, int group, double* out,
                     std::int64_t out_ld) override;
  void ScaleRows(const compute::Tensor& x, const float* scales, const float* weight) override;
  void AddBias(const compute::Tensor& x, const float* bias) override;
  void Add(const compute::Tensor& x, const compute::Tensor& y) override;
  void Rope(compute::RopeStyle style, const compute::RopeAngles& angles,
            std::span<const int> positions, std::span<const compute::RopeTarget> targets) override;
  void Gated(compute::GatedActivation act, const compute::Tensor& gate, const compute::Tensor& up,
             const compute::Tensor& out) override;
  Status PartialAttention(const PartialAttentionParams& params) override;
  Status Synchronize() override;

 private:
  struct HostArray {
    const void* data;
    std::size_t bytes;
  };
  struct WeightKey {
    const void* data;
    std::size_t bytes;
    bool operator==(const WeightKey&) const = default;
  };
  struct WeightKeyHash {
    std::size_t operator()(const WeightKey& k) const;
  };

  CudaCompute(int device, cudaStream_t stream, const cudaDeviceProp& prop);

  // Makes this compute's device current on the calling thread.
  Status Bind() const;
  // Keeps the first error for Synchronize.
  void Record(Status status);
  // CheckTensor and that the device can address t's memory.
  Status CheckOperand(const compute::Tensor& t, const char* what) const;
  Status CheckAddressable(const void* p, const char* what) const;
  // The device copy of immutable host data, uploaded on first use.
  Expected<const void*> Resident(const void* host, std::size_t bytes);
  // Copies `arrays` to this op's scratch (stream-ordered after the earlier ops, which are done
  // with the previous contents); device[i] is arrays[i]'s copy.
  Status Stage(std::span<const HostArray> arrays, const void** device);
  // Device memory of at least `bytes` in *buffer, reallocated (after the stream drains) when it
  // is smaller.
  Status Reserve(DeviceBuffer* buffer, std::size_t bytes);
  Status MatMulOne(const compute::MatMulOut& out, const compute::Tensor& x);
  // out = RmsNorm(in), or out += it with `accumulate`.
  Status Norm(std::string_view op, const compute::Tensor& in, const float* weight, float eps,
              const compute::Tensor& out, bool accumulate);
  // The split of `params` for rows of at most max_kv_len keys (split_kv_keys where it can).
  Expected<CudaAttentionPlan> PlanAttention(const PartialAttentionParams& params, int max_kv_len);

  int device_;
  cudaStream_t stream_;
  std::string name_;
  int sm_major_;
  int sm_minor_;
  int num_sms_;
  bool concurrent_managed_;  // the host may read managed memory while kernels run
  std::unordered_map<WeightKey, DeviceBuffer, WeightKeyHash> weights_;
  DeviceBuffer scratch_;
  DeviceBuffer workspace_;
  Status error_;
};

}  // namespace ctxpar::cuda
