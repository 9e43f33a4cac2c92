#include "models/llama_ops.h"

#include <cmath>

namespace ctxpar::model {

void RmsNorm(const float* x, const float* weight, int n, int dim, float eps, float* y) {
  for (int t = 0; t < n; ++t) {
    const float* xt = x + static_cast<long>(t) * dim;
    float* yt = y + static_cast<long>(t) * dim;
    double sum = 0.0;
    for (int i = 0; i < dim; ++i) sum += double(xt[i]) * double(xt[i]);
    const float scale = 1.0f / std::sqrt(float(sum / dim) + eps);
    for (int i = 0; i < dim; ++i) yt[i] = xt[i] * scale * weight[i];
  }
}

void RopeNormal(float* x, int num_heads, int head_dim, int rope_dims, float base, int pos) {
  // ggml builds the angles by repeated multiplication in float; doing the same keeps the rotated
  // Q/K within an ulp of llama.cpp's.
  const float theta_scale = std::pow(base, -2.0f / float(rope_dims));
  float cos_sin[2 * 256];
  float theta = float(pos);
  for (int i = 0; i < rope_dims / 2; ++i) {
    cos_sin[2 * i] = std::cos(theta);
    cos_sin[2 * i + 1] = std::sin(theta);
    theta *= theta_scale;
  }
  for (int h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<long>(h) * head_dim;
    for (int i = 0; i < rope_dims / 2; ++i) {
      const float c = cos_sin[2 * i];
      const float s = cos_sin[2 * i + 1];
      const float x0 = v[2 * i];
      const float x1 = v[2 * i + 1];
      v[2 * i] = x0 * c - x1 * s;
      v[2 * i + 1] = x0 * s + x1 * c;
    }
  }
}

void SwiGlu(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace ctxpar::model
