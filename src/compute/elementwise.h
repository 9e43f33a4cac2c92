// The elementwise blocks every architecture shares (norms, RoPE, gated activations), written to
// follow llama.cpp's CPU numerics (and HF transformers' where a model's reference is HF).
//
// Shapes are row-major fp32: x [n, dim]. Thread safety: pure functions; a RopeAngles does not
// change once built, so one serves every thread.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxpar/dtype.h"

namespace ctxpar::compute {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight; the mean is accumulated in double as ggml does,
// by one fixed sequence on every ISA: element i into partial sum i % 16, then the sums pairwise.
// y may alias x. Per-head norms (Gemma 3's q/k norms) are the same over [n * heads, head_dim].
// Gemma's (1 + w) scaling needs no variant: llama.cpp's converter stores 1 + w in the GGUF.
void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* y);
// sum(x[i]^2) over [0, dim) in double, by RmsNorm's sequence.
double SumOfSquares(const float* x, int dim);

// RoPE in two pieces: the angles (RopeAngles, built once at model load) and one rotation
// (Rope) for both pair conventions. Pair i of the first rope_dims dims of a head rotates by
// angle_i(pos), nominally pos * base^(-2i/rope_dims); the two angle conventions differ in their
// float rounding, and each model takes its reference's:
// - Ggml: theta_0 = pos, theta_{i+1} = theta_i * base^(-2/rope_dims), in float, as llama.cpp's
//   CPU backend builds them (Llama, Gemma 3): Q/K stay within an ulp of llama.cpp's.
// - HfTable: HF transformers' default RoPE (DeepSeek-V3): inv_freq[i] = 1 / base^(2i/rope_dims)
//   in float, rounded to `dtype` as transformers' inv_freq buffer is when the model runs in its
//   checkpoint's bf16 or f16 (kF32 keeps it), and angle_i = inv_freq[i] * pos in float.
// Both give cos and sin in float through std::cos and std::sin. Ggml also takes llama.cpp's RoPE
// scaling (RopeScaling), whose angles it computes in double and rounds once (the float
// recurrence drifts about 3e-5 rad by position 700, which the scaled magnitudes amplify past
// transformers' goldens; docs/model.md); cos and sin then times the magnitude in float. HfTable
// also takes transformers' YaRN (HfYarn), in its float32 order.
//
// RopeScaling, as ggml's rope_yarn applies it: theta_extrap = theta_i / freq_factors[i] (Llama 3's
// rope_freqs.weight, Phi-3's LongRoPE tables), theta_interp = freq_scale * theta_extrap
// (freq_scale: 1 / the linear or YaRN factor); with ext_factor (YaRN) the angle mixes them,
// theta = theta_interp * (1 - m) + theta_extrap * m with m = ramp(i) * ext_factor, ramp 1 below
// the correction dims and 0 above them (ggml_rope_yarn_corr_dims of orig_ctx, beta_fast and
// beta_slow), and cos and sin scale by attn_factor * (1 + 0.1 ln(1 / freq_scale)); without it by
// attn_factor (LongRoPE's magnitude scaling).
struct RopeScaling {
  std::vector<float> freq_factors;  // empty, or rope_dims / 2 positive values
  float freq_scale = 1.0f;
  float attn_factor = 1.0f;
  float ext_factor = 0.0f;  // YaRN: 1
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int orig_ctx = 0;  // YaRN: the context the model was trained at
  // YaRN: the correction dims rounded out to whole dims (ggml's floor and ceil, transformers'
  // default), or kept exact (transformers' "truncate": false, gpt-oss's configs).
  bool truncate = true;
};

// transformers' YaRN (_compute_yarn_parameters) for RopeAngles::HfTable: the frequencies mix
// theta_i / factor and theta_i by a ramp between the correction dims of beta_fast and beta_slow
// over original_context positions (floored and ceiled with truncate), and cos and sin are
// multiplied by attention_factor.
struct HfYarn {
  double factor = 1.0;
  int original_context = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 1.0;
};

// YaRN's magnitude mscale(factor, m) = 0.1 m ln(factor) + 1, 1 at factor <= 1, in T: float as
// llama.cpp computes it, double as transformers (Python) does.
template <class T>
T YarnMscale(T factor, T m) {
  return factor <= T(1) ? T(1) : T(0.1) * m * std::log(factor) + T(1);
}

class RopeAngles {
 public:
  static constexpr int kMaxDims = 1024;

  // rope_dims 0: Rope leaves x as it is.
  RopeAngles() = default;
  // Both: rope_dims even, in [2, kMaxDims]; base > 0 (the loaders validate both). HfTable's
  // dtype is kF32, kBF16 or kF16.
  static RopeAngles Ggml(int rope_dims, float base);
  // scaling: freq_scale and attn_factor > 0; with ext_factor != 0, orig_ctx >= 1 and betas > 0.
  static RopeAngles Ggml(int rope_dims, float base, RopeScaling scaling);
  static RopeAngles HfTable(int rope_dims, float base, DataType dtype);
  // With YaRN: factor >= 1, original_context >= 1, betas > 0, attention_factor > 0.
  static RopeAngles HfTable(int rope_dims, float base, DataType dtype, const HfYarn& yarn);

  int rope_dims() const { return rope_dims_; }
  // cos_sin[2i] = cos(angle_i(pos)), cos_sin[2i + 1] = sin(angle_i(pos)) for i < rope_dims / 2.
  void CosSin(int64_t pos, float* cos_sin) const;

 private:
  int rope_dims_ = 0;
  float theta_scale_ = 0.0f;           // Ggml
  double theta_scale_exact_ = 0.0;     // Ggml with scaling: the angles in double
  RopeScaling scaling_;                // Ggml
  bool scaled_ = false;                // Ggml: scaling_ is not the identity
  float corr_dims_[2] = {0.0f, 0.0f};  // Ggml with ext_factor
  std::vector<float> inv_freq_;        // HfTable (empty for Ggml)
  float hf_scale_ = 1.0f;              // HfTable: YaRN's attention_factor
};

// The two pairings of the rotation (ggml's modes; HF's rope_interleave and rotate_half):
// - kNormal pairs dims (2i, 2i+1): llama.cpp's mode for the llama architecture, whose Q/K
//   weights the GGUF converter permuted to match, and DeepSeek-V3's rope_interleave (HF
//   de-interleaves q_pe and k_pe, then rotates halves: these values in another order, the
//   same dot products).
// - kNeox pairs dims (i, i + rope_dims/2): HF's rotate_half, unpermuted weights (Gemma).
enum class RopeStyle { kNormal, kNeox };

// Rotates in place the first angles.rope_dims() dims of each of num_heads heads of one token,
// head h at x + h * head_stride (head_stride >= rope_dims): (x0, x1) of pair i becomes
// (x0 cos - x1 sin, x0 sin + x1 cos). Computes the angles of pos once for all heads, on the
// stack: no allocation.
void Rope(RopeStyle style, float* x, int num_heads, int head_stride, const RopeAngles& angles,
          int64_t pos);
// The same rotation by angles computed already (RopeAngles::CosSin of the token's position), so
// that a token's query and key heads share one computation of them.
void Rope(RopeStyle style, float* x, int num_heads, int head_stride, const float* cos_sin,
          int rope_dims);

// out[i] = silu(gate[i]) * up[i] for i < n.
void SwiGlu(const float* gate, const float* up, int n, float* out);

// out[i] = gelu(gate[i]) * up[i] for i < n, GELU in its tanh approximation
// (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), HF's gelu_pytorch_tanh, as Gemma uses),
// computed as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) with std::exp's bits on every path.
void GeGlu(const float* gate, const float* up, int n, float* out);

// gpt-oss's clamped SwiGLU with its constants (HF GptOssExperts._apply_gate, ggml's swiglu_oai
// with alpha 1.702 and limit 7, which neither the GGUF nor llama.cpp makes a parameter):
// g = min(gate[i], 7), u = clamp(up[i], -7, 7), out[i] = g / (1 + exp(-1.702 g)) * (u + 1).
inline constexpr float kSwiGluOaiAlpha = 1.702f;
inline constexpr float kSwiGluOaiLimit = 7.0f;
void SwiGluOai(const float* gate, const float* up, int n, float* out);

// The activations of the gated feed-forwards (gated_mlp.h, routed_moe.h).
enum class GatedActivation { kSwiGlu, kGeGlu, kSwiGluOai };
// out[i] = act(gate[i], up[i]) for i < n: SwiGlu, GeGlu or SwiGluOai above.
void Gated(GatedActivation act, const float* gate, const float* up, int n, float* out);

// x[i] = cap * tanh(x[i] / cap) for i < n, in float in that order, as HF transformers computes
// Gemma 2's final logit softcapping; cap > 0.
void Softcap(float* x, std::size_t n, float cap);

}  // namespace ctxpar::compute
