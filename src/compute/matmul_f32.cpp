#include "compute/matmul_f32.h"

// GCC's AVX-512 intrinsic headers build vectors from _mm512_undefined_*, which -Wextra reports
// as uninitialised when they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ctxpar::compute {

namespace {

constexpr int kLanes = 16;

// The fixed pairwise reduction of the 16 lanes, and the scalar tail past the last full 16.
float Finish(float* lane, const float* x, const float* w, int full, int cols) {
  for (int c = full; c < cols; ++c) lane[c - full] = std::fma(x[c], w[c], lane[c - full]);
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  }
  return lane[0];
}

// Outputs of a tile: up to kTileT rows of x against up to kTileR rows of w (the largest tile any
// path takes; a path's kernel covers it in its own register blocks).
constexpr int kTileT = 2;
constexpr int kTileR = 4;

using TileFn = void (*)(const float* const* x, int nt, const float* const* w, int nr, int cols,
                        float* y, int ldy);

void TileScalar(const float* const* x, int nt, const float* const* w, int nr, int cols, float* y,
                int ldy) {
  const int full = cols / kLanes * kLanes;
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float lane[kLanes] = {};
      for (int c = 0; c < full; c += kLanes) {
        for (int j = 0; j < kLanes; ++j) lane[j] = std::fma(x[t][c + j], w[r][c + j], lane[j]);
      }
      y[t * ldy + r] = Finish(lane, x[t], w[r], full, cols);
    }
  }
}

#define CTXPAR_AVX2 __attribute__((target("avx2,fma")))
#define CTXPAR_AVX512 __attribute__((target("avx2,fma,avx512f")))

// Lanes 0-7 in lo and 8-15 in hi: the pairwise steps are lo + hi (j + 8), then the 128-bit
// halves (j + 4), then j + 2 and j + 1, each a single rounding as in Finish.
CTXPAR_AVX2 inline float Reduce(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

CTXPAR_AVX2 inline void Store(__m256 lo, __m256 hi, const float* x, const float* w, int full,
                              int cols, float* y) {
  if (full == cols) {
    *y = Reduce(lo, hi);
    return;
  }
  float lane[kLanes];
  _mm256_storeu_ps(lane, lo);
  _mm256_storeu_ps(lane + 8, hi);
  *y = Finish(lane, x, w, full, cols);
}

// A block of NT x NR outputs in 2 * NT * NR accumulators (16 ymm registers hold 2 x 2 and the
// loads).
template <int NT, int NR>
CTXPAR_AVX2 void BlockAvx2(const float* const* x, const float* const* w, int cols, float* y,
                           int ldy) {
  const int full = cols / kLanes * kLanes;
  __m256 lo[NT][NR], hi[NT][NR];
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < NR; ++r) lo[t][r] = hi[t][r] = _mm256_setzero_ps();
  }
  for (int c = 0; c < full; c += kLanes) {
    __m256 x0[NT], x1[NT];
    for (int t = 0; t < NT; ++t) {
      x0[t] = _mm256_loadu_ps(x[t] + c);
      x1[t] = _mm256_loadu_ps(x[t] + c + 8);
    }
    for (int r = 0; r < NR; ++r) {
      const __m256 w0 = _mm256_loadu_ps(w[r] + c), w1 = _mm256_loadu_ps(w[r] + c + 8);
      for (int t = 0; t < NT; ++t) {
        lo[t][r] = _mm256_fmadd_ps(x0[t], w0, lo[t][r]);
        hi[t][r] = _mm256_fmadd_ps(x1[t], w1, hi[t][r]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < NR; ++r) Store(lo[t][r], hi[t][r], x[t], w[r], full, cols, y + t * ldy + r);
  }
}

CTXPAR_AVX2 void TileAvx2(const float* const* x, int nt, const float* const* w, int nr, int cols,
                          float* y, int ldy) {
  for (int t = 0; t < nt; t += 2) {
    for (int r = 0; r < nr; r += 2) {
      const int bt = std::min(2, nt - t), br = std::min(2, nr - r);
      float* out = y + t * ldy + r;
      if (bt == 2 && br == 2) {
        BlockAvx2<2, 2>(x + t, w + r, cols, out, ldy);
      } else if (bt == 2) {
        BlockAvx2<2, 1>(x + t, w + r, cols, out, ldy);
      } else if (br == 2) {
        BlockAvx2<1, 2>(x + t, w + r, cols, out, ldy);
      } else {
        BlockAvx2<1, 1>(x + t, w + r, cols, out, ldy);
      }
    }
  }
}

// 16 lanes in one zmm: its 256-bit halves are the AVX2 path's lo and hi.
template <int NT, int NR>
CTXPAR_AVX512 void BlockAvx512(const float* const* x, const float* const* w, int cols, float* y,
                               int ldy) {
  const int full = cols / kLanes * kLanes;
  __m512 acc[NT][NR];
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < NR; ++r) acc[t][r] = _mm512_setzero_ps();
  }
  for (int c = 0; c < full; c += kLanes) {
    __m512 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_loadu_ps(x[t] + c);
    for (int r = 0; r < NR; ++r) {
      const __m512 wv = _mm512_loadu_ps(w[r] + c);
      for (int t = 0; t < NT; ++t) acc[t][r] = _mm512_fmadd_ps(xv[t], wv, acc[t][r]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    for (int r = 0; r < NR; ++r) {
      const __m256 lo = _mm512_castps512_ps256(acc[t][r]);
      const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t][r]), 1));
      Store(lo, hi, x[t], w[r], full, cols, y + t * ldy + r);
    }
  }
}

CTXPAR_AVX512 void TileAvx512(const float* const* x, int nt, const float* const* w, int nr,
                              int cols, float* y, int ldy) {
  if (nt == kTileT && nr == kTileR) {
    BlockAvx512<kTileT, kTileR>(x, w, cols, y, ldy);
    return;
  }
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) BlockAvx512<1, 1>(x + t, w + r, cols, y + t * ldy + r, ldy);
  }
}

struct Path {
  const char* isa;
  TileFn tile;
};

// CTXPAR_CPU_ISA (cpu_features.h) can force a lower path, so that tests reach each one.
const Path& Selected() {
  static const Path path = [] {
    __builtin_cpu_init();
    const char* forced = std::getenv("CTXPAR_CPU_ISA");
    const std::string want = forced != nullptr ? forced : "";
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
    if (avx512 && (want.empty() || want.starts_with("avx512"))) return Path{"avx512", &TileAvx512};
    if (avx2 && want != "scalar") return Path{"avx2", &TileAvx2};
    return Path{"scalar", &TileScalar};
  }();
  return path;
}

}  // namespace

float DotF32Fixed(const float* x, const float* w, int cols) {
  float y = 0.0f;
  TileScalar(&x, 1, &w, 1, cols, &y, 1);
  return y;
}

const char* MatMulF32Isa() { return Selected().isa; }

void MatMulF32(const F32Matrix& w, const float* x, int n, int ldx, float* y, int ldy,
               ThreadPool* pool) {
  if (n <= 0 || w.rows <= 0) return;
  const TileFn tile = Selected().tile;
  const int t_tiles = (n + kTileT - 1) / kTileT;
  const int r_tiles = (w.rows + kTileR - 1) / kTileR;
  // Tiles are ordered row-tile major so that a thread's chunk reuses the same weights.
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int rt = static_cast<int>(i / t_tiles), tt = static_cast<int>(i % t_tiles);
      const int r0 = rt * kTileR, t0 = tt * kTileT;
      const int nr = std::min(kTileR, w.rows - r0), nt = std::min(kTileT, n - t0);
      const float* xs[kTileT];
      const float* ws[kTileR];
      for (int t = 0; t < nt; ++t) xs[t] = x + static_cast<long>(t0 + t) * ldx;
      for (int r = 0; r < nr; ++r) ws[r] = w.w + static_cast<long>(r0 + r) * w.ld;
      tile(xs, nt, ws, nr, w.cols, y + static_cast<long>(t0) * ldy + r0, ldy);
    }
  };
  const int64_t tiles = int64_t{t_tiles} * r_tiles;
  // Below this many multiply-adds a parallel loop costs more than it saves.
  constexpr int64_t kSerialMacs = 1 << 15;
  if (pool == nullptr || tiles * kTileT * kTileR * w.cols < kSerialMacs) {
    run(0, tiles);
  } else {
    pool->ParallelFor(tiles, run);
  }
}

}  // namespace ctxpar::compute
