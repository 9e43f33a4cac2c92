// Weights of the GGUF architectures as the layers take them: quantized matrices in their blocks
// (linear.h) and fp32 norm vectors, checked against the shapes the architecture expects, the
// error naming the tensor.
//
// Thread safety: pure functions over an immutable GgufFile; the results point into its mapping.
#pragma once

#include <cstdint>
#include <string>

#include "ctxpar/gguf.h"
#include "ctxpar/status.h"
#include "models/layers/attention_shard.h"
#include "models/linear.h"

namespace ctxpar::model {

// A [rows, cols] weight (ggml's ne0 = cols, ne1 = rows) of a type the matmuls take with
// activations in `format` (Unimplemented naming the tensor otherwise).
Expected<QuantMatrix> GgufMatrix(const GgufFile& f, const std::string& name, int64_t cols,
                                 int64_t rows, ActFormat format);

// The vocabulary size: token_embd.weight must be [dim, n_vocab] with n_vocab in [1, 2^30]
// (HparamError naming the tensor otherwise).
Expected<int> GgufVocabSize(const GgufFile& f, int dim);

// The rank's rows of one dense block's projections (`prefix` + attn_q, attn_k, attn_v,
// attn_output, ffn_gate, ffn_up, ffn_down), cut as attention_shard.h says: q by the heads the
// rank projects, k and v by its DCP group's KV heads, gate and up by ffn_bounds, o and down (all
// of their columns) by dim_bounds.
struct DenseBlockWeights {
  QuantMatrix wq, wk, wv, wo, gate, up, down;
};
Expected<DenseBlockWeights> GgufDenseBlock(const GgufFile& f, const std::string& prefix,
                                           const HeadLayout& l, const HeadShard& s,
                                           ActFormat format);

// An F32 vector of `dim` elements.
Expected<const float*> GgufVector(const GgufFile& f, const std::string& name, int64_t dim);

}  // namespace ctxpar::model
