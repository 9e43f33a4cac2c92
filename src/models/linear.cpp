#include "models/linear.h"

// GCC's AVX-512 intrinsic headers build vectors from _mm512_undefined_*, which -Wextra reports
// as uninitialised when they are inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace ctxpar::model {

QuantMatrix QuantMatrix::RowRange(int begin, int count) const {
  QuantMatrix m = *this;
  m.data = data + std::size_t(begin) * row_stride;
  m.rows = count;
  return m;
}

QuantMatrix QuantMatrix::ColRange(int begin, int count) const {
  QuantMatrix m = *this;
  m.data = data + std::size_t(begin / kBlock) * BlockBytes(type);
  m.cols = count;
  return m;
}

void PrepareActs(ActFormat format, WeightType type, const float* x, int n, int cols, int ldx,
                 Acts* out) {
  out->format = format;
  out->type = type;
  out->n = n;
  out->blocks_per_row = cols / kBlock;
  if (format == ActFormat::kF32) {
    out->x.resize(std::size_t(n) * cols);
    out->block_sums.resize(std::size_t(n) * out->blocks_per_row);
    for (int t = 0; t < n; ++t) {
      std::memcpy(out->x.data() + std::size_t(t) * cols, x + std::size_t(t) * ldx,
                  sizeof(float) * cols);
      for (int b = 0; b < out->blocks_per_row; ++b) {
        const float* v = x + std::size_t(t) * ldx + b * kBlock;
        float sum = 0.0f;
        for (int j = 0; j < kBlock; ++j) sum += v[j];
        out->block_sums[std::size_t(t) * out->blocks_per_row + b] = sum;
      }
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

float DotScalar(WeightType type, const std::uint8_t* w, const ActBlock* x, int num_blocks) {
  float sum = 0.0f;
  for (int b = 0; b < num_blocks; ++b) {
    const std::uint8_t* blk = w + b * BlockBytes(type);
    std::uint16_t dh;
    std::memcpy(&dh, blk, 2);
    const float dw = Fp16ToFp32(dh);
    int sumi = 0;
    if (type == WeightType::kQ4_1) {
      std::uint16_t mh;
      std::memcpy(&mh, blk + 2, 2);
      for (int j = 0; j < 16; ++j) {
        sumi += (blk[4 + j] & 0xF) * x[b].q[j] + (blk[4 + j] >> 4) * x[b].q[j + 16];
      }
      sum += dw * x[b].d * float(sumi) + Fp16ToFp32(mh) * x[b].s;
    } else {
      const auto* q = reinterpret_cast<const std::int8_t*>(blk + 2);
      for (int j = 0; j < kBlock; ++j) sumi += q[j] * x[b].q[j];
      sum += dw * x[b].d * float(sumi);
    }
  }
  return sum;
}

float DotF32Scalar(WeightType type, const std::uint8_t* w, const float* x, const float* sums,
                   int num_blocks) {
  float sum = 0.0f;
  for (int b = 0; b < num_blocks; ++b) {
    const std::uint8_t* blk = w + b * BlockBytes(type);
    std::uint16_t dh;
    std::memcpy(&dh, blk, 2);
    const float* xb = x + b * kBlock;
    float dot = 0.0f;
    if (type == WeightType::kQ4_1) {
      std::uint16_t mh;
      std::memcpy(&mh, blk + 2, 2);
      for (int j = 0; j < 16; ++j) {
        dot += float(blk[4 + j] & 0xF) * xb[j] + float(blk[4 + j] >> 4) * xb[j + 16];
      }
      sum += Fp16ToFp32(dh) * dot + Fp16ToFp32(mh) * sums[b];
    } else {
      const auto* q = reinterpret_cast<const std::int8_t*>(blk + 2);
      for (int j = 0; j < kBlock; ++j) dot += float(q[j]) * xb[j];
      sum += Fp16ToFp32(dh) * dot;
    }
  }
  return sum;
}

namespace {

#define CTXPAR_AVX2 __attribute__((target("avx2,fma,f16c")))
#define CTXPAR_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

CTXPAR_AVX2 inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

CTXPAR_AVX2 inline float Half(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

CTXPAR_AVX2 inline __m256i Nibbles(const std::uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

CTXPAR_VNNI float DotQ41Vnni(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  float msum = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 20;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), Nibbles(blk + 4), a);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Half(blk) * x[b].d), acc);
    msum += Half(blk + 2) * x[b].s;
  }
  return HSum(acc) + msum;
}

CTXPAR_VNNI float DotQ80Vnni(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 34;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    // dpbusd multiplies unsigned by signed: move w's sign onto a.
    const __m256i p =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(a, q));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Half(blk) * x[b].d), acc);
  }
  return HSum(acc);
}

CTXPAR_AVX2 inline __m256i MulSum(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

CTXPAR_AVX2 float DotQ41Avx2(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  float msum = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 20;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m256i p = MulSum(Nibbles(blk + 4), a);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Half(blk) * x[b].d), acc);
    msum += Half(blk + 2) * x[b].s;
  }
  return HSum(acc) + msum;
}

CTXPAR_AVX2 float DotQ80Avx2(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 34;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m256i p = MulSum(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Half(blk) * x[b].d), acc);
  }
  return HSum(acc);
}

#define CTXPAR_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw")))

// NT activation rows against one weight row: each weight block is widened to fp32 once and used
// NT times; every row's arithmetic is the same whatever NT is.
template <int NT>
CTXPAR_AVX512 void DotF32Avx512(WeightType type, const std::uint8_t* w, const float* const* x,
                                const float* const* sums, int nb, float* out) {
  __m512 acc[NT];
  float msum[NT];
  for (int i = 0; i < NT; ++i) {
    acc[i] = _mm512_setzero_ps();
    msum[i] = 0.0f;
  }
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int b = 0; b < nb; ++b) {
    __m512 lo, hi;
    __m512 d;
    if (type == WeightType::kQ4_1) {
      const std::uint8_t* blk = w + b * 20;
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
      lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(bytes, mask)));
      hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask)));
      d = _mm512_set1_ps(Half(blk));
      const float m = Half(blk + 2);
      for (int i = 0; i < NT; ++i) msum[i] += m * sums[i][b];
    } else {
      const std::uint8_t* blk = w + b * 34;
      lo = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
      hi = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
      d = _mm512_set1_ps(Half(blk));
    }
    for (int i = 0; i < NT; ++i) {
      const float* xb = x[i] + b * kBlock;
      __m512 p = _mm512_mul_ps(lo, _mm512_loadu_ps(xb));
      p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 16), p);
      acc[i] = _mm512_fmadd_ps(d, p, acc[i]);
    }
  }
  for (int i = 0; i < NT; ++i) out[i] = _mm512_reduce_add_ps(acc[i]) + msum[i];
}

// Rows [r0, r0 + rows) of w (rows <= 16) widened to fp32, transposed: wt[k * 16 + r].
void WidenTile(const QuantMatrix& w, int r0, int rows, float* wt) {
  float row[kBlock];
  const int nb = w.cols / kBlock;
  for (int r = 0; r < 16; ++r) {
    for (int b = 0; b < nb; ++b) {
      const std::uint8_t* blk =
          w.data + std::size_t(r0 + std::min(r, rows - 1)) * w.row_stride + b * BlockBytes(w.type);
      const float d = Fp16ToFp32(*reinterpret_cast<const std::uint16_t*>(blk));
      if (w.type == WeightType::kQ4_1) {
        const float m = Fp16ToFp32(*reinterpret_cast<const std::uint16_t*>(blk + 2));
        for (int j = 0; j < 16; ++j) {
          row[j] = d * float(blk[4 + j] & 0xF) + m;
          row[j + 16] = d * float(blk[4 + j] >> 4) + m;
        }
      } else {
        const auto* q = reinterpret_cast<const std::int8_t*>(blk + 2);
        for (int j = 0; j < kBlock; ++j) row[j] = d * float(q[j]);
      }
      for (int j = 0; j < kBlock; ++j) wt[std::size_t(b * kBlock + j) * 16 + r] = row[j];
    }
  }
}

// y[t, r0 + r] = sum_k x[t, k] * wt[k, r] for 8 tokens at a time: one fma chain along k per
// output, so a row's value does not depend on the tiling or the thread count.
CTXPAR_AVX512 void GemmTileAvx512(const float* wt, int k_len, const float* const* x, int nt,
                                  float* const* y, int rows) {
  __m512 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm512_setzero_ps();
  for (int k = 0; k < k_len; ++k) {
    const __m512 w = _mm512_loadu_ps(wt + std::size_t(k) * 16);
    for (int i = 0; i < 8; ++i) {
      if (i < nt) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i][k]), w, acc[i]);
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int i = 0; i < nt; ++i) _mm512_mask_storeu_ps(y[i], mask, acc[i]);
}

template <int NT>
void DotF32ScalarN(WeightType type, const std::uint8_t* w, const float* const* x,
                   const float* const* sums, int nb, float* out) {
  for (int i = 0; i < NT; ++i) out[i] = DotF32Scalar(type, w, x[i], sums[i], nb);
}

using DotFn = float (*)(const std::uint8_t*, const ActBlock*, int);
using GemmFn = void (*)(const float*, int, const float* const*, int, float* const*, int);
using DotF32Fn = void (*)(WeightType, const std::uint8_t*, const float* const*, const float* const*,
                          int, float*);

struct Kernels {
  const char* isa;
  DotFn q41;
  DotFn q80;
  DotF32Fn f32x1;
  DotF32Fn f32x4;
  GemmFn gemm;  // null: prefill uses the f32x4 path
};

float DotQ41Scalar(const std::uint8_t* w, const ActBlock* x, int nb) {
  return DotScalar(WeightType::kQ4_1, w, x, nb);
}
float DotQ80Scalar(const std::uint8_t* w, const ActBlock* x, int nb) {
  return DotScalar(WeightType::kQ8_0, w, x, nb);
}

const Kernels& Selected() {
  static const Kernels kernels = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw")) {
      return Kernels{"avx512vnni",     &DotQ41Vnni,      &DotQ80Vnni,
                     &DotF32Avx512<1>, &DotF32Avx512<4>, &GemmTileAvx512};
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return Kernels{"avx2", &DotQ41Avx2, &DotQ80Avx2, &DotF32ScalarN<1>, &DotF32ScalarN<4>,
                     nullptr};
    }
    return Kernels{"scalar",          &DotQ41Scalar,     &DotQ80Scalar,
                   &DotF32ScalarN<1>, &DotF32ScalarN<4>, nullptr};
  }();
  return kernels;
}

// Rows per tile: a tile of weights stays in L1 while every activation row passes over it.
constexpr int kRowTile = 16;
// Activation rows from which MatMul switches to the widened-tile GEMM.
constexpr int kGemmMinRows = 8;

}  // namespace

const char* MatMulIsa() { return Selected().isa; }

void MatMul(const QuantMatrix& w, const Acts& x, int col_begin, float* y, int ldy,
            ThreadPool* pool) {
  const Kernels& k = Selected();
  const DotFn dot = w.type == WeightType::kQ4_1 ? k.q41 : k.q80;
  const int nb = w.cols / kBlock;
  const int b0 = col_begin / kBlock;
  const std::int64_t tiles = (w.rows + kRowTile - 1) / kRowTile;
  auto run = [&](std::int64_t tile_begin, std::int64_t tile_end) {
    for (std::int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int r0 = static_cast<int>(tile * kRowTile);
      const int r1 = std::min(w.rows, r0 + kRowTile);
      if (x.format == ActFormat::kQ8) {
        for (int t = 0; t < x.n; ++t) {
          const ActBlock* xa = x.Row(t) + b0;
          float* yt = y + std::size_t(t) * ldy;
          for (int r = r0; r < r1; ++r) {
            yt[r] = dot(w.data + std::size_t(r) * w.row_stride, xa, nb);
          }
        }
        continue;
      }
      for (int t = 0; t < x.n; t += 4) {
        const int nt = std::min(4, x.n - t);
        const float* xs[4];
        const float* ss[4];
        for (int i = 0; i < nt; ++i) {
          xs[i] = x.F32Row(t + i) + col_begin;
          ss[i] = x.Sums(t + i) + b0;
        }
        for (int r = r0; r < r1; ++r) {
          float out[4];
          const std::uint8_t* row = w.data + std::size_t(r) * w.row_stride;
          if (nt == 4) {
            k.f32x4(w.type, row, xs, ss, nb, out);
          } else {
            for (int i = 0; i < nt; ++i) k.f32x1(w.type, row, xs + i, ss + i, nb, out + i);
          }
          for (int i = 0; i < nt; ++i) y[std::size_t(t + i) * ldy + r] = out[i];
        }
      }
    }
  };
  auto gemm = [&](std::int64_t tile_begin, std::int64_t tile_end) {
    thread_local std::vector<float> wt;
    wt.resize(std::size_t(w.cols) * 16);
    for (std::int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int r0 = static_cast<int>(tile * kRowTile);
      const int rows = std::min(w.rows - r0, kRowTile);
      WidenTile(w, r0, rows, wt.data());
      for (int t = 0; t < x.n; t += 8) {
        const int nt = std::min(8, x.n - t);
        const float* xs[8];
        float* ys[8];
        for (int i = 0; i < nt; ++i) {
          xs[i] = x.F32Row(t + i) + col_begin;
          ys[i] = y + std::size_t(t + i) * ldy + r0;
        }
        k.gemm(wt.data(), w.cols, xs, nt, ys, rows);
      }
    }
  };
  // Prefill: widening each weight tile once and sweeping every token over it is compute-bound
  // fp32 work; decode (a few rows) reads the blocks directly.
  const bool use_gemm = x.format == ActFormat::kF32 && x.n >= kGemmMinRows && k.gemm != nullptr;
  const std::function<void(std::int64_t, std::int64_t)> body =
      use_gemm ? std::function<void(std::int64_t, std::int64_t)>(gemm)
               : std::function<void(std::int64_t, std::int64_t)>(run);
  if (pool != nullptr) {
    pool->ParallelFor(tiles, body);
  } else {
    body(0, tiles);
  }
}

void DequantizeRow(const QuantMatrix& w, int r, float* out) {
  const std::uint8_t* row = w.data + std::size_t(r) * w.row_stride;
  for (int b = 0; b < w.cols / kBlock; ++b) {
    const std::uint8_t* blk = row + b * BlockBytes(w.type);
    std::uint16_t dh;
    std::memcpy(&dh, blk, 2);
    const float d = Fp16ToFp32(dh);
    float* o = out + b * kBlock;
    if (w.type == WeightType::kQ4_1) {
      std::uint16_t mh;
      std::memcpy(&mh, blk + 2, 2);
      const float m = Fp16ToFp32(mh);
      for (int j = 0; j < 16; ++j) {
        o[j] = d * float(blk[4 + j] & 0xF) + m;
        o[j + 16] = d * float(blk[4 + j] >> 4) + m;
      }
    } else {
      const auto* q = reinterpret_cast<const std::int8_t*>(blk + 2);
      for (int j = 0; j < kBlock; ++j) o[j] = d * float(q[j]);
    }
  }
}

}  // namespace ctxpar::model
