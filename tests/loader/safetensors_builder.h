// Writes safetensors images for tests: tensors laid back to back in the data section in the
// order given, the header as the format's reference writer makes it (padded with spaces to 8
// bytes). Header text can be replaced to build malformed files.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ctxpar::testing {

struct TensorBytes {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> AsBytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// The header JSON of `tensors` laid out back to back.
inline nlohmann::json SafetensorsHeader(const std::vector<TensorBytes>& tensors,
                                        const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const TensorBytes& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
  }
  return header;
}

// An image with `header_text` as its header and the tensors' bytes as its data section.
inline std::vector<uint8_t> SafetensorsImage(std::string header_text,
                                             const std::vector<TensorBytes>& tensors) {
  while (header_text.size() % 8 != 0) header_text += ' ';
  const uint64_t n = header_text.size();
  size_t total = 8 + n;
  for (const TensorBytes& t : tensors) total += t.bytes.size();
  std::vector<uint8_t> out(total);
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header_text.data(), n);
  size_t at = 8 + n;
  for (const TensorBytes& t : tensors) {
    if (!t.bytes.empty()) std::memcpy(out.data() + at, t.bytes.data(), t.bytes.size());
    at += t.bytes.size();
  }
  return out;
}

inline std::vector<uint8_t> SafetensorsImage(const std::vector<TensorBytes>& tensors,
                                             const nlohmann::json& metadata = nullptr) {
  return SafetensorsImage(SafetensorsHeader(tensors, metadata).dump(), tensors);
}

}  // namespace ctxpar::testing
