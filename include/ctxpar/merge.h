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

}  // namespace ctxpar
