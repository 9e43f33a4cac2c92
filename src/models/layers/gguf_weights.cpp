#include "models/layers/gguf_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ctxpar/gguf_hparams.h"

namespace ctxpar::model {

Expected<int> GgufVocabSize(const GgufFile& f, int dim) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* embd, f.FindTensor("token_embd.weight"));
  if (embd->shape.size() != 2 || embd->shape[0] != dim || embd->shape[1] < 1 ||
      embd->shape[1] > (1 << 30)) {
    return HparamError(f, "the shape of tensor token_embd.weight",
                       fmt::format("[{}]", fmt::join(embd->shape, ", ")),
                       fmt::format("it must be [{}, n_vocab] with n_vocab in [1, 2^30]", dim));
  }
  return static_cast<int>(embd->shape[1]);
}

Expected<DenseBlockWeights> GgufDenseBlock(const GgufFile& f, const std::string& prefix,
                                           const HeadLayout& l, const HeadShard& s,
                                           ActFormat format) {
  const int hd = l.head_dim;
  const int q_width = l.num_heads * hd, kv_width = l.num_kv_heads * hd;
  const int ffn_first = s.ffn_bounds[s.tp_rank];
  const int ffn_count = s.ffn_bounds[s.tp_rank + 1] - ffn_first;
  const int dim_first = s.dim_bounds[s.tp_rank];
  const int dim_count = s.dim_bounds[s.tp_rank + 1] - dim_first;
  const std::string& b = prefix;
  CTXPAR_ASSIGN_OR_RETURN(auto wq, GgufMatrix(f, b + "attn_q.weight", l.dim, q_width, format));
  CTXPAR_ASSIGN_OR_RETURN(auto wk, GgufMatrix(f, b + "attn_k.weight", l.dim, kv_width, format));
  CTXPAR_ASSIGN_OR_RETURN(auto wv, GgufMatrix(f, b + "attn_v.weight", l.dim, kv_width, format));
  CTXPAR_ASSIGN_OR_RETURN(auto wo, GgufMatrix(f, b + "attn_output.weight", q_width, l.dim, format));
  CTXPAR_ASSIGN_OR_RETURN(auto gate,
                          GgufMatrix(f, b + "ffn_gate.weight", l.dim, l.ffn_dim, format));
  CTXPAR_ASSIGN_OR_RETURN(auto up, GgufMatrix(f, b + "ffn_up.weight", l.dim, l.ffn_dim, format));
  CTXPAR_ASSIGN_OR_RETURN(auto down,
                          GgufMatrix(f, b + "ffn_down.weight", l.ffn_dim, l.dim, format));
  auto rows = [&](const QuantMatrix& m, int first, int count) {
    return WithInt8Pack(m.RowRange(first, count), format);
  };
  return DenseBlockWeights{.wq = rows(wq, s.q_first * hd, s.q_heads * hd),
                           .wk = rows(wk, s.kv_first * hd, s.kv_heads * hd),
                           .wv = rows(wv, s.kv_first * hd, s.kv_heads * hd),
                           .wo = rows(wo, dim_first, dim_count),
                           .gate = rows(gate, ffn_first, ffn_count),
                           .up = rows(up, ffn_first, ffn_count),
                           .down = rows(down, dim_first, dim_count)};
}

Expected<QuantMatrix> GgufMatrix(const GgufFile& f, const std::string& name, int64_t cols,
                                 int64_t rows, ActFormat format) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f.FindTensor(name));
  if (t->shape.size() != 2 || t->shape[0] != cols || t->shape[1] != rows) {
    return InvalidArgument(
        fmt::format("tensor {} must have shape [{}, {}] (ne0, ne1)", name, cols, rows));
  }
  QuantMatrix m;
  Expected<WeightType> type = WeightTypeFor(t->type);
  if (!type.ok()) {
    return Unimplemented(fmt::format("tensor {}: {}", name, type.status().message()));
  }
  m.type = *type;
  const Status format_ok = CheckActFormat(format, m.type);
  if (!format_ok.ok()) {
    return Status(format_ok.code(), fmt::format("tensor {}: {}", name, format_ok.message()));
  }
  m.data = t->data;
  m.rows = static_cast<int>(rows);
  m.cols = static_cast<int>(cols);
  m.row_stride = t->row_bytes();
  return m;
}

Expected<const float*> GgufVector(const GgufFile& f, const std::string& name, int64_t dim) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f.FindTensor(name));
  if (t->type != GgmlType::kF32 || t->num_elements() != dim) {
    return InvalidArgument(fmt::format("tensor {} must be F32 with {} elements", name, dim));
  }
  return reinterpret_cast<const float*>(t->data);
}

}  // namespace ctxpar::model
