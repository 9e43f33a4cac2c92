// The elementwise blocks every architecture shares (norms, RoPE, gated activations), written to
// follow llama.cpp's CPU numerics.
//
// Shapes are row-major fp32: x [n, dim]. Thread safety: pure functions.
#pragma once

namespace ctxpar::model {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight; the mean is accumulated in double as ggml does.
// y may alias x. Per-head norms (Gemma 3's q/k norms) are the same over [n * heads, head_dim].
// Gemma's (1 + w) scaling needs no variant: llama.cpp's converter stores 1 + w in the GGUF.
void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* y);

// The two rotation conventions of ggml (and of HF): within each head, pair i of the first
// rope_dims dims rotates by pos * base^(-2i/rope_dims).
// - kNormal pairs dims (2i, 2i+1): llama.cpp's mode for the llama architecture, whose Q/K
//   weights the GGUF converter permuted to match.
// - kNeox pairs dims (i, i + rope_dims/2): HF's rotate_half, unpermuted weights (Gemma).
enum class RopeStyle { kNormal, kNeox };

// x is [num_heads, head_dim] of one token, rotated in place; rope_dims <= 512.
void Rope(RopeStyle style, float* x, int num_heads, int head_dim, int rope_dims, float base,
          int pos);

// out[i] = silu(gate[i]) * up[i] for i < n.
void SwiGlu(const float* gate, const float* up, int n, float* out);

// out[i] = gelu(gate[i]) * up[i] for i < n, GELU in its tanh approximation
// (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), HF's gelu_pytorch_tanh, as Gemma uses),
// computed as x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))) with std::exp's bits on every path.
void GeGlu(const float* gate, const float* up, int n, float* out);

}  // namespace ctxpar::model
