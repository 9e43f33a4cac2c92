#include "models/matmul_f32.h"

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

namespace ctxpar::model {

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

// Outputs of a tile: up to kTileT rows of x against up to kTileR rows of w.
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

// Lanes 0-7 in lo and 8-15 in hi: the first pairwise step is lo + hi.
CTXPAR_AVX2 void TileAvx2(const float* const* x, int nt, const float* const* w, int nr, int cols,
                          float* y, int ldy) {
  const int full = cols / kLanes * kLanes;
  __m256 lo[kTileT][kTileR], hi[kTileT][kTileR];
  for (int t = 0; t < kTileT; ++t) {
    for (int r = 0; r < kTileR; ++r) lo[t][r] = hi[t][r] = _mm256_setzero_ps();
  }
  if (nt == kTileT && nr == kTileR) {
    for (int c = 0; c < full; c += kLanes) {
      for (int r = 0; r < kTileR; ++r) {
        const __m256 w0 = _mm256_loadu_ps(w[r] + c), w1 = _mm256_loadu_ps(w[r] + c + 8);
        for (int t = 0; t < kTileT; ++t) {
          lo[t][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x[t] + c), w0, lo[t][r]);
          hi[t][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x[t] + c + 8), w1, hi[t][r]);
        }
      }
    }
  } else {
    for (int c = 0; c < full; c += kLanes) {
      for (int r = 0; r < nr; ++r) {
        const __m256 w0 = _mm256_loadu_ps(w[r] + c), w1 = _mm256_loadu_ps(w[r] + c + 8);
        for (int t = 0; t < nt; ++t) {
          lo[t][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x[t] + c), w0, lo[t][r]);
          hi[t][r] = _mm256_fmadd_ps(_mm256_loadu_ps(x[t] + c + 8), w1, hi[t][r]);
        }
      }
    }
  }
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float lane[kLanes];
      _mm256_storeu_ps(lane, lo[t][r]);
      _mm256_storeu_ps(lane + 8, hi[t][r]);
      y[t * ldy + r] = Finish(lane, x[t], w[r], full, cols);
    }
  }
}

CTXPAR_AVX512 void TileAvx512(const float* const* x, int nt, const float* const* w, int nr,
                              int cols, float* y, int ldy) {
  const int full = cols / kLanes * kLanes;
  __m512 acc[kTileT][kTileR];
  for (int t = 0; t < kTileT; ++t) {
    for (int r = 0; r < kTileR; ++r) acc[t][r] = _mm512_setzero_ps();
  }
  if (nt == kTileT && nr == kTileR) {
    for (int c = 0; c < full; c += kLanes) {
      const __m512 x0 = _mm512_loadu_ps(x[0] + c), x1 = _mm512_loadu_ps(x[1] + c);
      for (int r = 0; r < kTileR; ++r) {
        const __m512 wv = _mm512_loadu_ps(w[r] + c);
        acc[0][r] = _mm512_fmadd_ps(x0, wv, acc[0][r]);
        acc[1][r] = _mm512_fmadd_ps(x1, wv, acc[1][r]);
      }
    }
  } else {
    for (int c = 0; c < full; c += kLanes) {
      for (int r = 0; r < nr; ++r) {
        const __m512 wv = _mm512_loadu_ps(w[r] + c);
        for (int t = 0; t < nt; ++t) {
          acc[t][r] = _mm512_fmadd_ps(_mm512_loadu_ps(x[t] + c), wv, acc[t][r]);
        }
      }
    }
  }
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < nr; ++r) {
      float lane[kLanes];
      _mm512_storeu_ps(lane, acc[t][r]);
      y[t * ldy + r] = Finish(lane, x[t], w[r], full, cols);
    }
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

}  // namespace ctxpar::model
