// GGUF tensor infos: sizes, lookup and dequantization of whole tensors or row ranges.
#include <fmt/format.h>

#include "ctxpar/error_catalog.h"
#include "ctxpar/gguf.h"

namespace ctxpar {

int64_t GgufTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t GgufTensor::row_length() const { return shape.empty() ? 1 : shape[0]; }

int64_t GgufTensor::num_rows() const {
  const int64_t len = row_length();
  return len == 0 ? 0 : num_elements() / len;
}

size_t GgufTensor::row_bytes() const {
  const auto& t = GetGgmlTypeTraits(type);
  return static_cast<size_t>(row_length() / t.block_size * t.type_size);
}

Expected<const GgufTensor*> GgufFile::FindTensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  if (it == tensor_index_.end()) {
    return CatalogError("CTXPAR-GGUF-007",
                        {{"file", PyRepr(path())}, {"tensor", std::string(name)}});
  }
  return &tensors_[it->second];
}

Status DequantizeRows(const GgufTensor& tensor, int64_t first_row, int64_t num_rows, float* dst) {
  const int64_t rows = tensor.num_rows();
  if (first_row < 0 || num_rows < 0 || first_row > rows || num_rows > rows - first_row) {
    return OutOfRange(fmt::format("rows [{}, {}+{}) are not inside tensor '{}' of {} rows",
                                  first_row, first_row, num_rows, tensor.name, rows));
  }
  const int64_t len = tensor.row_length();
  const size_t row_bytes = tensor.row_bytes();
  for (int64_t r = 0; r < num_rows; ++r) {
    CTXPAR_RETURN_IF_ERROR(
        DequantizeRow(tensor.type, tensor.data + (first_row + r) * row_bytes, dst + r * len, len));
  }
  return Status::Ok();
}

Expected<std::vector<float>> DequantizeTensor(const GgufTensor& tensor) {
  if (!GetGgmlTypeTraits(tensor.type).dequantizable) {
    return Unimplemented(
        fmt::format("tensor '{}': dequantization of ggml type {} is not "
                    "implemented",
                    tensor.name, GgmlTypeName(tensor.type)));
  }
  std::vector<float> out(static_cast<size_t>(tensor.num_elements()));
  CTXPAR_RETURN_IF_ERROR(DequantizeRows(tensor, 0, tensor.num_rows(), out.data()));
  return out;
}
}  // namespace ctxpar
