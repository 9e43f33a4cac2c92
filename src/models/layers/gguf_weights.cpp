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
