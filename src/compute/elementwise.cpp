#include "compute/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "ctxpar/cpu_features.h"

#if defined(CTXPAR_X86_KERNELS)
#include <immintrin.h>
#endif

namespace ctxpar::compute {
namespace {

void SwiGluScalar(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// GELU's tanh form through the logistic: 0.5 x (1 + tanh(y)) = x / (1 + exp(-2y)), so GeGLU has
// SwiGLU's shape with exp(-2y) for exp(-g). noinline: the vector path calls it for its edge lanes,
// and inlined there the compiler could fuse x + c * x^3 into an fma the vector path does not do.
constexpr float kSqrt2OverPi = 0.7978845608028654f;

__attribute__((noinline)) void GeGluScalar(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    const float x = gate[i];
    const float cube = 0.044715f * x * x * x;
    const float arg = -2.0f * (kSqrt2OverPi * (x + cube));
    out[i] = x / (1.0f + std::exp(arg)) * up[i];
  }
}

#if defined(CTXPAR_X86_KERNELS)
// SwiGluScalar's arithmetic with four exponentials at a time, computed the way glibc's expf does
// on a CPU with FMA (the variant its loader picks there): x / ln 2 = k / 32 + r, 2^(k / 32) from a
// table of 32 doubles, 2^r by a cubic in double, every fma where glibc's build has one, then
// rounded to float. So the result is std::exp's bit for bit (SwiGlu.EqualsTheScalarExpBitForBit
// checks floats across the whole range), and one exp costs a few vector operations instead of a
// call: about 4 % of a one-thread prefill went into expf calls. Lanes outside glibc's fast range
// (|x| >= 88, inf, NaN) take the scalar path.
struct Exp2Table {
  alignas(32) std::int64_t bits[32];  // bits of 2^(i / 32) minus i << 47, as glibc stores them
};

const Exp2Table& Exp2Tab() {
  static const Exp2Table table = [] {
    Exp2Table t;
    for (int i = 0; i < 32; ++i) {
      const double v = std::exp2(i / 32.0);
      std::memcpy(&t.bits[i], &v, sizeof v);
      t.bits[i] -= std::int64_t{i} << 47;
    }
    return t;
  }();
  return table;
}

__attribute__((target("avx2,fma"))) __m128 Exp4(__m128 x, const Exp2Table& tab) {
  const __m256d inv_ln2_32 = _mm256_set1_pd(0x1.71547652b82fep+5);
  const __m256d shift = _mm256_set1_pd(0x1.8p+52);
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d z = _mm256_fmadd_pd(inv_ln2_32, xd, shift);
  const __m256i ki = _mm256_castpd_si256(z);
  const __m256d kd = _mm256_sub_pd(z, shift);
  const __m256d r = _mm256_fmsub_pd(inv_ln2_32, xd, kd);
  const __m256i index = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  const __m256i t = _mm256_add_epi64(
      _mm256_i64gather_epi64(reinterpret_cast<const long long*>(tab.bits), index, 8),
      _mm256_slli_epi64(ki, 47));
  const __m256d c = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.c6af84b912394p-20),
                                    _mm256_set1_pd(0x1.ebfce50fac4f3p-13));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(r, _mm256_set1_pd(0x1.62e42ff0c52d6p-6), _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(c, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

// Exp4's operations on eight lanes (AVX-512: twice the doubles per instruction), so the same bits.
__attribute__((target("avx512f,fma"))) __m256 Exp8(__m256 x, const Exp2Table& tab) {
  const __m512d inv_ln2_32 = _mm512_set1_pd(0x1.71547652b82fep+5);
  const __m512d shift = _mm512_set1_pd(0x1.8p+52);
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d z = _mm512_fmadd_pd(inv_ln2_32, xd, shift);
  const __m512i ki = _mm512_castpd_si512(z);
  const __m512d kd = _mm512_sub_pd(z, shift);
  const __m512d r = _mm512_fmsub_pd(inv_ln2_32, xd, kd);
  const __m512i index = _mm512_and_si512(ki, _mm512_set1_epi64(31));
  const __m512i t =
      _mm512_add_epi64(_mm512_i64gather_epi64(index, tab.bits, 8), _mm512_slli_epi64(ki, 47));
  const __m512d c = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.c6af84b912394p-20),
                                    _mm512_set1_pd(0x1.ebfce50fac4f3p-13));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, _mm512_set1_pd(0x1.62e42ff0c52d6p-6), _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(c, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

// The two activations as x / (1 + exp(a(x))) * up: the exponent's argument a, a vector and a
// scalar form with the same operations.
struct SiluGate {
  __attribute__((target("avx2,fma"))) static __m256 Arg(__m256 g) {
    return _mm256_xor_ps(g, _mm256_set1_ps(-0.0f));
  }
  __attribute__((target("avx512f,fma"))) static __m512 Arg(__m512 g) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(int(0x80000000u))));
  }
  static void Scalar(const float* gate, const float* up, int n, float* out) {
    SwiGluScalar(gate, up, n, out);
  }
};

struct GeluGate {
  __attribute__((target("avx2,fma"))) static __m256 Arg(__m256 g) {
    __m256 cube = _mm256_mul_ps(_mm256_set1_ps(0.044715f), g);
    cube = _mm256_mul_ps(_mm256_mul_ps(cube, g), g);
    return _mm256_mul_ps(_mm256_set1_ps(-2.0f),
                         _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi), _mm256_add_ps(g, cube)));
  }
  __attribute__((target("avx512f,fma"))) static __m512 Arg(__m512 g) {
    __m512 cube = _mm512_mul_ps(_mm512_set1_ps(0.044715f), g);
    cube = _mm512_mul_ps(_mm512_mul_ps(cube, g), g);
    return _mm512_mul_ps(_mm512_set1_ps(-2.0f),
                         _mm512_mul_ps(_mm512_set1_ps(kSqrt2OverPi), _mm512_add_ps(g, cube)));
  }
  static void Scalar(const float* gate, const float* up, int n, float* out) {
    GeGluScalar(gate, up, n, out);
  }
};

// Gate's scalar arithmetic, eight lanes at a time, with Exp4 for std::exp (bit for bit).
template <class Gate>
__attribute__((target("avx2,fma"))) void GatedAvx2(const float* gate, const float* up, int n,
                                                   float* out) {
  const Exp2Table& tab = Exp2Tab();
  const __m256 one = _mm256_set1_ps(1.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 x = Gate::Arg(g);
    // glibc's test: the top 12 bits of |x| at least those of 88.0f.
    const __m256i top =
        _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x42a))) != 0) {
      Gate::Scalar(gate + i, up + i, 8, out + i);
      continue;
    }
    const __m256 e = _mm256_set_m128(Exp4(_mm256_extractf128_ps(x, 1), tab),
                                     Exp4(_mm256_castps256_ps128(x), tab));
    const __m256 act = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(act, _mm256_loadu_ps(up + i)));
  }
  Gate::Scalar(gate + i, up + i, n - i, out + i);
}

// GatedAvx2's arithmetic sixteen lanes at a time with Exp8 (bit for bit); the rest of a row goes
// through GatedAvx2.
template <class Gate>
__attribute__((target("avx512f,fma"))) void GatedAvx512(const float* gate, const float* up, int n,
                                                        float* out) {
  const Exp2Table& tab = Exp2Tab();
  const __m512 one = _mm512_set1_ps(1.0f);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 x = Gate::Arg(g);
    const __m512i top =
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    if (_mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(0x42a)) != 0) {
      Gate::Scalar(gate + i, up + i, 16, out + i);
      continue;
    }
    const __m512 lo = _mm512_castps256_ps512(Exp8(_mm512_castps512_ps256(x), tab));
    const __m256 hi = Exp8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)), tab);
    const __m512 e =
        _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(lo), _mm256_castps_pd(hi), 1));
    const __m512 act = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(act, _mm512_loadu_ps(up + i)));
  }
  GatedAvx2<Gate>(gate + i, up + i, n - i, out + i);
}

// The gated kernel of the path CTXPAR_CPU_ISA allows (read per call: tests lower it).
template <class Gate>
void GatedFor(const float* gate, const float* up, int n, float* out) {
  const Expected<CpuIsa> isa = SelectCpuIsa();
  if (isa.ok() && *isa >= CpuIsa::kAvx512) return GatedAvx512<Gate>(gate, up, n, out);
  if (isa.ok() && *isa >= CpuIsa::kAvx2) return GatedAvx2<Gate>(gate, up, n, out);
  Gate::Scalar(gate, up, n, out);
}
#endif

// The sum of x[i]^2 in double by one fixed sequence: element i into partial sum i % 16, the 16
// sums then added pairwise. One running sum is a chain of dependent adds (4 cycles an element);
// 16 independent ones vectorize. Rounded to float, the mean is the running sum's but in rare ties.
constexpr int kSquareSums = 16;

// The sequence's end, from the partial sums of the whole groups of 16 before element i: the
// elements left, then the sums pairwise.
double FinishSquares(double (&s)[kSquareSums], const float* x, int i, int dim) {
  for (int j = 0; i < dim; ++i, ++j) s[j] += double(x[i]) * double(x[i]);
  for (int width = kSquareSums / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) s[j] += s[j + width];
  }
  return s[0];
}

double SumOfSquaresScalar(const float* x, int dim) {
  double s[kSquareSums] = {};
  int i = 0;
  for (; i + kSquareSums <= dim; i += kSquareSums) {
    for (int j = 0; j < kSquareSums; ++j) s[j] += double(x[i + j]) * double(x[i + j]);
  }
  return FinishSquares(s, x, i, dim);
}

#if defined(CTXPAR_X86_KERNELS)
// SumOfSquaresScalar's sequence, partial sums 4q .. 4q + 3 in register q. A float's square is
// exact in double, so a fused multiply-add rounds as the multiply then the add do.
__attribute__((target("avx2,fma"))) double SumOfSquaresAvx2(const float* x, int dim) {
  __m256d s[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                  _mm256_setzero_pd()};
  int i = 0;
  for (; i + kSquareSums <= dim; i += kSquareSums) {
    for (int q = 0; q < 4; ++q) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * q));
      s[q] = _mm256_add_pd(s[q], _mm256_mul_pd(v, v));
    }
  }
  alignas(32) double sums[kSquareSums];
  for (int q = 0; q < 4; ++q) _mm256_store_pd(sums + 4 * q, s[q]);
  return FinishSquares(sums, x, i, dim);
}
#endif

}  // namespace

double SumOfSquares(const float* x, int dim) {
#if defined(CTXPAR_X86_KERNELS)
  static const bool avx2 = BestCpuIsa(DetectCpuFeatures()) >= CpuIsa::kAvx2;
  if (avx2) return SumOfSquaresAvx2(x, dim);
#endif
  return SumOfSquaresScalar(x, dim);
}

void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* y) {
  for (int t = 0; t < n; ++t) {
    const float* xt = x + static_cast<long>(t) * dim;
    float* yt = y + static_cast<long>(t) * dim;
    const double sum = SumOfSquares(xt, dim);
    const float scale = 1.0f / std::sqrt(float(sum / dim) + eps);
    for (int i = 0; i < dim; ++i) yt[i] = xt[i] * scale * weight[i];
  }
}

RopeAngles RopeAngles::Ggml(int rope_dims, float base) {
  RopeAngles a;
  a.rope_dims_ = rope_dims;
  a.theta_scale_ = std::pow(base, -2.0f / float(rope_dims));
  return a;
}

RopeAngles RopeAngles::Ggml(int rope_dims, float base, RopeScaling scaling) {
  RopeAngles a = Ggml(rope_dims, base);
  a.theta_scale_exact_ = std::pow(double(base), -2.0 / rope_dims);
  a.scaled_ = !scaling.freq_factors.empty() || scaling.freq_scale != 1.0f ||
              scaling.attn_factor != 1.0f || scaling.ext_factor != 0.0f;
  if (scaling.ext_factor != 0.0f) {
    // ggml_rope_yarn_corr_dims: the dims whose wavelength fits orig_ctx beta times.
    auto corr_dim = [&](float beta) {
      return float(rope_dims) * std::log(float(scaling.orig_ctx) / (beta * 2.0f * float(M_PI))) /
             (2.0f * std::log(base));
    };
    const float low = corr_dim(scaling.beta_fast), high = corr_dim(scaling.beta_slow);
    a.corr_dims_[0] = std::max(0.0f, scaling.truncate ? std::floor(low) : low);
    a.corr_dims_[1] = std::min(float(rope_dims - 1), scaling.truncate ? std::ceil(high) : high);
  }
  a.scaling_ = std::move(scaling);
  return a;
}

RopeAngles RopeAngles::HfTable(int rope_dims, float base, DataType dtype) {
  RopeAngles a;
  a.rope_dims_ = rope_dims;
  for (int i = 0; i < rope_dims / 2; ++i) {
    float f = 1.0f / std::pow(base, float(2 * i) / float(rope_dims));
    if (dtype == DataType::kBF16) f = Bf16ToFloat(FloatToBf16(f));
    if (dtype == DataType::kF16) f = Fp16ToFp32(Fp32ToFp16(f));
    a.inv_freq_.push_back(f);
  }
  return a;
}

RopeAngles RopeAngles::HfTable(int rope_dims, float base, DataType dtype, const HfYarn& yarn) {
  // find_correction_range in Python's double, the rest in torch's float32, in its order.
  const double pi = 3.141592653589793;
  auto correction_dim = [&](double rotations) {
    return rope_dims * std::log(yarn.original_context / (rotations * 2 * pi)) /
           (2 * std::log(double(base)));
  };
  double low = correction_dim(yarn.beta_fast), high = correction_dim(yarn.beta_slow);
  if (yarn.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, rope_dims - 1.0);
  if (low == high) high += 0.001;
  RopeAngles a = HfTable(rope_dims, base, DataType::kF32);
  const float factor = static_cast<float>(yarn.factor);
  for (int i = 0; i < rope_dims / 2; ++i) {
    const float pos_freq = std::pow(base, float(2 * i) / float(rope_dims));
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    float f = 1.0f / (factor * pos_freq) * (1.0f - extrapolation) + 1.0f / pos_freq * extrapolation;
    if (dtype == DataType::kBF16) f = Bf16ToFloat(FloatToBf16(f));
    if (dtype == DataType::kF16) f = Fp16ToFp32(Fp32ToFp16(f));
    a.inv_freq_[i] = f;
  }
  a.hf_scale_ = static_cast<float>(yarn.attention_factor);
  return a;
}

void RopeAngles::CosSin(int64_t pos, float* cos_sin) const {
  const int half = rope_dims_ / 2;
  if (!inv_freq_.empty()) {
    for (int i = 0; i < half; ++i) {
      const float angle = inv_freq_[i] * float(pos);
      cos_sin[2 * i] = std::cos(angle) * hf_scale_;
      cos_sin[2 * i + 1] = std::sin(angle) * hf_scale_;
    }
    return;
  }
  if (scaled_) {
    // In double: past a few hundred positions ggml's float recurrence and transformers' float
    // table each sit about 3e-5 rad from the exact angle, which the scaled magnitudes amplify.
    const RopeScaling& s = scaling_;
    double theta = double(pos);
    for (int i = 0; i < half; ++i) {
      const double extrap = s.freq_factors.empty() ? theta : theta / s.freq_factors[i];
      double angle = s.freq_scale * extrap;
      float mscale = s.attn_factor;
      if (s.ext_factor != 0.0f) {
        const double y =
            (double(i) - corr_dims_[0]) / std::max(0.001, double(corr_dims_[1]) - corr_dims_[0]);
        const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * s.ext_factor;
        angle = angle * (1.0 - mix) + extrap * mix;
        mscale *= YarnMscale(1.0f / s.freq_scale, 1.0f);
      }
      cos_sin[2 * i] = static_cast<float>(std::cos(angle)) * mscale;
      cos_sin[2 * i + 1] = static_cast<float>(std::sin(angle)) * mscale;
      theta *= theta_scale_exact_;
    }
    return;
  }
  float theta = float(pos);
  for (int i = 0; i < half; ++i) {
    cos_sin[2 * i] = std::cos(theta);
    cos_sin[2 * i + 1] = std::sin(theta);
    theta *= theta_scale_;
  }
}

void Rope(RopeStyle style, float* x, int num_heads, int head_stride, const RopeAngles& angles,
          int64_t pos) {
  float cos_sin[RopeAngles::kMaxDims];
  angles.CosSin(pos, cos_sin);
  Rope(style, x, num_heads, head_stride, cos_sin, angles.rope_dims());
}

void Rope(RopeStyle style, float* x, int num_heads, int head_stride, const float* cos_sin,
          int rope_dims) {
  const int half = rope_dims / 2;
  // Pair i is (v[i * step], v[i * step + other]).
  const int step = style == RopeStyle::kNormal ? 2 : 1;
  const int other = style == RopeStyle::kNormal ? 1 : half;
  for (int h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<long>(h) * head_stride;
    for (int i = 0; i < half; ++i) {
      const float c = cos_sin[2 * i];
      const float s = cos_sin[2 * i + 1];
      const float x0 = v[i * step];
      const float x1 = v[i * step + other];
      v[i * step] = x0 * c - x1 * s;
      v[i * step + other] = x0 * s + x1 * c;
    }
  }
}

void SwiGlu(const float* gate, const float* up, int n, float* out) {
#if defined(CTXPAR_X86_KERNELS)
  return GatedFor<SiluGate>(gate, up, n, out);
#endif
  SwiGluScalar(gate, up, n, out);
}

void GeGlu(const float* gate, const float* up, int n, float* out) {
#if defined(CTXPAR_X86_KERNELS)
  return GatedFor<GeluGate>(gate, up, n, out);
#endif
  GeGluScalar(gate, up, n, out);
}

void SwiGluOai(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kSwiGluOaiLimit);
    const float u = std::clamp(up[i], -kSwiGluOaiLimit, kSwiGluOaiLimit);
    out[i] = g / (1.0f + std::exp(-kSwiGluOaiAlpha * g)) * (u + 1.0f);
  }
}

void Gated(GatedActivation act, const float* gate, const float* up, int n, float* out) {
  switch (act) {
    case GatedActivation::kSwiGlu:
      return SwiGlu(gate, up, n, out);
    case GatedActivation::kGeGlu:
      return GeGlu(gate, up, n, out);
    case GatedActivation::kSwiGluOai:
      return SwiGluOai(gate, up, n, out);
  }
}

void Softcap(float* x, std::size_t n, float cap) {
  for (std::size_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

}  // namespace ctxpar::compute
