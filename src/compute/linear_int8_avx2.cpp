// The AVX2 kernel of the int8 path (linear_int8.h), for CPUs without VNNI: vpmaddubsw multiplies
// unsigned by signed bytes into int16 pairs, which add up in int16 over as many lines as cannot
// overflow (Int16Lines), and vpmaddwd widens them to int32 once per that many lines. The types
// with a min take q (0..31) as the unsigned operand; the signed ones |q| (<= 128) and the
// activation with q's sign (|x| <= 127), or, in calls of 8 tokens or more, for a small bias (Q5_0,
// Q6_K), q + bias and the activation (HalfTile). A pair is at most 2 * 127 times the unsigned
// operand's largest value (32,512 for Q8_0's |q|), so 4-bit weights sum a whole sub-block of 8
// lines in int16 and Q8_0 one line. The sums are exact, so the bits are those of every other ISA.
// Compiled with AVX2, FMA and F16C (fp16 scales), run only where cpuid has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute/linear_int8.h"

namespace ctxpar::compute::int8_internal {
namespace {

#include "compute/linear_int8_ymm.h"

// The lines of a sub-block whose vpmaddubsw pairs add up in int16 without overflow (a power of
// two that divides sub / 4), the unsigned operand being at most umax and the activations' bytes
// at most 127 in magnitude: a pair is at most 2 * umax * 127.
int Int16Lines(const Int8Pack& w, int umax) {
  const int pair = 2 * std::max(umax, 1) * 127;
  int lines = 1;
  while (lines * 2 <= w.sub / 4 && lines * 2 * pair <= 32767) lines *= 2;
  return lines;
}

struct MaddDot {
  static constexpr bool kBiased = false;
  static __m256i Weights(__m256i q, __m256i) { return _mm256_abs_epi8(q); }
  template <bool kSigned>
  static void Add(__m256i& part, __m256i w, __m256i q, __m256i x) {
    const __m256i signed_x = kSigned ? _mm256_sign_epi8(x, q) : x;
    part = _mm256_add_epi16(part, _mm256_maddubs_epi16(w, signed_x));
  }
  static __m256i Widen(__m256i part) { return _mm256_madd_epi16(part, _mm256_set1_epi16(1)); }
  static int PartLines(const Int8Pack& w) { return Int16Lines(w, w.nibbles ? w.UMax() : w.qmax); }
};

// Row tile `tile` of a pack with nibbles as the byte form's lines of u, into `out`; returns
// out.data().
const std::int8_t* WidenTile(const Int8Pack& w, int tile, LineVector<std::int8_t>& out) {
  const int lines = w.sub / 8;
  out.resize(std::size_t(w.subs) * w.sub * 16);
  const __m256i low = _mm256_set1_epi8(15);
  auto load = [](const std::int8_t* at) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(at));
  };
  for (int s = 0; s < w.subs; ++s) {
    const std::int8_t* in = w.Q(tile, s);
    PrefetchAhead(w, in);
    std::int8_t* dst = out.data() + std::size_t(s) * w.sub * 16;
    for (int p = 0; p < 2; ++p) {
      const __m256i top = w.high ? load(in + w.sub * 8 + 32 * p) : _mm256_setzero_si256();
      for (int j = 0; j < lines; ++j) {
        const __m256i packed = load(in + j * 64 + 32 * p);
        const __m256i lo = AddHigh(_mm256_and_si256(packed, low), top, j);
        const __m256i hi =
            AddHigh(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low), top, j + lines);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + j * 64 + 32 * p), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (j + lines) * 64 + 32 * p), hi);
      }
    }
  }
  return out.data();
}

// The signed types take a tile's rows in two passes of 8 (the second reads the tile's lines from
// L1), so that the int32 sums, the parts and the fp32 sums of its tokens stay in the 16 registers.
// Those whose bias is at most kBiasMax (Q5_0, Q6_K; kBias) take u = q + bias (at most 2 * bias -
// 1) as the unsigned operand and the activations as the signed one, then subtract bias * sum(xq),
// as the VNNI kernels do: no vpsignb and no vpabsb per token (4 lines a part for Q5_0, 2 for Q6_K).
// Q8_0 keeps |q| and x with q's sign, one line a part.
constexpr int kBiasMax = 64;
// Below this many tokens a call streams the pack (decode), and two passes over each tile lose to
// one; the sequence, so the bits, are the same either way.
constexpr int kHalfMinTokens = 8;

// q0: the tile's sub-block 0 in the byte form, the next sub_bytes further each; kWide: as u
// (WidenTile), else q.
template <bool kBias, bool kWide, int NT, int kSub, int kPart>
void HalfTokens(const Int8Tile& t, int t0, const std::int8_t* q0, std::size_t sub_bytes) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, per_group = kBlock / kSub;
  const std::int8_t* x = t.x->i8.data() + std::size_t(t0) * w.cols;
  const std::size_t ldx = w.cols;
  const float* dx = t.x->i8_d.data() + ScaleAt(t0, 0, groups);
  const std::int32_t* xsum = t.x->i8_sums.data() + SumAt(t0, 0, 0, groups);
  const __m128i shift = _mm_cvtsi32_si128(kBias ? w.BiasShift() : 0);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(w.bias));
  for (int p = 0; p < 2; ++p) {
    __m256 acc[NT];
    for (int i = 0; i < NT; ++i) acc[i] = _mm256_setzero_ps();
    for (int s = 0; s < w.subs; ++s) {
      const std::int8_t* q = q0 + s * sub_bytes;
      if (p == 0 && t.nt < kPrefillMinTokens) PrefetchAhead(w, q);
      __m256i isum[NT];
#pragma GCC unroll 8
      for (int k0 = 0; k0 < kSub / 4; k0 += kPart) {
        __m256i part[NT];
#pragma GCC unroll 8
        for (int k = k0; k < k0 + kPart; ++k) {
          const __m256i wq =
              _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k * 64 + 32 * p));
          const __m256i wu = kWide ? wq : kBias ? _mm256_add_epi8(wq, bias) : _mm256_abs_epi8(wq);
          for (int i = 0; i < NT; ++i) {
            std::int32_t bytes;
            std::memcpy(&bytes, x + i * ldx + s * kSub + 4 * k, 4);
            const __m256i xv = _mm256_set1_epi32(bytes);
            const __m256i product = _mm256_maddubs_epi16(wu, kBias ? xv : _mm256_sign_epi8(xv, wq));
            part[i] = k == k0 ? product : _mm256_add_epi16(part[i], product);
            asm("" : "+x"(part[i]));  // as in YmmTokens: no tree of spilled leaves
          }
        }
        for (int i = 0; i < NT; ++i) {
          const __m256i wide = _mm256_madd_epi16(part[i], ones);
          isum[i] = k0 == 0 ? wide : _mm256_add_epi32(isum[i], wide);
          // One line a part (Q8_0): GCC would otherwise sum the 8 widened lines as a tree.
          if constexpr (kPart == 1) asm("" : "+x"(isum[i]));
        }
      }
      const __m256 scale = ScaleLine(w, t.tile, s, p);
      const int g = s / per_group;
      for (int i = 0; i < NT; ++i) {
        const __m256 sd = _mm256_mul_ps(scale, _mm256_set1_ps(dx[g * kTileTokens + i]));
        const __m256i exact = kBias ? LessBias<kSub>(isum[i], xsum + i, s, shift) : isum[i];
        acc[i] = _mm256_fmadd_ps(sd, _mm256_cvtepi32_ps(exact), acc[i]);
      }
    }
    const int rows = std::clamp(w.rows - t.tile * kTileRows - 8 * p, 0, 8);
    for (int i = 0; i < NT; ++i) {
      float* y = t.y + std::size_t(t0 + i) * t.ldy + t.tile * kTileRows + 8 * p;
      alignas(32) float out[8];
      _mm256_store_ps(out, acc[i]);
      std::memcpy(y, out, sizeof(float) * rows);
    }
  }
}

template <bool kBias, bool kWide, int kSub, int kPart, int... NT>
void HalfTokenCount(const Int8Tile& t, int t0, int nt, const std::int8_t* q0, std::size_t sub_bytes,
                    std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? HalfTokens<kBias, kWide, NT + 1, kSub, kPart>(t, t0, q0, sub_bytes) : void()),
   ...);
}

// Tokens a pass: 4 with parts of several lines (each token holds a part, an int32 sum and an fp32
// sum), 8 with Q8_0's one line a part (no part is kept).
template <bool kBias>
constexpr int kHalfTokens = kBias ? 4 : 8;

template <bool kBias, bool kWide, int kSub>
void HalfDispatch(const Int8Tile& t, int t0, int nt, int part, const std::int8_t* q0,
                  std::size_t sub_bytes) {
  const auto seq = std::make_integer_sequence<int, kHalfTokens<kBias>>();
  if constexpr (kSub == 32) {
    if (part == 8) return HalfTokenCount<kBias, kWide, kSub, 8>(t, t0, nt, q0, sub_bytes, seq);
  }
  if (part == 4) return HalfTokenCount<kBias, kWide, kSub, 4>(t, t0, nt, q0, sub_bytes, seq);
  if (part == 2) return HalfTokenCount<kBias, kWide, kSub, 2>(t, t0, nt, q0, sub_bytes, seq);
  HalfTokenCount<kBias, kWide, kSub, 1>(t, t0, nt, q0, sub_bytes, seq);
}

// Each row tile of a pack with nibbles (Q5_0) is widened once per call (WidenTile) rather than
// once per kHalfTokens tokens.
template <bool kBias>
void HalfTile(const Int8Tile& tiles) {
  const Int8Pack& w = *tiles.w;
  const int part = Int16Lines(w, kBias ? w.UMax() : w.qmax);
  ForEachTile(tiles, [&w, part](const Int8Tile& t) {
    thread_local LineVector<std::int8_t> wide;
    const bool widened = kBias && w.nibbles;
    const std::int8_t* q0 = widened ? WidenTile(w, t.tile, wide) : w.Q(t.tile, 0);
    const std::size_t sub_bytes = widened ? std::size_t(w.sub) * 16 : w.SubBytes();
    for (int t0 = t.t0, nt = 0; t0 < t.t0 + t.nt; t0 += nt) {
      nt = std::min({kHalfTokens<kBias>, t.t0 + t.nt - t0, kTileTokens - t0 % kTileTokens});
      if constexpr (kBias) {
        if (widened) {
          HalfDispatch<kBias, true, 32>(t, t0, nt, part, q0, sub_bytes);
          continue;
        }
      }
      if (w.sub == 16) {
        HalfDispatch<kBias, false, 16>(t, t0, nt, part, q0, sub_bytes);
      } else {
        HalfDispatch<kBias, false, 32>(t, t0, nt, part, q0, sub_bytes);
      }
    }
  });
}

}  // namespace

void QuantizeRowAvx2(const float* x, int groups, std::int8_t* q, float* d, float* xs,
                     std::int32_t* sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  // vpackssdw / vpacksswb interleave the 128-bit lanes; this puts the 32 bytes back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int g = 0; g < groups; ++g) {
    __m256 v[4];
    __m256 amax8 = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + g * kBlock + 8 * j);
      amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, v[j]), amax8);  // a NaN keeps amax8, as std::max
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float dg = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(dg != 0.0f ? 1.0f / dg : 0.0f);
    __m256i qi[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 r =
          _mm256_round_ps(_mm256_mul_ps(v[j], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      qi[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    }
    const __m256i bytes =
        _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + g * kBlock),
                        _mm256_permutevar8x32_epi32(bytes, order));
    // The halves' sums: lanes 0-7 of qi[0] + qi[1] and of qi[2] + qi[3], side by side.
    const __m256i h0 = _mm256_add_epi32(qi[0], qi[1]), h1 = _mm256_add_epi32(qi[2], qi[3]);
    __m256i s8 = _mm256_hadd_epi32(h0, h1);  // lanes 0-1, 4-5: h0's; 2-3, 6-7: h1's
    s8 = _mm256_hadd_epi32(s8, s8);          // lane 0, 4: h0's; 1, 5: h1's
    const __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    const std::int32_t sa = _mm_cvtsi128_si32(s2), sb = _mm_extract_epi32(s2, 1);
    d[g * kTileTokens] = dg;
    xs[g * kTileTokens] = dg * float(sa + sb);
    sums[3 * g * kTileTokens] = sa + sb;
    sums[(3 * g + 1) * kTileTokens] = sa;
    sums[(3 * g + 2) * kTileTokens] = sb;
  }
}

void Int8TileAvx2(const Int8Tile& t) {
  if (t.w->has_min || t.nt < kHalfMinTokens) return YmmTile<MaddDot>(t);
  if (t.w->bias <= kBiasMax) return HalfTile<true>(t);
  HalfTile<false>(t);
}

}  // namespace ctxpar::compute::int8_internal
