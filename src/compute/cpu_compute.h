// The CPU implementation of the compute seam (compute.h): the kernels of linear.h, matmul_f32.h
// and elementwise.h and PartialAttentionCpu, each dispatching on the CPU's ISA at run time, rows
// split over a thread pool. Two flavours differ in how quantized weights take activations: fp32
// (`--dtype float32`, ActFormat::kF32: the FMA kernels, transformers' goldens), int8 on the matrix
// units (`--dtype auto`, kInt8: AMX, AVX512-VNNI, AVX-VNNI or AVX2) or llama.cpp's Q8 blocks
// (kQ8). Memory is the host's (HostAllocator).
//
// Thread safety: one rank's thread drives it (and its pool).
#pragma once

#include <span>
#include <string>

#include "compute/compute.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar::compute {

class CpuCompute final : public Compute {
 public:
  // `pool` (not owned, may be null: one thread) runs the kernels' rows.
  CpuCompute(ThreadPool* pool, ActFormat format) : pool_(pool), format_(format) {}

  Device device() const override { return Device::kCpu; }
  Expected<DeviceBuffer> Allocate(std::size_t bytes) const override {
    return HostAllocator().Allocate(bytes);
  }
  std::string Describe() const override;
  ActFormat act_format() const override { return format_; }
  ThreadPool* host_threads() const override { return pool_; }

  void MatMul(std::span<const MatMulOut> outs, const Tensor& x) override;
  void MatMul(const F32Matrix& w, const Tensor& x, const Tensor& y) override;
  void RmsNorm(const Tensor& x, const float* weight, float eps, const Tensor& y) override;
  void AddRmsNorm(const Tensor& y, const float* weight, float eps, const Tensor& x) override;
  void SumsOfSquares(const Tensor& x, int group, double* out, std::int64_t out_ld) override;
  void ScaleRows(const Tensor& x, const float* scales, const float* weight) override;
  void AddBias(const Tensor& x, const float* bias) override;
  void Add(const Tensor& x, const Tensor& y) override;
  void Rope(RopeStyle style, const RopeAngles& angles, std::span<const int> positions,
            std::span<const RopeTarget> targets) override;
  void Gated(GatedActivation act, const Tensor& gate, const Tensor& up, const Tensor& out) override;
  Status PartialAttention(const PartialAttentionParams& params) override;
  Status Synchronize() override { return Status::Ok(); }

 private:
  ThreadPool* pool_;
  ActFormat format_;
  Acts acts_;
  std::vector<float> normed_;
};

}  // namespace ctxpar::compute
