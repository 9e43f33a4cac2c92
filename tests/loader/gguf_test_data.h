// The GGUF goldens in tests/data/gguf/ (made by tools/golden/gguf/make_goldens.py), the readers
// of their raw files, and a writer of GGUF images field by field, shared by the loader's tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace ctxpar::testing {

inline const std::string kGgufDataDir = std::string(CTXPAR_TEST_DATA_DIR) + "/gguf/";

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A file of little-endian fp32 values.
inline std::vector<float> ReadFloats(const std::string& path) {
  const std::vector<uint8_t> bytes = ReadBytes(path);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// A little-endian GGUF image written field by field, as the specification lays it out.
class Image {
 public:
  Image& Raw(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  template <typename T>
  Image& Put(T v) {
    // resize + memcpy: GCC 12 warns (-Wstringop-overflow) on a range insert of the bytes.
    const std::size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  Image& Str(std::string_view s) { return Put<uint64_t>(s.size()).Raw(s); }
  Image& Header(uint32_t version, uint64_t tensors, uint64_t kvs) {
    return Raw("GGUF").Put(version).Put(tensors).Put(kvs);
  }
  std::vector<uint8_t> bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace ctxpar::testing
