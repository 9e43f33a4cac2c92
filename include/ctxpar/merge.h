// The merge of partial attention states: the one implementation that every combine backend, the
// CPU path and the CUDA kernels use (host and device).
//
// A partial state of one (row, head) is (O_r, lse_r): the attention output over a subset of the
// keys and the NATURAL-log sum of exp(score) over that subset; a subset with no key is
// (0, -inf). Merging n states:
//   lse_r := -inf where lse_r is NaN or +inf (a poisoned or overflowed partial gets no weight)
//   m = max_r lse_r, or 0 when every lse_r is -inf
//   w_r = exp(lse_r - m),  S = sum_r w_r
//   O = sum_r (w_r / S) O_r  (0 when S == 0),  lse = m + log(S)  (-inf when S == 0)
// Thread safety: pure functions.
#pragma once

#include <cmath>
#include <limits>

#if defined(__CUDACC__)
#define CTXPAR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CTXPAR_HOST_DEVICE inline
#endif

namespace ctxpar {

CTXPAR_HOST_DEVICE float SanitizeLse(float lse) {
  return (lse != lse || lse == INFINITY) ? -INFINITY : lse;
}

// Writes the normalized merge weights scale[r] = w_r / S (all 0 when S == 0) and returns the
// merged lse. lse[r * lse_stride] is the r-th partial lse. n >= 1.
CTXPAR_HOST_DEVICE float MergeScales(const float* lse, int n, int lse_stride, float* scale) {
  float m = -INFINITY;
  for (int r = 0; r < n; ++r) m = fmaxf(m, SanitizeLse(lse[r * lse_stride]));
  if (m == -INFINITY) {
    for (int r = 0; r < n; ++r) scale[r] = 0.0f;
    return -INFINITY;
  }
  float sum = 0.0f;
  for (int r = 0; r < n; ++r) {
    scale[r] = expf(SanitizeLse(lse[r * lse_stride]) - m);
    sum += scale[r];
  }
  const float inv = 1.0f / sum;
  for (int r = 0; r < n; ++r) scale[r] *= inv;
  return m + logf(sum);
}

// The scale that turns one partial O into its share of the merged O, given the merged lse:
// exp(lse_r - lse_merged), 0 when either is -inf. Used by ag_rs, where each rank scales its own
// O before a sum reduce-scatter.
CTXPAR_HOST_DEVICE float ShareScale(float lse_r, float lse_merged) {
  lse_r = SanitizeLse(lse_r);
  if (lse_r == -INFINITY || lse_merged == -INFINITY) return 0.0f;
  return expf(lse_r - lse_merged);
}

// The exact merge (DcpOptions::exact, docs/dcp.md): a sum whose bits do not depend on how the
// states are grouped or ordered, so that the merged O and lse are the same on every layout.
// States are those of fixed chunks of keys (attention.h's ChunkStates). With m the largest lse
// of a (row, head)'s chunks and e the largest |O_c[d]| (both maxima over every rank: exact in any
// order), each chunk adds to fixed-point sums held in doubles
//   W += rint(w_c 2^kExactShift),  O[d] += rint(w_c O_c[d] 2^s),  w_c = expf(lse_c - m)
// with s = ExactOShift(e): every term is an integer below 2^kExactShift in magnitude, so up to
// 2^(52 - kExactShift) chunks (2^14 of 256 keys: 4M keys) sum exactly in a double, in any order and
// across ranks (a float64 all-reduce). Then O[d] = (O[d] 2^-s) / (W 2^-kExactShift) and lse = m +
// log(W 2^-kExactShift), in double, rounded once. The truncated terms are below 2^-38 of the
// largest, far under fp32's rounding of the chunks themselves.
inline constexpr int kExactShift = 38;
inline constexpr int kExactMaxChunks = 1 << (52 - kExactShift);

inline int ExactOShift(float e) {
  return e > 0.0f && e <= 3.0e38f ? kExactShift - (std::ilogb(e) + 1) : 0;
}

// 2^k as a double, for |k| < 1022: ldexp(1.0, k) without the library call (the merge's scalings
// are by such powers, which multiply exactly).
inline double Pow2(int k) {
  const auto bits = static_cast<unsigned long long>(k + 1023) << 52;
  double out;
  __builtin_memcpy(&out, &bits, sizeof(out));
  return out;
}

// x rounded to the nearest integer (ties to even), |x| < 2^51: the FPU's rounding of the sum with
// 1.5 * 2^52, whose unit is 1 (plain adds, which vectorize; nearbyint does not).
inline double RoundToInteger(double x) {
  constexpr double kMagic = 6755399441055744.0;
  return (x + kMagic) - kMagic;
}

// Adds chunk state (o[0..dv), lse) to sums[0..dv) (O) and sums[dv] (W) for reference (m, e).
inline void ExactAdd(const float* __restrict o, float lse, int dv, float m, float e,
                     double* __restrict sums) {
  lse = SanitizeLse(lse);
  if (lse == -INFINITY || m == -INFINITY) return;
  const float w = expf(lse - m);
  const double o_unit = Pow2(ExactOShift(e));
  sums[dv] += RoundToInteger(static_cast<double>(w) * Pow2(kExactShift));
  for (int d = 0; d < dv; ++d) sums[d] += RoundToInteger(static_cast<double>(w * o[d]) * o_unit);
}

// The merged O[0..dv) and lse from the sums (all ranks' added) and the reference.
inline float ExactFinish(const double* sums, int dv, float m, float e, float* o) {
  const double w = sums[dv] * Pow2(-kExactShift);
  if (!(w > 0.0)) {
    for (int d = 0; d < dv; ++d) o[d] = 0.0f;
    return -INFINITY;
  }
  const double o_unit = Pow2(-ExactOShift(e));
  for (int d = 0; d < dv; ++d) o[d] = static_cast<float>(sums[d] * o_unit / w);
  return static_cast<float>(static_cast<double>(m) + std::log(w));
}

}  // namespace ctxpar
