// Weights of the GGUF architectures as the layers take them: quantized matrices in their blocks
// (linear.h) and fp32 norm vectors, checked against the shapes the architecture expects, the
// error naming the tensor.
//
// Thread safety: pure functions over an immutable GgufFile; the results point into its mapping.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "ctxpar/gguf.h"
#include "ctxpar/status.h"
#include "models/layers/attention_shard.h"
#include "models/layers/compute_types.h"

namespace ctxpar::model {

// CTXPAR-MODEL-011: the file's tensor `tensor` cannot be taken; `problem` says why, as the clause
// after "which" ("has shape ...").
Status TensorError(const GgufFile& f, std::string_view tensor, const std::string& problem);

// What a source checks when it opens the file, before any compute (so that `ctxpar check` refuses
// what generate would): every tensor is one of `globals` or blk.<l>.<one of per_layer> with
// l < num_layers, every matrix has a type a matmul kernel takes, every vector is F32, and no
// weight of a float type or scale of a quantized block is NaN or infinite (CTXPAR-MODEL-011
// naming the first tensor at fault; the scan reads the file once). Shapes are the loaders'
// (GgufMatrix, GgufVector), which name the tensor the same way.
Status CheckGgufTensors(const GgufFile& f, std::string_view architecture, int num_layers,
                        std::span<const std::string_view> globals,
                        std::span<const std::string_view> per_layer);

// CTXPAR-MODEL-011 for the first key under `prefix` ("llama.") whose rest is not in `read`:
// every key of the architecture is one its model reads (general.* and tokenizer.* are not under
// the prefix: the file's description and the tokenizer's).
Status CheckGgufKeys(const GgufFile& f, std::string_view architecture, const std::string& prefix,
                     std::span<const std::string_view> read);

// Whether every matrix of the file is Q4_1 or Q8_0, the types whose kernels take int8
// activations (linear.h).
bool Int8Weights(const GgufFile& f);
// CTXPAR-MODEL-005 for --llama-cpp-numerics (int8 activations) on a file with other weights:
// refused when the configuration resolves rather than when the first tensor loads.
Status CheckInt8Activations(bool llama_cpp_numerics, bool int8_weights,
                            std::string_view architecture);

// A [rows, cols] weight (ggml's ne0 = cols, ne1 = rows) of a type the matmuls take with
// activations in `format` (CTXPAR-MODEL-011 naming the tensor otherwise; Unimplemented for int8
// activations the type does not take).
Expected<QuantMatrix> GgufMatrix(const GgufFile& f, const std::string& name, int64_t cols,
                                 int64_t rows, ActFormat format);

// The vocabulary size: token_embd.weight must be [dim, n_vocab] with n_vocab in [1, 2^30], and
// <arch>.vocab_size, where present, n_vocab (HparamError naming the tensor or key otherwise).
Expected<int> GgufVocabSize(const GgufFile& f, int dim);

// The rank's rows of one dense block's projections (`prefix` + attn_q, attn_k, attn_v,
// attn_output, ffn_gate, ffn_up, ffn_down), cut as attention_shard.h says: q by the heads the
// rank projects, k and v by its DCP group's KV heads, gate and up by ffn_bounds, o and down (all
// of their columns) by dim_bounds. fused: q, k, v are the row ranges of attn_qkv, gate and up
// those of ffn_up (gate first), as Phi-3's converter writes them.
struct DenseBlockWeights {
  QuantMatrix wq{}, wk{}, wv{}, wo{}, gate{}, up{}, down{};
};
Expected<DenseBlockWeights> GgufDenseBlock(const GgufFile& f, const std::string& prefix,
                                           const HeadLayout& l, const HeadShard& s,
                                           ActFormat format, bool fused = false,
                                           bool with_mlp = true);

// The experts of a MoE layer, [cols, rows, experts] (ggml's ne0, ne1, ne2): one matrix of
// experts * rows rows, expert e's being rows [e * rows, (e + 1) * rows) (QuantMatrix::RowRange).
// Its type is checked as GgufMatrix checks it; CheckActFormat is the caller's.
Expected<QuantMatrix> GgufExperts(const GgufFile& f, const std::string& name, int64_t cols,
                                  int64_t rows, int64_t experts);

// An F32 vector of `dim` elements.
Expected<const float*> GgufVector(const GgufFile& f, const std::string& name, int64_t dim);

// A layer's 1-D weights (norms, biases) by GgufVector: the tensor prefix + name, `dim` values,
// into *out.
struct VectorSlot {
  const float** out;
  const char* name;
  int64_t dim;
};
Status GgufVectors(const GgufFile& f, const std::string& prefix,
                   std::initializer_list<VectorSlot> slots);

}  // namespace ctxpar::model
