// The int8 path's driver (linear_int8.h): the weights' repacking, the activations'
// quantization, the choice of ISA, tiles over the pool, and the scalar kernel that defines the
// sequence. The AMX and VNNI kernels are in linear_int8_amx.cpp and linear_int8_avx512.cpp.
#include "compute/linear_int8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "compute/linear_bf16.h"
#include "ctxpar/cpu_features.h"
#include "ctxpar/dtype.h"

namespace ctxpar::compute {
namespace int8_internal {
namespace {

template <class Block>
Block LoadBlock(const std::uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

// Group g (32 elements) of a row: its integers, the scales of its sub-blocks (one, or two for
// Q6_K) and its min (0 for the signed types), so that w[j] = scale[j / sub] * q[j] + min equals
// the type's dequantization (ctxpar/quant.h's DequantizeRow) up to the rounding of that sum.
struct Group {
  std::int8_t q[kBlock];
  float scale[2];
  float min = 0.0f;
  std::uint16_t scale16 = 0, min16 = 0;  // the fp16 bits of scale[0] and min (Q4_1, Q8_0, Q5_0)
};

Group DecodeGroup(WeightType type, const std::uint8_t* row, int g) {
  Group out;
  switch (type) {
    case WeightType::kQ4_1: {
      const auto b = LoadBlock<BlockQ4_1>(row + g * sizeof(BlockQ4_1));
      for (int j = 0; j < 16; ++j) {
        out.q[j] = std::int8_t(b.qs[j] & 15);
        out.q[j + 16] = std::int8_t(b.qs[j] >> 4);
      }
      out.scale[0] = Fp16ToFp32(b.d);
      out.min = Fp16ToFp32(b.m);
      out.scale16 = b.d;
      out.min16 = b.m;
      break;
    }
    case WeightType::kQ8_0: {
      const auto b = LoadBlock<BlockQ8_0>(row + g * sizeof(BlockQ8_0));
      std::memcpy(out.q, b.qs, kBlock);
      out.scale[0] = Fp16ToFp32(b.d);
      out.scale16 = b.d;
      break;
    }
    case WeightType::kQ5_0: {
      const auto b = LoadBlock<BlockQ5_0>(row + g * sizeof(BlockQ5_0));
      std::uint32_t qh;
      std::memcpy(&qh, b.qh, 4);
      for (int j = 0; j < 16; ++j) {
        out.q[j] = std::int8_t(((b.qs[j] & 15) | (((qh >> j) & 1) << 4)) - 16);
        out.q[j + 16] = std::int8_t(((b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16);
      }
      out.scale[0] = Fp16ToFp32(b.d);
      out.scale16 = b.d;
      break;
    }
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const bool q5 = type == WeightType::kQ5_K;
      const std::uint8_t* blk = row + std::size_t(g / 8) * BlockBytes(type);
      const int j = g % 8;
      std::uint16_t d_bits, dmin_bits;
      std::memcpy(&d_bits, blk, 2);
      std::memcpy(&dmin_bits, blk + 2, 2);
      const std::uint8_t* scales = blk + 4;
      const std::uint8_t* qh = blk + 4 + kKScaleSize;
      const std::uint8_t* qs = q5 ? qh + kQK_K / 8 : qh;
      std::uint8_t sc, m;
      UnpackScaleMinK4(j, scales, &sc, &m);
      for (int l = 0; l < kBlock; ++l) {
        const std::uint8_t byte = qs[(j / 2) * 32 + l];
        int v = j % 2 != 0 ? byte >> 4 : byte & 15;
        if (q5 && (qh[l] >> j & 1) != 0) v += 16;
        out.q[l] = std::int8_t(v);
      }
      out.scale[0] = Fp16ToFp32(d_bits) * float(sc);
      out.min = -(Fp16ToFp32(dmin_bits) * float(m));
      break;
    }
    case WeightType::kQ6_K: {
      const auto b = LoadBlock<BlockQ6K>(row + std::size_t(g / 8) * sizeof(BlockQ6K));
      const int half = (g % 8) / 4, k = g % 4;
      const std::uint8_t* ql = b.ql + half * 64 + (k % 2) * 32;
      const std::uint8_t* qh = b.qh + half * 32;
      const int shift = k / 2 * 4;  // the low nibble for q1, q2; the high one for q3, q4
      for (int l = 0; l < kBlock; ++l) {
        out.q[l] = std::int8_t((((ql[l] >> shift) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32);
      }
      const float d = Fp16ToFp32(b.d);
      out.scale[0] = d * float(b.scales[half * 8 + 2 * k]);
      out.scale[1] = d * float(b.scales[half * 8 + 2 * k + 1]);
      break;
    }
    default:  // no repacking: Int8Takes refuses the type, and WithInt8Pack never packs it
      break;
  }
  return out;
}

}  // namespace

std::shared_ptr<const Int8Pack> PackInt8(const QuantMatrix& w) {
  auto p = std::make_shared<Int8Pack>();
  p->rows = w.rows;
  p->cols = w.cols;
  p->tiles = (w.rows + kTileRows - 1) / kTileRows;
  p->sub = w.type == WeightType::kQ6_K ? 16 : 32;
  p->subs = w.cols / p->sub;
  p->has_min =
      w.type == WeightType::kQ4_1 || w.type == WeightType::kQ4_K || w.type == WeightType::kQ5_K;
  p->nibbles =
      w.type == WeightType::kQ4_1 || w.type == WeightType::kQ4_K || w.type == WeightType::kQ5_0;
  p->high = w.type == WeightType::kQ5_0;
  const int groups = w.cols / kBlock, per_group = kBlock / p->sub;
  const std::size_t lanes = std::size_t(p->tiles) * kTileRows;
  p->q.assign(std::size_t(p->tiles) * p->subs * p->SubBytes(), 0);
  // These types' scale and min are the file's fp16 values: kept as such, half the bytes.
  p->half =
      w.type == WeightType::kQ4_1 || w.type == WeightType::kQ8_0 || w.type == WeightType::kQ5_0;
  const std::size_t scales = lanes * p->subs, mins = p->has_min ? lanes * groups : 0;
  if (p->half) {
    p->scale16.resize(scales);
    p->min16.resize(mins);
  } else {
    p->scale.resize(scales);
    p->min.resize(mins);
  }
  p->bias = w.type == WeightType::kQ8_0   ? 128
            : w.type == WeightType::kQ5_0 ? 16
            : w.type == WeightType::kQ6_K ? 32
                                          : 0;
  for (int r = 0; r < w.rows; ++r) {
    const int tile = r / kTileRows, lane = r % kTileRows;
    const std::uint8_t* row = w.data + std::size_t(r) * w.row_stride;
    for (int g = 0; g < groups; ++g) {
      const Group grp = DecodeGroup(w.type, row, g);
      for (int h = 0; h < per_group; ++h) {
        const int s = g * per_group + h;
        const std::size_t at = p->Sub(tile, s);
        std::int8_t* dst = p->q.data() + at * p->SubBytes();
        for (int j = 0; j < p->sub; ++j) {
          const std::int8_t v = grp.q[h * p->sub + j];
          const int k = j / 4, b = lane * 4 + j % 4;
          if (p->nibbles) {
            const int lines = p->sub / 8, u = v + p->bias;
            auto& byte = reinterpret_cast<std::uint8_t&>(dst[(k % lines) * 64 + b]);
            byte = static_cast<std::uint8_t>(byte | (k < lines ? u & 15 : (u & 15) << 4));
            if (p->high) {
              auto& top = reinterpret_cast<std::uint8_t&>(dst[p->sub * 8 + b]);
              top = static_cast<std::uint8_t>(top | (u >> 4 & 1) << k);
            }
          } else {
            dst[k * 64 + b] = v;
          }
          p->qmax = std::max(p->qmax, p->has_min ? int(v) : std::abs(int(v)));
        }
        if (p->half) {
          p->scale16[at * 16 + lane] = grp.scale16;
        } else {
          p->scale[at * 16 + lane] = grp.scale[h];
        }
      }
      if (p->has_min && p->half) p->min16[p->Group(tile, g) * 16 + lane] = grp.min16;
      if (p->has_min && !p->half) p->min[p->Group(tile, g) * 16 + lane] = grp.min;
    }
  }
  return p;
}

namespace {

// Ordered by preference. Each needs what AVX2 needs; AVX-VNNI is not implied by the AVX-512 ones
// (Ice Lake and Zen 4 have AVX512-VNNI without it), so a forced path is checked by itself.
enum class Int8Isa { kScalar, kAvx2, kAvxVnni, kVnni, kAmx };
constexpr const char* kIsaNames[] = {"scalar", "avx2", "avx_vnni", "avx512_vnni", "amx"};

// The best 256-bit path: AVX-VNNI where the CPU has it.
Int8Isa BestYmm(const CpuFeatures& f) { return f.avx_vnni ? Int8Isa::kAvxVnni : Int8Isa::kAvx2; }
// Whether the AVX-VNNI kernel runs here: VEX-encoded, or (forced only) with the AVX512-VNNI/VL
// encoding of the same instruction (Int8TileAvxVnniEvex).
bool HasVnni256(const CpuFeatures& f) {
  return f.avx_vnni || (BestCpuIsa(f) >= CpuIsa::kAvx512 && f.avx512_vnni);
}

Int8Isa BestInt8Isa() {
#if defined(CTXPAR_X86_KERNELS)
  const CpuFeatures& f = DetectCpuFeatures();
  if (BestCpuIsa(f) < CpuIsa::kAvx2) return Int8Isa::kScalar;
  if (BestCpuIsa(f) < CpuIsa::kAvx512 || !f.avx512_vnni) return BestYmm(f);
  return f.amx_tile && f.amx_int8 ? Int8Isa::kAmx : Int8Isa::kVnni;
#else
  return Int8Isa::kScalar;
#endif
}

// CTXPAR_INT8_ISA's path, when it names one this CPU has.
Expected<Int8Isa> Forced(Int8Isa best) {
  const char* env = std::getenv("CTXPAR_INT8_ISA");
  if (env == nullptr || *env == '\0') return best;
  for (int i = 0; i <= int(Int8Isa::kAmx); ++i) {
    if (std::string(env) != kIsaNames[i]) continue;
#if defined(CTXPAR_X86_KERNELS)
    const bool lacks_vnni256 = Int8Isa(i) == Int8Isa::kAvxVnni && !HasVnni256(DetectCpuFeatures());
#else
    const bool lacks_vnni256 = false;
#endif
    if (Int8Isa(i) > best || lacks_vnni256) {
      return FailedPrecondition(
          fmt::format("CTXPAR_INT8_ISA={} asks for a path this CPU lacks; the best it has is {}",
                      env, kIsaNames[int(best)]));
    }
    return Int8Isa(i);
  }
  return InvalidArgument(fmt::format(
      "CTXPAR_INT8_ISA={} is not one of scalar, avx2, avx_vnni, avx512_vnni, amx", env));
}

Int8Isa SelectInt8() {
  Int8Isa isa = BestInt8Isa();
  const Expected<CpuIsa> cpu = SelectCpuIsa();
  if (cpu.ok() && *cpu < CpuIsa::kAvx2) isa = Int8Isa::kScalar;
#if defined(CTXPAR_X86_KERNELS)
  if (cpu.ok() && *cpu < CpuIsa::kAvx512) isa = std::min(isa, BestYmm(DetectCpuFeatures()));
#endif
  const Expected<Int8Isa> forced = Forced(isa);
  return forced.ok() ? *forced : isa;
}

// Tokens per chunk: about 64 KiB of int8 activations, a multiple of the AMX tile's 16, re-read
// by each row tile of a thread while they stay in L2. With 4-bit weights, which AMX widens once
// per row tile and chunk, at least kWidenTokens, so that a widening serves 4 tile multiplies.
constexpr int kWidenTokens = 64;
int TokenChunk(int cols, bool nibbles) {
  const int tokens = (64 << 10) / cols;
  return std::max(nibbles ? kWidenTokens : kTileTokens, tokens / kTileTokens * kTileTokens);
}

void QuantizeRowScalar(const float* x, int groups, std::int8_t* q, float* d, float* xs,
                       std::int32_t* sums) {
  for (int g = 0; g < groups; ++g) {
    const float* v = x + g * kBlock;
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float dg = amax / 127.0f;
    const float id = dg != 0.0f ? 1.0f / dg : 0.0f;
    int half[2] = {0, 0};
    for (int j = 0; j < kBlock; ++j) {
      const float r = std::clamp(std::nearbyint(v[j] * id), -127.0f, 127.0f);
      q[g * kBlock + j] = static_cast<std::int8_t>(r);
      half[j / 16] += q[g * kBlock + j];
    }
    d[g * kTileTokens] = dg;
    xs[g * kTileTokens] = dg * float(half[0] + half[1]);
    sums[3 * g * kTileTokens] = half[0] + half[1];
    sums[(3 * g + 1) * kTileTokens] = half[0];
    sums[(3 * g + 2) * kTileTokens] = half[1];
  }
}

}  // namespace

void PrepareInt8Acts(const float* x, int n, int cols, int ldx, Acts* out, ThreadPool* pool) {
  const int groups = cols / kBlock;
  const int padded = (n + kTileTokens - 1) / kTileTokens * kTileTokens;
  // Every row below n is written. The padding is left as it is: an AMX tile reads it into rows of
  // its sums that are dropped, and each row of sums depends on its own token alone. The buffers
  // only grow: a decode layer's activations alternate between widths (576 and 1536 on SmolLM2),
  // and a resize back up would zero the difference every time.
  auto grow = [](auto& v, std::size_t size) {
    if (v.size() < size) v.resize(size);
  };
  grow(out->i8, std::size_t(padded) * cols);
  grow(out->i8_d, std::size_t(padded) * groups);
  grow(out->i8_xs, std::size_t(padded) * groups);
  grow(out->i8_sums, std::size_t(padded) * groups * 3);
  auto row = QuantizeRowScalar;
#if defined(CTXPAR_X86_KERNELS)
  const Int8Isa isa = SelectInt8();
  if (isa >= Int8Isa::kVnni) {
    row = QuantizeRowAvx512;
  } else if (isa >= Int8Isa::kAvx2) {
    row = QuantizeRowAvx2;
  }
#endif
  auto rows = [&](std::int64_t begin, std::int64_t end) {
    for (auto t = static_cast<int>(begin); t < end; ++t) {
      std::int8_t* q = out->i8.data() + std::size_t(t) * cols;
      row(x + std::size_t(t) * ldx, groups, q, out->i8_d.data() + ScaleAt(t, 0, groups),
          out->i8_xs.data() + ScaleAt(t, 0, groups), out->i8_sums.data() + SumAt(t, 0, 0, groups));
    }
  };
  // A decode row's quantization is too short to share.
  if (pool != nullptr && n >= kTileTokens) return pool->ParallelFor(n, rows);
  rows(0, n);
}

namespace {

void ScalarTile(const Int8Tile& t) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, per_group = kBlock / w.sub;
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  for (int tok = t.t0; tok < t.t0 + t.nt; ++tok) {
    const std::int8_t* xq = t.x->i8.data() + std::size_t(tok) * w.cols;
    const float* dx = t.x->i8_d.data() + ScaleAt(tok, 0, groups);
    const float* xs = t.x->i8_xs.data() + ScaleAt(tok, 0, groups);
    for (int r = 0; r < rows; ++r) {
      float acc = 0.0f;
      for (int g = 0; g < groups; ++g) {
        for (int h = 0; h < per_group; ++h) {
          const int s = g * per_group + h;
          const std::int8_t* q = w.Q(t.tile, s);
          std::int32_t sum = 0;
          for (int j = 0; j < w.sub; ++j) {
            sum += std::int32_t(w.QAt(q, j / 4, r * 4 + j % 4)) * xq[s * w.sub + j];
          }
          acc = std::fma(w.ScaleOf(t.tile, s, r) * dx[g * kTileTokens], float(sum), acc);
        }
        if (w.has_min) acc = std::fma(w.MinOf(t.tile, g, r), xs[g * kTileTokens], acc);
      }
      t.y[std::size_t(tok) * t.ldy + t.tile * kTileRows + r] = acc;
    }
  }
}

}  // namespace

void Int8TileScalar(const Int8Tile& t) { ForEachTile(t, ScalarTile); }

void MatMulInt8(std::span<const MatMulOut> outs, const Acts& x, ThreadPool* pool) {
  const Int8Isa isa = SelectInt8();
  // The pool hands out units of `unit` row tiles; outs[i]'s are [first[i], first[i + 1]).
  const int unit = isa == Int8Isa::kVnni && x.n >= kPrefillMinTokens ? 2 : 1;
  std::vector<std::shared_ptr<const Int8Pack>> packs(outs.size());
  std::vector<std::int64_t> first(1, 0);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    packs[i] = outs[i].w.int8 != nullptr ? outs[i].w.int8 : PackInt8(outs[i].w);
    first.push_back(first.back() + (packs[i]->tiles + unit - 1) / unit);
  }
  Int8TileFn kernel = Int8TileScalar;
#if defined(CTXPAR_X86_KERNELS)
  if (isa == Int8Isa::kAvx2) kernel = Int8TileAvx2;
  if (isa == Int8Isa::kAvxVnni) {
    kernel = DetectCpuFeatures().avx_vnni ? Int8TileAvxVnni : Int8TileAvxVnniEvex;
  }
  if (isa == Int8Isa::kVnni) kernel = Int8TileVnni;
  if (isa == Int8Isa::kAmx) kernel = Int8TileAmx;
#endif
  const bool nibbles =
      std::any_of(packs.begin(), packs.end(), [](const auto& p) { return p->nibbles; });
  const int chunk = TokenChunk(x.blocks_per_row * kBlock, nibbles);
  auto body = [&](std::int64_t begin, std::int64_t end) {
    for (int c0 = 0; c0 < x.n; c0 += chunk) {
      const int c1 = std::min(x.n, c0 + chunk);
      for (std::size_t i = 0; i < outs.size(); ++i) {
        const std::int64_t lo = std::max(begin, first[i]), hi = std::min(end, first[i + 1]);
        if (lo >= hi) continue;
        Int8Tile t;
        t.w = packs[i].get();
        t.x = &x;
        t.y = outs[i].y;
        t.ldy = std::size_t(outs[i].ldy);
        t.tile = static_cast<int>((lo - first[i]) * unit);
        t.tiles = std::min(t.w->tiles, static_cast<int>((hi - first[i]) * unit)) - t.tile;
        t.t0 = c0;
        t.nt = c1 - c0;
        kernel(t);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(first.back(), body);
  } else {
    body(0, first.back());
  }
}

}  // namespace int8_internal

QuantMatrix WithInt8Pack(QuantMatrix m, ActFormat format) {
  if (format == ActFormat::kInt8 && Int8Takes(m.type)) m.int8 = int8_internal::PackInt8(m);
  if (format == ActFormat::kInt8 && Bf16Takes(m.type)) m.bf16 = bf16_internal::PackBf16(m);
  return m;
}

const char* MatMulInt8Isa() { return int8_internal::kIsaNames[int(int8_internal::SelectInt8())]; }

Status CheckInt8Isa() { return int8_internal::Forced(int8_internal::BestInt8Isa()).status(); }

}  // namespace ctxpar::compute
