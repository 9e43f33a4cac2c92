// The AMX path for bf16 KV in kTiles16 pages: q . k and P V as tile multiplies (tdpbf16ps), the
// online softmax in AVX-512 registers between them. A K tile of the page is already a B operand
// (16 pair lines of 16 keys) and a V tile's key-pair rows are one (16 d of two keys per 64-byte
// line, a row of D pairs apart), so the pages are read in place. Every row, a lone decode row
// included, takes the same tile sequence, whatever the other rows of its task: a tile multiply
// computes each output from its own row of A, so a row's bits do not depend on the batch
// (attention.h). Other page formats go to the vdpbf16ps kernel. Compiled with AMX-TILE/BF16 and
// AVX-512 BF16 flags, run only where cpuid, XCR0 and the OS's tile permission allow.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "attention/kernel.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/kernel_tiles.h"
#include "attention/simd_avx512.h"
#include "attention/simd_avx512_bf16.h"
#include "core/amx_config.h"

struct AmxBf16Isa : Avx512Bf16Rounding {
  static constexpr bool kDpTiles = true;  // PackPairs gives the weights as bf16 pairs
  static constexpr bool kAmxTiles = true;

  // The n (row, head) pairs of a KV head go in blocks of 16 and a last one of r = n % 16 (n < 16:
  // one block of n), the same blocks for every tile, so a pair's bits never depend on the others.
  // Tiles 0: C (m x 16 fp32), 1: A, Q (m x 32 bf16), 3: A, P (m x 16 bf16), with m = min(n, 16);
  // 5, 6, 7 the same with r rows; 2: B, a K tile's 16 pair lines; 4: B, 8 key-pair rows of V.
  // Without a last block 5 and 6 are a second C and B, so that P V's steps overlap.
  static void Configure(int n) {
    const int m = std::min(kAmxTileRows, n);
    const int r = n > kAmxTileRows ? n % kAmxTileRows : 0;
    const int rows[] = {m, m, 16, m, 8, r != 0 ? r : m, r != 0 ? r : 8, r};
    const int colsb[] = {64, 64, 64, 32, 64, 64, 64, 32};
    TileConfig want;
    for (int i = 0; i < 8; ++i) {
      if (rows[i] == 0) continue;
      want.rows[i] = static_cast<std::uint8_t>(rows[i]);
      want.colsb[i] = static_cast<std::uint16_t>(colsb[i]);
    }
    LoadTileConfig(want);
  }

  // One block's scores into s (row stride 16): C += Q K over D in steps of 32; kRest: the last,
  // shorter block's tiles (5, 6). GCC's tile intrinsics paste the tile's number into the
  // instruction, hence the literals.
  template <bool kRest>
  static void ScoreBlock(const uint16_t* q, int dqk, const uint16_t* kt, float* s) {
    if constexpr (kRest) {
      _tile_zero(5);
    } else {
      _tile_zero(0);
    }
    for (int c = 0; c < dqk; c += 32) {
      _tile_loadd(2, kt + c * kTileKeys, 64);
      if constexpr (kRest) {
        _tile_loadd(6, q + c, dqk * 2);
        _tile_dpbf16ps(5, 6, 2);
      } else {
        _tile_loadd(1, q + c, dqk * 2);
        _tile_dpbf16ps(0, 1, 2);
      }
    }
    if constexpr (kRest) {
      _tile_stored(5, s, 64);
    } else {
      _tile_stored(0, s, 64);
    }
  }

  // The scores of pairs [act, n) of one KV head (q: its n pairs' bf16 Q, row stride dqk) for the
  // 16 keys of K tile kt: s[i * 16 + j] (the rest of an active block's rows are scratch).
  template <int kD>
  static void AmxScores(const uint16_t* q, int act, int n, int dqk_arg, const uint16_t* kt,
                        const TilePrefetch* pf, float* s) {
    const int dqk = kD != 0 ? kD : dqk_arg;
    for (int64_t off = 0; off < int64_t{32} * dqk; off += 64) pf->Line(off);
    for (int b0 = act / kAmxTileRows * kAmxTileRows; b0 < n; b0 += kAmxTileRows) {
      const uint16_t* qb = q + static_cast<int64_t>(b0) * dqk;
      if (n - b0 >= kAmxTileRows || n < kAmxTileRows) {
        ScoreBlock<false>(qb, dqk, kt, s + b0 * kTileKeys);
      } else {
        ScoreBlock<true>(qb, dqk, kt, s + b0 * kTileKeys);
      }
    }
  }

  // SoftmaxBlock for pairs [act, n) (scores s[i * 16 + j], running max m[i] and sum l[i], O
  // rows o + i * dv), 16 pairs at a time: their block maxima and sums come out of one
  // transposing reduction each (lane i: pair i's, each lane in one fixed order), the correction
  // exp2(m - m_new) is one vector, and the weights are packed as bf16 pairs for AmxPv.
  static void AmxSoftmax(float* s, int act, int n, float* m, float* l, float* o, int dv,
                         uint32_t* packed) {
    for (int i0 = act; i0 < n; i0 += kAmxTileRows) {
      const int cnt = std::min(kAmxTileRows, n - i0);
      const __mmask16 live = static_cast<__mmask16>((1u << cnt) - 1);
      V v[kAmxTileRows];
      for (int i = 0; i < kAmxTileRows; ++i)
        v[i] = i < cnt ? Load(s + (i0 + i) * kTileKeys) : Zero();
      const V m_old = _mm512_maskz_loadu_ps(live, m + i0);
      const V m_new = Max(m_old, Transposed<true>(v));
      alignas(64) float mn[kAmxTileRows];
      Store(mn, m_new);
      for (int i = 0; i < cnt; ++i) {
        v[i] = Exp2(Add(v[i], Set1(-mn[i])));
        Store(s + (i0 + i) * kTileKeys, v[i]);
        PackPairs(s + (i0 + i) * kTileKeys, packed + (i0 + i) * (kTileKeys / 2));
      }
      const V corr = Exp2(_mm512_sub_ps(m_old, m_new));
      const V l_new = Add(Mul(_mm512_maskz_loadu_ps(live, l + i0), corr), Transposed<false>(v));
      _mm512_mask_storeu_ps(l + i0, live, l_new);
      _mm512_mask_storeu_ps(m + i0, live, m_new);
      alignas(64) float c[kAmxTileRows];
      Store(c, corr);
      unsigned grew = _mm512_mask_cmp_ps_mask(live, m_new, m_old, _CMP_GT_OQ);
      for (; grew != 0; grew &= grew - 1) {
        const int i = __builtin_ctz(grew);
        ScaleRow<AmxBf16Isa>(o + static_cast<int64_t>(i0 + i) * dv, dv, c[i]);
      }
    }
  }

  // Lane i: the max (kMax) or sum of v[i]'s lanes, by a transposing tree: pairs of rows, then
  // pairs of pairs, then across the 128-bit lanes.
  template <bool kMax>
  static V Transposed(const V (&v)[kAmxTileRows]) {
    auto op = [](V a, V b) { return kMax ? Max(a, b) : Add(a, b); };
    V w[8], u[4], z[2];
    for (int k = 0; k < 8; ++k) {
      w[k] = op(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    }
    for (int k = 0; k < 4; ++k) {
      const __m512d a = _mm512_castps_pd(w[2 * k]);
      const __m512d b = _mm512_castps_pd(w[2 * k + 1]);
      u[k] = op(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int k = 0; k < 2; ++k) {
      z[k] = op(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
    return op(_mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }

  // O += P V for one block (O rows at o, stride dv) in the tile: C is loaded from O, takes the
  // product and goes back, 16 of D at a time. kPair (no last block): two C / B pairs (0 / 4, 5 /
  // 6) alternate; else a full block takes C 0 and P 3, the last one C 5 and P 7.
  enum class PvTiles { kPair, kFull, kRest };
  template <PvTiles kT>
  static void PvBlock(const uint32_t* packed, const uint16_t* v, int dv, float* o) {
#define CTXPAR_PV_STEP(C, P, B, d)     \
  do {                                 \
    _tile_loadd(C, o + (d), dv * 4);   \
    _tile_loadd(B, v + (d)*2, dv * 4); \
    _tile_dpbf16ps(C, P, B);           \
    _tile_stored(C, o + (d), dv * 4);  \
  } while (0)
    if constexpr (kT == PvTiles::kRest) {
      _tile_loadd(7, packed, 32);
      for (int d = 0; d < dv; d += 16) CTXPAR_PV_STEP(5, 7, 4, d);
    } else {
      _tile_loadd(3, packed, 32);
      for (int d = 0; d < dv; d += kT == PvTiles::kPair ? 32 : 16) {
        CTXPAR_PV_STEP(0, 3, 4, d);
        if constexpr (kT == PvTiles::kPair) CTXPAR_PV_STEP(5, 3, 6, d + 16);
      }
    }
#undef CTXPAR_PV_STEP
  }

  // O[i] += P[i] V for pairs [act, n) of one KV head (O rows o + i * dv) over V tile vt, where
  // P's keys outside [lo, hi) are 0, on AMX's own rounding of the sum. The blocks' rows below act
  // get P = 0: they add 0 to an O that a tile multiply wrote last. `scratch` (8 * dv floats)
  // takes the tile with the keys outside [lo, hi) zeroed: they may hold anything, NaN included,
  // and 0 * NaN is NaN.
  template <int kD>
  static void AmxPv(uint32_t* packed, int act, int n, const uint16_t* vt, int lo, int hi,
                    int dv_arg, const TilePrefetch* pf, float* o, float* scratch) {
    const int dv = kD != 0 ? kD : dv_arg;
    for (int64_t off = 0; off < int64_t{32} * dv; off += 64) pf->Line(off);
    const uint16_t* v = vt;
    if (lo > 0 || hi < kTileKeys) v = ZeroOutside(vt, lo, hi, dv, scratch);
    const int first = act / kAmxTileRows * kAmxTileRows;
    std::memset(packed + first * (kTileKeys / 2), 0,
                sizeof(uint32_t) * (kTileKeys / 2) * (act - first));
    for (int b0 = first; b0 < n; b0 += kAmxTileRows) {
      const uint32_t* pb = packed + b0 * (kTileKeys / 2);
      float* ob = o + static_cast<int64_t>(b0) * dv;
      if (n <= kAmxTileRows || n % kAmxTileRows == 0) {
        PvBlock<PvTiles::kPair>(pb, v, dv, ob);  // dv % 32 == 0 here (partial_attention.cpp)
      } else if (n - b0 >= kAmxTileRows) {
        PvBlock<PvTiles::kFull>(pb, v, dv, ob);
      } else {
        PvBlock<PvTiles::kRest>(pb, v, dv, ob);
      }
    }
  }

  // A copy of V tile vt (8 rows of dv words, a word holding keys 2r and 2r + 1) with the keys
  // outside [lo, hi) zeroed.
  static const uint16_t* ZeroOutside(const uint16_t* vt, int lo, int hi, int dv, float* scratch) {
    auto* out = reinterpret_cast<uint32_t*>(scratch);
    const auto* in = reinterpret_cast<const uint32_t*>(vt);
    for (int r = 0; r < kTileKeys / 2; ++r) {
      const bool even = 2 * r >= lo && 2 * r < hi;
      const bool odd = 2 * r + 1 >= lo && 2 * r + 1 < hi;
      const __m512i keep =
          _mm512_set1_epi32(static_cast<int>((even ? 0xffffu : 0u) | (odd ? 0xffff0000u : 0u)));
      for (int d = 0; d < dv; d += kLanes) {
        const int64_t at = static_cast<int64_t>(r) * dv + d;
        _mm512_storeu_si512(out + at, _mm512_and_si512(_mm512_loadu_si512(in + at), keep));
      }
    }
    return reinterpret_cast<const uint16_t*>(scratch);
  }
};

}  // namespace

void AttendAmxBf16(const KernelArgs& args) {
  if (!args.tiles) return AttendAvx512DpBf16(args);
  AttendTiles<AmxBf16Isa, uint16_t>(args);
}

}  // namespace ctxpar::attention_internal
