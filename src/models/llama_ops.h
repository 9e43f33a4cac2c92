// The elementwise pieces of the Llama block, written to follow llama.cpp's CPU numerics.
//
// Shapes are row-major fp32: x [n, dim]. Thread safety: pure functions.
#pragma once

namespace ctxpar::model {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight; the mean is accumulated in double as ggml does.
// y may alias x.
void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* y);

// RoPE in ggml's "normal" mode (the one llama.cpp uses for the llama architecture, whose Q/K
// weights the GGUF converter permuted to match): within each head the pairs (2i, 2i+1) of the
// first rope_dims dims rotate by pos * base^(-2i/rope_dims). x is [num_heads, head_dim] of one
// token, rotated in place.
void RopeNormal(float* x, int num_heads, int head_dim, int rope_dims, float base, int pos);

// out[i] = silu(gate[i]) * up[i] for i < n.
void SwiGlu(const float* gate, const float* up, int n, float* out);

}  // namespace ctxpar::model
