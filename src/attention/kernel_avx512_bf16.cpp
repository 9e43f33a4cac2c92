// The AVX-512 BF16 path for bf16 KV: q . k by vdpbf16ps on Q rounded to bf16 once per task, and
// P V by vdpbf16ps on the softmax weights rounded to bf16, two keys per instruction (attention.h
// states the accuracy); compiled with -mavx512bf16, run only where cpuid has it.
#include <immintrin.h>

#include <cstring>

#include "attention/kernel.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/kernel_tiles.h"
#include "attention/simd_avx512.h"
#include "attention/simd_avx512_bf16.h"

struct Avx512DpBf16Isa : Avx512Bf16Rounding {
  static constexpr int kDotStep = 32;
  static constexpr bool kPairedPv = true;
  // 4 x 4 accumulators, 4 interleaved V vectors, two index vectors and the loads: 32 registers.
  static constexpr int kPvHeads = 4;
  static constexpr int kPairedPvHeads = kPvHeads;

  // O[h][d] += sum_j p[h][j] v[j][d] for keys taken in pairs: vpermt2w interleaves two V rows
  // into (v[j][d], v[j+1][d]) pairs, which meet the broadcast pair (p[h][j], p[h][j+1]).
  template <int HB, int DB>
  static void PairTile(const uint32_t* pairs, int n2, const uint16_t* const* v, int d0, float* o,
                       int dv, Prefetcher* pf) {
    V acc[HB][DB];
    for (int i = 0; i < HB; ++i) {
      for (int b = 0; b < DB; ++b) acc[i][b] = Load(o + i * dv + d0 + b * kLanes);
    }
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40,
                                        8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const bool fine = pf->memory_bound;
    if (!fine) pf->Step();
    for (int j = 0; j < n2; j += 2) {
      if (fine) pf->Step();
      __m512i vv[DB];
      if constexpr (DB == 1) {
        const __m512i a =
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v[j] + d0)));
        const __m512i c = _mm512_castsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v[j + 1] + d0)));
        vv[0] = _mm512_permutex2var_epi16(a, lo, c);
      } else {
        for (int b = 0; b < DB; b += 2) {
          const __m512i a = _mm512_loadu_si512(v[j] + d0 + b * kLanes);
          const __m512i c = _mm512_loadu_si512(v[j + 1] + d0 + b * kLanes);
          vv[b] = _mm512_permutex2var_epi16(a, lo, c);
          vv[b + 1] = _mm512_permutex2var_epi16(a, hi, c);
        }
      }
      for (int i = 0; i < HB; ++i) {
        const __m512i pp = _mm512_set1_epi32(static_cast<int>(pairs[i * kKeyBlock + j / 2]));
        for (int b = 0; b < DB; ++b) {
          acc[i][b] = _mm512_dpbf16_ps(acc[i][b], reinterpret_cast<const __m512bh&>(pp),
                                       reinterpret_cast<const __m512bh&>(vv[b]));
        }
      }
    }
    for (int i = 0; i < HB; ++i) {
      for (int b = 0; b < DB; ++b) Store(o + i * dv + d0 + b * kLanes, acc[i][b]);
    }
  }

  template <int HB>
  static void PairRows(const uint32_t* pairs, int n2, const uint16_t* const* v, int heads, float* o,
                       int dv, Prefetcher* pf) {
    if constexpr (HB > 1) {
      if (heads < HB) return PairRows<HB - 1>(pairs, n2, v, heads, o, dv, pf);
    }
    int d = 0;
    for (; d + 4 * kLanes <= dv; d += 4 * kLanes) {
      PairTile<HB, 4>(pairs, n2, v, d, o, dv, pf);
    }
    for (; d < dv; d += kLanes) PairTile<HB, 1>(pairs, n2, v, d, o, dv, pf);
  }

  static void PairedPv(float* p, int n, const uint16_t* const* v, int group, float* o, int dv,
                       Prefetcher* pf) {
    // Each row of p becomes bf16 in place, in its first half: kKeyBlock / 2 pairs. Ascending
    // chunks never overwrite weights not yet read.
    for (int h = 0; h < group; ++h) {
      float* row = p + h * kKeyBlock;
      for (int c = 0; c < kKeyBlock; c += kLanes) {
        const __m256bh b = _mm512_cvtneps_pbh(Load(row + c));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + c / 2),
                            reinterpret_cast<const __m256i&>(b));
      }
    }
    const auto* pairs = reinterpret_cast<const uint32_t*>(p);
    const int n2 = (n + 1) / 2 * 2;
    for (int h = 0; h < group; h += kPairedPvHeads) {
      const int heads = group - h < kPairedPvHeads ? group - h : kPairedPvHeads;
      PairRows<kPairedPvHeads>(pairs + h * kKeyBlock, n2, v, heads,
                               o + static_cast<int64_t>(h) * dv, dv, pf);
    }
  }

  // kTiles16 (kernel_tiles.h): a K line is 16 keys x one bf16 pair of d, a V line 16 d x one pair
  // of keys, so both products are vdpbf16ps of a line by a broadcast pair (of q, or of weights).
  static constexpr bool kDpTiles = true;

  template <int HB, int kD>
  static void TileScores(const uint16_t* q, int dqk_arg, const uint16_t* kt, const TilePrefetch* pf,
                         float* s) {
    constexpr int kSplit = kTileSplit;
    const int dqk = kD != 0 ? kD : dqk_arg;
    V acc[HB][kSplit];
    for (int i = 0; i < HB; ++i) {
      for (int sp = 0; sp < kSplit; ++sp) acc[i][sp] = Zero();
    }
    const int words = dqk / 2;
    for (int w = 0; w < words; w += kSplit) {
      for (int sp = 0; sp < kSplit; ++sp) {
        if (pf != nullptr) pf->Line(static_cast<int64_t>(w + sp) * 64);
        const __m512i kv = _mm512_loadu_si512(kt + (w + sp) * 32);
        for (int i = 0; i < HB; ++i) {
          uint32_t qw;
          std::memcpy(&qw, q + i * dqk + 2 * (w + sp), sizeof(qw));
          const __m512i qq = _mm512_set1_epi32(static_cast<int>(qw));
          acc[i][sp] = _mm512_dpbf16_ps(acc[i][sp], reinterpret_cast<const __m512bh&>(qq),
                                        reinterpret_cast<const __m512bh&>(kv));
        }
      }
    }
    for (int i = 0; i < HB; ++i) {
      V sum = acc[i][0];
      for (int sp = 1; sp < kSplit; ++sp) sum = Add(sum, acc[i][sp]);
      Store(s + i * kTileKeys, sum);
    }
  }

  template <int HB, int DB>
  static void TilePvChunk(const uint32_t* pairs, const VRows<uint16_t>& v, int dv, int d0,
                          const TilePrefetch* pf, float* o) {
    V acc[HB][DB];
    for (int i = 0; i < HB; ++i) {
      for (int b = 0; b < DB; ++b) acc[i][b] = Load(o + i * dv + d0 + b * kLanes);
    }
    for (int jp = v.lo; jp < v.hi; ++jp) {
      const uint16_t* row = v.row[jp] + static_cast<int64_t>(d0) * 2;
      for (int b = 0; b < DB; ++b) {
        if (pf != nullptr) pf->Line((static_cast<int64_t>(jp) * dv + d0) * 4 + b * 64);
        const __m512i vv = _mm512_loadu_si512(row + b * 32);
        for (int i = 0; i < HB; ++i) {
          const __m512i pp = _mm512_set1_epi32(static_cast<int>(pairs[i * (kTileKeys / 2) + jp]));
          acc[i][b] = _mm512_dpbf16_ps(acc[i][b], reinterpret_cast<const __m512bh&>(pp),
                                       reinterpret_cast<const __m512bh&>(vv));
        }
      }
    }
    for (int i = 0; i < HB; ++i) {
      for (int b = 0; b < DB; ++b) Store(o + i * dv + d0 + b * kLanes, acc[i][b]);
    }
  }

  static V Dot(V acc, const QElem* q, const uint16_t* k) {
    const __m512i qv = _mm512_loadu_si512(q);
    const __m512i kv = _mm512_loadu_si512(k);
    return _mm512_dpbf16_ps(acc, reinterpret_cast<const __m512bh&>(qv),
                            reinterpret_cast<const __m512bh&>(kv));
  }
};

}  // namespace

void AttendAvx512DpBf16(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx512DpBf16Isa, uint16_t>(args)
             : Attend<Avx512DpBf16Isa, uint16_t>(args);
}

}  // namespace ctxpar::attention_internal
