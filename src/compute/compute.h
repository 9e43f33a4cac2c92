// The compute seam: the operations a model's layers run (matmuls of every weight type, norms,
// RoPE, gated activations, row scaling and partial attention), on tensors that carry their device
// and dtype, behind one interface with one implementation per device (docs/compute.md):
//
// - CPU (cpu_compute.h): the fp32 kernels (`--dtype float32`, transformers' goldens) or the
//   matrix-unit kernels (`--dtype auto`: int8 products on AMX / VNNI), chosen per ISA at run time
//   inside the kernels; the pool's threads split the rows.
// - CUDA (src/cuda/cuda_compute.h, where nvcc builds it): the same operations as kernels on one
//   device, on device (managed) memory.
//
// A layer names neither an ISA nor a device: it holds a Compute& and calls these. The
// collectives of tensor and context parallelism stay in the layers (tp_linear.h, dcp_attention.h)
// and pass host-visible memory.
//
// Shapes: a Tensor is a row-major [rows, cols] view with `ld` elements between rows. Every
// operation below takes fp32 tensors on the implementation's device (kCpu: host memory; kCuda:
// device or managed memory) and says how its outputs may alias its inputs. Results are the
// implementation's kernels' bits; on the CPU they are those of linear.h, matmul_f32.h and
// elementwise.h, batch-invariant (a row's result does not depend on the other rows).
//
// Thread safety: one Compute per rank thread; calls run in order (on CUDA, on the compute's
// stream; Synchronize waits for them).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "compute/elementwise.h"
#include "compute/linear.h"
#include "compute/matmul_f32.h"
#include "ctxpar/attention.h"
#include "ctxpar/device.h"
#include "ctxpar/dtype.h"
#include "ctxpar/status.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar::compute {

struct Tensor {
  void* data = nullptr;
  DataType dtype = DataType::kF32;
  Device device = Device::kCpu;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t ld = 0;  // elements between rows, >= cols

  float* f32() const { return static_cast<float*>(data); }
  float* Row(std::int64_t r) const { return f32() + r * ld; }
};

// An fp32 view of [rows, cols] at `data` (ld 0: cols) on `device`. Operations write only the
// tensors their contract names as outputs, so a const input may be viewed this way.
inline Tensor F32(const float* data, std::int64_t rows, std::int64_t cols, std::int64_t ld = 0,
                  Device device = Device::kCpu) {
  return {const_cast<float*>(data), DataType::kF32, device, rows, cols, ld == 0 ? cols : ld};
}

// One tensor RoPE rotates: rows of num_heads heads, head h at Row(r) + h * head_stride.
struct RopeTarget {
  Tensor x;
  int num_heads = 0;
  int head_stride = 0;
};

class Compute : public DeviceAllocator {
 public:
  // The kernels this implementation runs on this machine, for `ctxpar check`: e.g.
  // "cpu: matmul int8 amx, fp32 avx512; attention avx512".
  virtual std::string Describe() const = 0;
  // How activations enter the products of quantized weights; the loaders repack weights for it
  // (WithInt8Pack) once, at load.
  virtual ActFormat act_format() const = 0;
  // Threads for the host-side loops around the operations (the DCP group's exact merge), or
  // null: the caller's thread.
  virtual ThreadPool* host_threads() const = 0;

  // Each out.y [n, out.w.rows] (row stride out.ldy) = x W^T over x [n, w.cols]; the outputs share
  // x, and none aliases it.
  virtual void MatMul(std::span<const MatMulOut> outs, const Tensor& x) = 0;
  // y [n, w.rows] = x W^T over x [n, w.cols] (fp32 weights); y does not alias x.
  virtual void MatMul(const F32Matrix& w, const Tensor& x, const Tensor& y) = 0;

  // y = RmsNorm(x) with `weight` [x.cols] per row (elementwise.h); y may alias x.
  virtual void RmsNorm(const Tensor& x, const float* weight, float eps, const Tensor& y) = 0;
  // x += RmsNorm(y) with `weight` per row (a post-norm before the residual add).
  virtual void AddRmsNorm(const Tensor& y, const float* weight, float eps, const Tensor& x) = 0;
  // out[r, g] (row stride out_ld) = SumOfSquares of x's row r's group g of `group` columns, in
  // double by RmsNorm's sequence (the sums of a norm split over ranks); x.cols % group == 0.
  virtual void SumsOfSquares(const Tensor& x, int group, double* out, std::int64_t out_ld) = 0;
  // x[r, c] *= scales[r], then *= weight[c] where weight is given.
  virtual void ScaleRows(const Tensor& x, const float* scales, const float* weight) = 0;
  // x[r, c] += bias[c].
  virtual void AddBias(const Tensor& x, const float* bias) = 0;
  // x += y.
  virtual void Add(const Tensor& x, const Tensor& y) = 0;
  // Rotates each target's rows, row r at positions[r] (every target has positions.size() rows),
  // computing each position's angles once for all targets (elementwise.h's Rope).
  virtual void Rope(RopeStyle style, const RopeAngles& angles, std::span<const int> positions,
                    std::span<const RopeTarget> targets) = 0;
  // out = act(gate, up) elementwise (same shapes); out may alias neither input.
  virtual void Gated(GatedActivation act, const Tensor& gate, const Tensor& up,
                     const Tensor& out) = 0;

  // The partial attention of one rank over its KV shard (attention.h's contract; its pointers on
  // this device; pool and num_threads are the implementation's own).
  virtual Status PartialAttention(const PartialAttentionParams& params) = 0;

  // Waits for the calls issued so far (a no-op where they run synchronously).
  virtual Status Synchronize() = 0;
};

}  // namespace ctxpar::compute
