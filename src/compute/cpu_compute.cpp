#include "compute/cpu_compute.h"

#include <fmt/format.h>

#include <algorithm>

#include "compute/linear_int8.h"
#include "ctxpar/cpu_features.h"

namespace ctxpar::compute {
namespace {

// Rows are split over the pool when there are enough of them to pay for waking it: a prefill
// chunk otherwise leaves the pool idle for about a tenth of its time. Each row's bits do not
// depend on the split.
constexpr int kParallelRows = 32;

// f(begin, end) over [0, n).
template <class F>
void ForRows(ThreadPool* pool, std::int64_t n, const F& f) {
  if (pool == nullptr || n < kParallelRows) return f(std::int64_t{0}, n);
  pool->ParallelFor(n, f);
}

}  // namespace

std::string CpuCompute::Describe() const {
  const Expected<CpuIsa> isa = SelectCpuIsa();
  std::string attention(isa.ok() ? CpuIsaName(*isa) : "scalar");
  // The bf16 paths take bf16 KV and, with AVX512_VBMI's byte lookups, fp8 KV (attention.h);
  // fp32 KV takes avx512's kernels, and fp8 without VBMI avx2's.
  if (isa.ok() && *isa >= CpuIsa::kAvx512Bf16) {
    attention += DetectCpuFeatures().avx512_vbmi ? " for bf16 / fp8 KV, avx512 for fp32"
                                                 : " for bf16 KV, avx512 for fp32, avx2 for fp8";
  }
  switch (format_) {
    case ActFormat::kInt8: {
      const std::string_view int8 = MatMulInt8Isa();
      return fmt::format(
          "cpu: matmul int8 {}{}, F16/BF16 weights bf16 {}, fp32 {} for the other types; "
          "attention {}",
          int8,
          int8 == "amx"
              ? fmt::format(" (avx512_vnni below {} tokens)", int8_internal::kAmxMinTokens)
              : "",
          MatMulBf16Isa(), MatMulIsa(), attention);
    }
    case ActFormat::kQ8:
      return fmt::format("cpu: matmul q8 blocks (llama.cpp's); attention {}", attention);
    case ActFormat::kF32:
      break;
  }
  return fmt::format("cpu: matmul fp32 {}; attention {}", MatMulIsa(), attention);
}

void CpuCompute::MatMul(std::span<const MatMulOut> outs, const Tensor& x) {
  const int n = static_cast<int>(x.rows), cols = static_cast<int>(x.cols);
  const int ldx = static_cast<int>(x.ld);
  // One preparation serves all when the outputs' types take the same activations: kQ8's blocks
  // depend on the type, and kInt8 takes int8 blocks, bf16 rows (F16, BF16) or fp32 (the rest).
  auto kind = [&](WeightType t) {
    if (format_ == ActFormat::kQ8) return static_cast<int>(t);
    if (format_ != ActFormat::kInt8) return 0;
    return Int8Takes(t) ? 1 : Bf16Takes(t) ? 2 : 0;
  };
  bool one_pass = true;
  for (const MatMulOut& o : outs) one_pass = one_pass && kind(o.w.type) == kind(outs[0].w.type);
  if (one_pass) {
    PrepareActs(format_, outs[0].w.type, x.f32(), n, cols, ldx, &acts_, pool_);
    return MatMulMany(outs, acts_, pool_);
  }
  for (const MatMulOut& o : outs) {
    PrepareActs(format_, o.w.type, x.f32(), n, cols, ldx, &acts_, pool_);
    compute::MatMul(o.w, acts_, o.y, o.ldy, pool_);
  }
}

void CpuCompute::MatMul(const F32Matrix& w, const Tensor& x, const Tensor& y) {
  MatMulF32(w, x.f32(), static_cast<int>(x.rows), static_cast<int>(x.ld), y.f32(),
            static_cast<int>(y.ld), pool_);
}

void CpuCompute::RmsNorm(const Tensor& x, const float* weight, float eps, const Tensor& y) {
  const int dim = static_cast<int>(x.cols);
  ForRows(pool_, x.rows, [&](std::int64_t begin, std::int64_t end) {
    if (x.ld == x.cols && y.ld == y.cols) {
      return compute::RmsNorm(x.Row(begin), weight, static_cast<int>(end - begin), dim, eps,
                              y.Row(begin));
    }
    for (std::int64_t r = begin; r < end; ++r) {
      compute::RmsNorm(x.Row(r), weight, 1, dim, eps, y.Row(r));
    }
  });
}

void CpuCompute::AddRmsNorm(const Tensor& y, const float* weight, float eps, const Tensor& x) {
  const std::int64_t dim = y.cols;
  normed_.resize(std::size_t(y.rows) * dim);
  ForRows(pool_, y.rows, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      float* normed = normed_.data() + r * dim;
      compute::RmsNorm(y.Row(r), weight, 1, static_cast<int>(dim), eps, normed);
      float* out = x.Row(r);
      for (std::int64_t c = 0; c < dim; ++c) out[c] += normed[c];
    }
  });
}

void CpuCompute::SumsOfSquares(const Tensor& x, int group, double* out, std::int64_t out_ld) {
  const std::int64_t groups = x.cols / group;
  ForRows(pool_, x.rows, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      for (std::int64_t g = 0; g < groups; ++g) {
        out[r * out_ld + g] = compute::SumOfSquares(x.Row(r) + g * group, group);
      }
    }
  });
}

void CpuCompute::ScaleRows(const Tensor& x, const float* scales, const float* weight) {
  ForRows(pool_, x.rows, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      float* row = x.Row(r);
      const float s = scales[r];
      if (weight == nullptr) {
        for (std::int64_t c = 0; c < x.cols; ++c) row[c] *= s;
      } else {
        for (std::int64_t c = 0; c < x.cols; ++c) row[c] = row[c] * s * weight[c];
      }
    }
  });
}

void CpuCompute::AddBias(const Tensor& x, const float* bias) {
  ForRows(pool_, x.rows, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      float* row = x.Row(r);
      for (std::int64_t c = 0; c < x.cols; ++c) row[c] += bias[c];
    }
  });
}

void CpuCompute::Add(const Tensor& x, const Tensor& y) {
  for (std::int64_t r = 0; r < x.rows; ++r) {
    float* out = x.Row(r);
    const float* in = y.Row(r);
    for (std::int64_t c = 0; c < x.cols; ++c) out[c] += in[c];
  }
}

void CpuCompute::Rope(RopeStyle style, const RopeAngles& angles, std::span<const int> positions,
                      std::span<const RopeTarget> targets) {
  const int dims = angles.rope_dims();
  ForRows(pool_, std::int64_t(positions.size()), [&](std::int64_t begin, std::int64_t end) {
    float cos_sin[RopeAngles::kMaxDims];
    for (std::int64_t r = begin; r < end; ++r) {
      angles.CosSin(positions[r], cos_sin);
      for (const RopeTarget& t : targets) {
        compute::Rope(style, t.x.Row(r), t.num_heads, t.head_stride, cos_sin, dims);
      }
    }
  });
}

void CpuCompute::Gated(GatedActivation act, const Tensor& gate, const Tensor& up,
                       const Tensor& out) {
  const std::int64_t width = gate.cols;
  const bool dense = gate.ld == width && up.ld == width && out.ld == width;
  ForRows(pool_, gate.rows, [&](std::int64_t begin, std::int64_t end) {
    if (dense) {
      return compute::Gated(act, gate.Row(begin), up.Row(begin),
                            static_cast<int>((end - begin) * width), out.Row(begin));
    }
    for (std::int64_t r = begin; r < end; ++r) {
      compute::Gated(act, gate.Row(r), up.Row(r), static_cast<int>(width), out.Row(r));
    }
  });
}

Status CpuCompute::PartialAttention(const PartialAttentionParams& params) {
  PartialAttentionParams p = params;
  p.pool = pool_;
  p.num_threads = pool_ != nullptr ? pool_->size() : 1;
  return PartialAttentionCpu(p);
}

}  // namespace ctxpar::compute
