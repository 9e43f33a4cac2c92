// A GGUF v3 image with metadata only (no tensors, as llama.cpp's vocabulary-only files), written
// by hand after the GGUF specification, for the tokenizer's tests and the tokenize command's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctxpar::testing {

class GgufImage {
 public:
  GgufImage& String(const std::string& key, const std::string& value) {
    Key(key, 8);
    Str(value);
    return Count();
  }
  GgufImage& Strings(const std::string& key, const std::vector<std::string>& values) {
    Key(key, 9);
    Pod<uint32_t>(8);
    Pod<uint64_t>(values.size());
    for (const auto& v : values) Str(v);
    return Count();
  }
  GgufImage& I32s(const std::string& key, const std::vector<int32_t>& values) {
    Key(key, 9);
    Pod<uint32_t>(5);
    Pod<uint64_t>(values.size());
    for (int32_t v : values) Pod(v);
    return Count();
  }
  GgufImage& F32s(const std::string& key, const std::vector<float>& values) {
    Key(key, 9);
    Pod<uint32_t>(6);
    Pod<uint64_t>(values.size());
    for (float v : values) Pod(v);
    return Count();
  }
  GgufImage& U32(const std::string& key, uint32_t value) {
    Key(key, 4);
    Pod(value);
    return Count();
  }
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    const uint64_t header[2] = {0, kv_count_};  // tensor count, metadata count
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(header),
               reinterpret_cast<const uint8_t*>(header) + sizeof(header));
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  template <typename T>
  void Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    body_.insert(body_.end(), p, p + sizeof(T));
  }
  void Str(const std::string& s) {
    Pod<uint64_t>(s.size());
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void Key(const std::string& key, uint32_t type) {
    Str(key);
    Pod(type);
  }
  GgufImage& Count() {
    ++kv_count_;
    return *this;
  }
  std::vector<uint8_t> body_;
  uint64_t kv_count_ = 0;
};

}  // namespace ctxpar::testing
