// MatMul's driver: activation preparation, the choice of ISA, row tiles over the pool, and the
// int8 path. The kernels are in linear_{scalar,avx2,avx512}.cpp.
#include "compute/linear.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compute/linear_bf16.h"
#include "compute/linear_int8.h"
#include "compute/linear_kernels.h"
#include "ctxpar/cpu_features.h"

namespace ctxpar::compute {

using linear_internal::F32Tile;
using linear_internal::kRowTile;

Expected<WeightType> WeightTypeFor(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
      return WeightType::kQ4_1;
    case GgmlType::kQ8_0:
      return WeightType::kQ8_0;
    case GgmlType::kQ5_0:
      return WeightType::kQ5_0;
    case GgmlType::kQ4_K:
      return WeightType::kQ4_K;
    case GgmlType::kQ5_K:
      return WeightType::kQ5_K;
    case GgmlType::kQ6_K:
      return WeightType::kQ6_K;
    case GgmlType::kQ2_K:
      return WeightType::kQ2_K;
    case GgmlType::kQ3_K:
      return WeightType::kQ3_K;
    case GgmlType::kQ4_0:
      return WeightType::kQ4_0;
    case GgmlType::kQ5_1:
      return WeightType::kQ5_1;
    case GgmlType::kIQ4_NL:
      return WeightType::kIQ4_NL;
    case GgmlType::kIQ4_XS:
      return WeightType::kIQ4_XS;
    case GgmlType::kMXFP4:
      return WeightType::kMXFP4;
    case GgmlType::kF32:
      return WeightType::kF32;
    case GgmlType::kF16:
      return WeightType::kF16;
    case GgmlType::kBF16:
      return WeightType::kBF16;
    default:
      return InvalidArgument(fmt::format("ggml type {} has no matmul kernel; the matmuls take {}",
                                         GgmlTypeName(type), kMatMulTypes));
  }
}

GgmlType GgmlTypeOf(WeightType type) {
  switch (type) {
    case WeightType::kQ4_1:
      return GgmlType::kQ4_1;
    case WeightType::kQ8_0:
      return GgmlType::kQ8_0;
    case WeightType::kQ5_0:
      return GgmlType::kQ5_0;
    case WeightType::kQ4_K:
      return GgmlType::kQ4_K;
    case WeightType::kQ5_K:
      return GgmlType::kQ5_K;
    case WeightType::kQ6_K:
      return GgmlType::kQ6_K;
    case WeightType::kQ2_K:
      return GgmlType::kQ2_K;
    case WeightType::kQ3_K:
      return GgmlType::kQ3_K;
    case WeightType::kQ4_0:
      return GgmlType::kQ4_0;
    case WeightType::kQ5_1:
      return GgmlType::kQ5_1;
    case WeightType::kIQ4_NL:
      return GgmlType::kIQ4_NL;
    case WeightType::kIQ4_XS:
      return GgmlType::kIQ4_XS;
    case WeightType::kMXFP4:
      return GgmlType::kMXFP4;
    case WeightType::kF32:
      return GgmlType::kF32;
    case WeightType::kF16:
      return GgmlType::kF16;
    case WeightType::kBF16:
      return GgmlType::kBF16;
  }
  return GgmlType::kF32;
}

Status CheckActFormat(ActFormat format, WeightType type) {
  if (format == ActFormat::kQ8 && type != WeightType::kQ4_1 && type != WeightType::kQ8_0) {
    return Unimplemented(fmt::format(
        "int8 activations (llama.cpp numerics) take Q4_1 and Q8_0 weights; these are {}: use the "
        "default fp32 activations",
        GgmlTypeName(GgmlTypeOf(type))));
  }
  return Status::Ok();
}

QuantMatrix QuantMatrix::RowRange(int begin, int count) const {
  QuantMatrix m = *this;
  m.data = data + std::size_t(begin) * row_stride;
  m.rows = count;
  m.int8 = nullptr;
  m.bf16 = nullptr;
  return m;
}

bool Int8Takes(WeightType type) {
  switch (type) {
    case WeightType::kQ4_1:
    case WeightType::kQ8_0:
    case WeightType::kQ5_0:
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void PrepareActs(ActFormat format, WeightType type, const float* x, int n, int cols, int ldx,
                 Acts* out, ThreadPool* pool) {
  if (format == ActFormat::kInt8 && !Int8Takes(type) && !Bf16Takes(type)) {
    format = ActFormat::kF32;
  }
  out->format = format;
  out->type = type;
  out->n = n;
  out->blocks_per_row = cols / kBlock;
  if (format == ActFormat::kInt8 && Bf16Takes(type)) {
    return bf16_internal::PrepareBf16Acts(x, n, cols, ldx, out, pool);
  }
  if (format == ActFormat::kInt8) return int8_internal::PrepareInt8Acts(x, n, cols, ldx, out, pool);
  if (format == ActFormat::kF32) {
    if (ldx == cols && reinterpret_cast<std::uintptr_t>(x) % 64 == 0) {
      out->f32 = x;
      return;
    }
    out->x.resize(std::size_t(n) * cols);
    out->f32 = out->x.data();
    for (int t = 0; t < n; ++t) {
      std::memcpy(out->x.data() + std::size_t(t) * cols, x + std::size_t(t) * ldx,
                  sizeof(float) * cols);
    }
    return;
  }
  out->blocks.resize(std::size_t(n) * out->blocks_per_row);
  for (int t = 0; t < n; ++t) {
    for (int b = 0; b < out->blocks_per_row; ++b) {
      const float* v = x + std::size_t(t) * ldx + b * kBlock;
      ActBlock& blk = out->blocks[std::size_t(t) * out->blocks_per_row + b];
      float amax = 0.0f;
      for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int sum = 0;
      // ggml's x86 quantizer rounds half to even (_mm256_round_ps nearest), as nearbyint does.
      for (int j = 0; j < kBlock; ++j) {
        blk.q[j] = static_cast<std::int8_t>(std::nearbyint(v[j] * id));
        sum += blk.q[j];
      }
      blk.d = Fp16ToFp32(Fp32ToFp16(d));
      blk.s = type == WeightType::kQ4_1 ? Fp16ToFp32(Fp32ToFp16(d * float(sum))) : 0.0f;
    }
  }
}

namespace {

// Tokens per chunk of a matmul: about 128 KiB of fp32 activations (L2 is 512 KiB to 2 MiB per
// core on the x86 machines here), in whole register tiles of `group` tokens: a chunk of 45
// tokens ran AVX-512's tiles of 6 as five of 6 and three of 5.
int TokenChunk(int cols, int group) {
  constexpr int kChunkBytes = 128 << 10;
  const int rows = kChunkBytes / (cols * static_cast<int>(sizeof(float)));
  return std::max(group, (rows + group / 2) / group * group);
}

// Activations per span of the widened path: what a thread's tiles re-read from L2 and L3.
constexpr std::size_t kWideSpanBytes = 1 << 20;

struct Kernels {
  const char* isa;
  linear_internal::F32Kernel f32;
  linear_internal::Q8Dots q8;
};

// The kernels of the ISA SelectCpuIsa allows now (so CTXPAR_CPU_ISA can lower it per call). An
// invalid CTXPAR_CPU_ISA leaves the best path: PartialAttentionCpu reports it.
Kernels Select() {
  const Expected<CpuIsa> selected = SelectCpuIsa();
  const CpuIsa isa = selected.ok() ? *selected : BestCpuIsa(DetectCpuFeatures());
#if defined(CTXPAR_X86_KERNELS)
  if (isa >= CpuIsa::kAvx512) {
    static const bool vnni = [] {
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512vnni") != 0;
    }();
    return {"avx512", linear_internal::kF32Avx512,
            vnni ? linear_internal::kQ8DotsVnni : linear_internal::kQ8DotsAvx2};
  }
  if (isa == CpuIsa::kAvx2) {
    return {"avx2", linear_internal::kF32Avx2, linear_internal::kQ8DotsAvx2};
  }
#else
  (void)isa;
#endif
  return {"scalar", linear_internal::kF32Scalar, linear_internal::kQ8DotsScalar};
}

// Row tiles [tile_begin, tile_end) of one MatMul.
void Tiles(const Kernels& k, const QuantMatrix& w, const Acts& x, float* y, int ldy,
           std::int64_t tile_begin, std::int64_t tile_end) {
  const int nb = w.cols / kBlock;
  auto f32 = [&] {
    thread_local LineVector<float> scratch, carry;
    scratch.resize(std::max(scratch.size(), std::size_t(kRowTile) * nb * kBlock));
    F32Tile t;
    t.type = w.type;
    t.row_stride = w.row_stride;
    t.ldx = std::size_t(x.blocks_per_row) * kBlock;
    t.ldy = std::size_t(ldy);
    t.block1 = nb;
    t.scratch = scratch.data();
    t.wide_stride = std::size_t(nb) * kBlock;
    t.wide = x.n > k.f32.direct_max_tokens;
    const int chunk = TokenChunk(w.cols, k.f32.wide_tokens);
    if (t.wide) {
      carry.resize(std::max(carry.size(), std::size_t(chunk) * kRowTile * kBlock / 2));
      t.carry = carry.data();
    }
    auto run = [&](std::int64_t tile, int c0) {
      const int r0 = static_cast<int>(tile * kRowTile);
      t.w = w.data + std::size_t(r0) * w.row_stride;
      t.rows = std::min(kRowTile, w.rows - r0);
      t.x = x.F32Row(c0);
      t.n = std::min(chunk, x.n - c0);
      t.y = y + std::size_t(c0) * std::size_t(ldy) + r0;
      k.f32.tile(t);
    };
    if (!t.wide) {
      // Tokens in chunks, each run over all of this thread's tiles: a chunk of x and the tiles'
      // weights stay in L2 together.
      for (int c0 = 0; c0 < x.n; c0 += chunk) {
        for (std::int64_t tile = tile_begin; tile < tile_end; ++tile) run(tile, c0);
      }
      return;
    }
    // The tokens in spans of about kWideSpanBytes of x; within a span each tile is widened once,
    // by its first chunk, and its bands of rows pass over each chunk while the chunk is in L2.
    // A span bounds what the tiles stream: over all of n, each tile would read the whole of x
    // from memory (12.6 MB for a 2048-token prefill chunk of SmolLM2's ffn_down), and widening
    // a tile again per span costs under 2 % of its FMAs.
    const int span = std::max(
        chunk, static_cast<int>(kWideSpanBytes / (w.cols * sizeof(float))) / chunk * chunk);
    for (int s0 = 0; s0 < x.n; s0 += span) {
      const int s1 = std::min(x.n, s0 + span);
      for (std::int64_t tile = tile_begin; tile < tile_end; ++tile) {
        for (int c0 = s0; c0 < s1; c0 += chunk) {
          t.widened = c0 != s0;
          run(tile, c0);
        }
      }
    }
  };
  auto q8 = [&] {
    const linear_internal::DotQ8Fn dot = w.type == WeightType::kQ4_1   ? k.q8.q41
                                         : w.type == WeightType::kQ8_0 ? k.q8.q80
                                                                       : nullptr;
    for (std::int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int r0 = static_cast<int>(tile * kRowTile);
      const int r1 = std::min(w.rows, r0 + kRowTile);
      for (int t = 0; t < x.n; ++t) {
        const ActBlock* xa = x.Row(t);
        float* yt = y + std::size_t(t) * ldy;
        for (int r = r0; r < r1; ++r) {
          yt[r] = dot != nullptr ? dot(w.data + std::size_t(r) * w.row_stride, xa, nb)
                                 : std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
  };
  if (x.format == ActFormat::kF32) {
    f32();
  } else {
    q8();
  }
}

std::int64_t RowTiles(const QuantMatrix& w) { return (w.rows + kRowTile - 1) / kRowTile; }

}  // namespace

const char* MatMulIsa() { return Select().isa; }

void MatMul(const QuantMatrix& w, const Acts& x, float* y, int ldy, ThreadPool* pool) {
  if (x.format == ActFormat::kInt8) {
    const MatMulOut out{w, y, ldy};
    return MatMulMany({&out, 1}, x, pool);
  }
  const Kernels k = Select();
  auto body = [&](std::int64_t begin, std::int64_t end) { Tiles(k, w, x, y, ldy, begin, end); };
  if (pool != nullptr) {
    pool->ParallelFor(RowTiles(w), body);
  } else {
    body(0, RowTiles(w));
  }
}

void MatMulMany(std::span<const MatMulOut> outs, const Acts& x, ThreadPool* pool) {
  if (x.format == ActFormat::kInt8 && Bf16Takes(x.type)) {
    return bf16_internal::MatMulBf16(outs, x, pool, bf16_internal::SelectBf16());
  }
  if (x.format == ActFormat::kInt8) return int8_internal::MatMulInt8(outs, x, pool);
  const Kernels k = Select();
  std::vector<std::int64_t> first(1, 0);  // outs[i]'s tiles are [first[i], first[i + 1])
  for (const MatMulOut& o : outs) first.push_back(first.back() + RowTiles(o.w));
  auto body = [&](std::int64_t begin, std::int64_t end) {
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const std::int64_t lo = std::max(begin, first[i]), hi = std::min(end, first[i + 1]);
      if (lo < hi) {
        Tiles(k, outs[i].w, x, outs[i].y, outs[i].ldy, lo - first[i], hi - first[i]);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(first.back(), body);
  } else {
    body(0, first.back());
  }
}

}  // namespace ctxpar::compute
