#include "compute/linear_bf16.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "compute/linear_int8.h"
#include "ctxpar/cpu_features.h"
#include "ctxpar/dtype.h"

namespace ctxpar::compute {
namespace bf16_internal {
namespace {

constexpr int kTileRows = 16;
constexpr int kTileTokens = 16;

// Tokens per chunk: about 128 KiB of bf16 activations, a multiple of 32 (the AMX kernel's two
// token blocks), re-read from cache by every row tile.
int TokenChunk(int cols) {
  constexpr int kBlockPair = 2 * kTileTokens;
  const int tokens = (64 << 10) / cols;
  return std::max(kBlockPair, tokens / kBlockPair * kBlockPair);
}

// The instructions' operand and result rules: subnormal inputs read as zero, subnormal results
// flushed to zero (keeping the sign).
float Daz(std::uint16_t b) {
  const float f = Bf16ToFloat(b);
  return std::fabs(f) < FLT_MIN ? std::copysign(0.0f, f) : f;
}
float FmaFtz(float a, float b, float c) {
  const float r = std::fma(a, b, c);
  return std::fabs(r) < FLT_MIN ? std::copysign(0.0f, r) : r;
}

void ScalarTile(const Bf16Tile& t) {
  const Bf16Pack& w = *t.w;
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  for (int tok = t.t0; tok < t.t0 + t.nt; ++tok) {
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int p = 0; p < w.cols / 2; ++p) {
        const std::uint16_t* pair = w.Line(t.tile, p) + 2 * r;
        const std::uint16_t* x = t.x + ActAt(w.cols, tok, 2 * p);
        acc = FmaFtz(Daz(pair[1]), Daz(x[1]), acc);
        acc = FmaFtz(Daz(pair[0]), Daz(x[0]), acc);
      }
      t.y[std::size_t(tok) * t.ldy + t.tile * kTileRows + r] = acc;
    }
  }
}

}  // namespace

Bf16Isa SelectBf16() {
#if defined(CTXPAR_X86_KERNELS)
  const Expected<CpuIsa> cpu = SelectCpuIsa();
  if (!cpu.ok() || *cpu < CpuIsa::kAvx512Bf16) return Bf16Isa::kNone;
  return *cpu == CpuIsa::kAmx ? Bf16Isa::kAmx : Bf16Isa::kAvx512Bf16;
#else
  return Bf16Isa::kNone;
#endif
}

std::shared_ptr<const Bf16Pack> PackBf16(const QuantMatrix& m) {
  auto pack = std::make_shared<Bf16Pack>();
  pack->rows = m.rows;
  pack->cols = m.cols;
  pack->tiles = (m.rows + kTileRows - 1) / kTileRows;
  pack->w.assign(std::size_t(pack->tiles) * m.cols * kTileRows, 0);
  std::vector<float> row(m.cols);
  for (int r = 0; r < m.rows; ++r) {
    // F16 widens exactly, then rounds to bf16; BF16 is copied (the same bits).
    DequantizeRow(m, r, row.data());
    const int tile = r / kTileRows, in_tile = r % kTileRows;
    for (int c = 0; c < m.cols; ++c) {
      const std::size_t line = std::size_t(tile) * (m.cols / 2) + c / 2;
      pack->w[line * 32 + 2 * in_tile + c % 2] = FloatToBf16(row[c]);
    }
  }
  return pack;
}

void RoundToBf16(const float* in, int n, std::uint16_t* out, Bf16Isa isa) {
#if defined(CTXPAR_X86_KERNELS)
  // Where a bf16 path runs, AVX-512 F/BW do too.
  if (isa == Bf16Isa::kAvx512Bf16 || isa == Bf16Isa::kAmx) return RoundToBf16Avx512(in, n, out);
#endif
  for (int i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

void PrepareBf16Acts(const float* x, int n, int cols, int ldx, Acts* out, ThreadPool* pool) {
  const int padded = (n + kTileTokens - 1) / kTileTokens * kTileTokens;
  out->bf16.resize(std::size_t(padded) * cols);
  // Zero the padding tokens of the last block.
  for (int t = n; t < padded; ++t) {
    for (int c = 0; c < cols; c += 32) {
      std::fill_n(&out->bf16[ActAt(cols, t, c)], 32, std::uint16_t{0});
    }
  }
  const Bf16Isa isa = SelectBf16();
  auto rows = [&](std::int64_t begin, std::int64_t end) {
    for (int t = static_cast<int>(begin); t < end; ++t) {
      for (int c = 0; c < cols; c += 32) {
        RoundToBf16(x + std::size_t(t) * ldx + c, 32, &out->bf16[ActAt(cols, t, c)], isa);
      }
    }
  };
  if (pool != nullptr && n >= kTileTokens) return pool->ParallelFor(n, rows);
  rows(0, n);
}

void Bf16TileScalar(const Bf16Tile& t) {
  Bf16Tile one = t;
  one.tiles = 1;
  for (one.tile = t.tile; one.tile < t.tile + t.tiles; ++one.tile) ScalarTile(one);
}

void MatMulBf16(std::span<const MatMulOut> outs, const Acts& x, ThreadPool* pool, Bf16Isa isa) {
  std::vector<std::shared_ptr<const Bf16Pack>> packs(outs.size());
  std::vector<std::int64_t> first(1, 0);  // outs[i]'s tiles are [first[i], first[i + 1])
  for (std::size_t i = 0; i < outs.size(); ++i) {
    packs[i] = outs[i].w.bf16 != nullptr ? outs[i].w.bf16 : PackBf16(outs[i].w);
    first.push_back(first.back() + packs[i]->tiles);
  }
  void (*kernel)(const Bf16Tile&) = Bf16TileScalar;
#if defined(CTXPAR_X86_KERNELS)
  if (isa == Bf16Isa::kAvx512Bf16) kernel = Bf16TileAvx512;
  if (isa == Bf16Isa::kAmx) kernel = Bf16TileAmx;
#endif
  const int chunk = TokenChunk(x.blocks_per_row * kBlock);
  auto body = [&](std::int64_t begin, std::int64_t end) {
    for (int c0 = 0; c0 < x.n; c0 += chunk) {
      for (std::size_t i = 0; i < outs.size(); ++i) {
        const std::int64_t lo = std::max(begin, first[i]), hi = std::min(end, first[i + 1]);
        if (lo >= hi) continue;
        kernel({.w = packs[i].get(),
                .tile = static_cast<int>(lo - first[i]),
                .tiles = static_cast<int>(hi - lo),
                .x = x.bf16.data(),
                .t0 = c0,
                .nt = std::min(x.n, c0 + chunk) - c0,
                .y = outs[i].y,
                .ldy = std::size_t(outs[i].ldy)});
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(first.back(), body);
  } else {
    body(0, first.back());
  }
}

}  // namespace bf16_internal

bool Bf16Takes(WeightType type) {
  return (type == WeightType::kF16 || type == WeightType::kBF16) &&
         bf16_internal::SelectBf16() != bf16_internal::Bf16Isa::kNone;
}

const char* MatMulBf16Isa() {
  switch (bf16_internal::SelectBf16()) {
    case bf16_internal::Bf16Isa::kAvx512Bf16:
      return "avx512_bf16";
    case bf16_internal::Bf16Isa::kAmx:
      return "amx_bf16";
    default:
      return "none";
  }
}

}  // namespace ctxpar::compute
