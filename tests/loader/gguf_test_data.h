// The GGUF goldens in tests/data/gguf/ (made by tools/golden/gguf/make_goldens.py) and the
// readers of their raw files, shared by the GGUF reader and dequantization tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
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

}  // namespace ctxpar::testing
