// The AVX2 kernel of the int8 path (linear_int8.h), for CPUs without AVX512-VNNI: two registers
// hold the 16 rows of a tile (8 each); vpmaddubsw multiplies unsigned by signed bytes into int16
// pairs, vpmaddwd adds the pairs into int32. No sum saturates: the types with a min take q
// (0..31) as the unsigned operand (|pair| <= 2 * 31 * 127), the signed ones |q| (<= 128) and the
// activation with q's sign (|x| <= 127; |pair| <= 2 * 128 * 127 = 32,512). Compiled with AVX2 and
// FMA, run only where cpuid has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "models/linear_int8.h"

namespace ctxpar::model::int8_internal {
namespace {

constexpr int kTokens = 4;

template <int NT, bool kMin>
void Tokens(const Int8Tile& t, int t0) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, per_group = kBlock / w.sub;
  const std::int8_t* xq[NT];
  const float* dx[NT];
  const float* xs[NT];
  for (int i = 0; i < NT; ++i) {
    xq[i] = t.x->i8.data() + std::size_t(t0 + i) * w.cols;
    dx[i] = t.x->i8_d.data() + ScaleAt(t0 + i, 0, groups);
    xs[i] = t.x->i8_xs.data() + ScaleAt(t0 + i, 0, groups);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NT][2];
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int g = 0; g < groups; ++g) {
    for (int h = 0; h < per_group; ++h) {
      const int s = g * per_group + h;
      const std::int8_t* q = w.Q(t.tile, s);
      __m256i isum[NT][2];
      for (int i = 0; i < NT; ++i) isum[i][0] = isum[i][1] = _mm256_setzero_si256();
      for (int k = 0; k < w.sub / 4; ++k) {
        __m256i wv[2], wabs[2];
        for (int p = 0; p < 2; ++p) {
          wv[p] = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k * 64 + 32 * p));
          wabs[p] = kMin ? wv[p] : _mm256_abs_epi8(wv[p]);
        }
        for (int i = 0; i < NT; ++i) {
          std::int32_t bytes;
          std::memcpy(&bytes, xq[i] + s * w.sub + 4 * k, 4);
          const __m256i xv = _mm256_set1_epi32(bytes);
          for (int p = 0; p < 2; ++p) {
            const __m256i xs8 = kMin ? xv : _mm256_sign_epi8(xv, wv[p]);
            const __m256i pairs = _mm256_maddubs_epi16(wabs[p], xs8);
            isum[i][p] = _mm256_add_epi32(isum[i][p], _mm256_madd_epi16(pairs, ones));
          }
        }
      }
      for (int p = 0; p < 2; ++p) {
        const __m256 scale = _mm256_loadu_ps(w.Scale(t.tile, s) + 8 * p);
        for (int i = 0; i < NT; ++i) {
          const __m256 sd = _mm256_mul_ps(scale, _mm256_set1_ps(dx[i][g * kTileTokens]));
          acc[i][p] = _mm256_fmadd_ps(sd, _mm256_cvtepi32_ps(isum[i][p]), acc[i][p]);
        }
      }
    }
    if (kMin) {
      for (int p = 0; p < 2; ++p) {
        const __m256 mn = _mm256_loadu_ps(w.Min(t.tile, g) + 8 * p);
        for (int i = 0; i < NT; ++i) {
          acc[i][p] = _mm256_fmadd_ps(mn, _mm256_set1_ps(xs[i][g * kTileTokens]), acc[i][p]);
        }
      }
    }
  }
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  for (int i = 0; i < NT; ++i) {
    float* y = t.y + std::size_t(t0 + i) * t.ldy + t.tile * kTileRows;
    alignas(32) float out[kTileRows];
    _mm256_store_ps(out, acc[i][0]);
    _mm256_store_ps(out + 8, acc[i][1]);
    std::memcpy(y, out, sizeof(float) * rows);
  }
}

template <bool kMin, int... NT>
void Dispatch(const Int8Tile& t, int t0, int nt, std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? Tokens<NT + 1, kMin>(t, t0) : void()), ...);
}

}  // namespace

void Int8TileAvx2(const Int8Tile& t) {
  for (int t0 = t.t0; t0 < t.t0 + t.nt; t0 += kTokens) {
    const int nt = std::min(kTokens, t.t0 + t.nt - t0);
    if (t.w->has_min) {
      Dispatch<true>(t, t0, nt, std::make_integer_sequence<int, kTokens>());
    } else {
      Dispatch<false>(t, t0, nt, std::make_integer_sequence<int, kTokens>());
    }
  }
}

}  // namespace ctxpar::model::int8_internal
