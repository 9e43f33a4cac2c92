// Random weight matrices of every WeightType for the matmul tests (random bytes with valid
// scales, or normal values), and normal activations; seeded by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compute/linear.h"
#include "ctxpar/dtype.h"
#include "ctxpar/gguf.h"
#include "ctxpar/quant.h"

namespace ctxpar::compute::test_weights {

inline std::string Name(WeightType type) { return std::string(GgmlTypeName(GgmlTypeOf(type))); }

struct Matrix {
  std::vector<std::uint8_t> bytes;
  QuantMatrix m;
};

inline void PutHalf(std::uint8_t* p, float v) {
  const std::uint16_t h = Fp32ToFp16(v);
  std::memcpy(p, &h, 2);
}

// Random bytes, then each block's fp16 scales (and mins) set to finite values of a trained model's
// size, Q8_0 without ggml's never-written -128; for the unquantized types, normal values of that
// size (subnormal and zero ones among them).
inline Matrix RandomMatrix(WeightType type, int rows, int cols, std::mt19937& rng) {
  Matrix r;
  const std::size_t row_bytes = cols / BlockSize(type) * BlockBytes(type);
  r.bytes.resize(row_bytes * rows);
  r.m = QuantMatrix{type, r.bytes.data(), rows, cols, row_bytes};
  if (type == WeightType::kF32 || type == WeightType::kF16 || type == WeightType::kBF16) {
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (std::size_t i = 0; i < std::size_t(rows) * cols; ++i) {
      float v = normal(rng);
      if (i % 97 == 5) v = 1e-6f * v;  // fp16 subnormals
      if (i % 89 == 3) v = 0.0f;
      if (type == WeightType::kF32) {
        std::memcpy(r.bytes.data() + 4 * i, &v, 4);
      } else {
        const std::uint16_t h = type == WeightType::kF16 ? Fp32ToFp16(v) : FloatToBf16(v);
        std::memcpy(r.bytes.data() + 2 * i, &h, 2);
      }
    }
    return r;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : r.bytes) b = std::uint8_t(byte(rng));
  std::uniform_real_distribution<float> scale(0.0005f, 0.05f);
  for (std::size_t at = 0; at < r.bytes.size(); at += BlockBytes(type)) {
    std::uint8_t* blk = r.bytes.data() + at;
    switch (type) {
      case WeightType::kQ6_K:
        PutHalf(blk + offsetof(BlockQ6K, d), scale(rng) / 16);
        break;
      case WeightType::kQ2_K:
        PutHalf(blk + offsetof(BlockQ2K, d), scale(rng) / 4);
        PutHalf(blk + offsetof(BlockQ2K, dmin), scale(rng) / 4);
        break;
      case WeightType::kQ3_K:
        PutHalf(blk + offsetof(BlockQ3K, d), scale(rng) / 16);
        break;
      case WeightType::kIQ4_NL:  // grid values up to 127
        PutHalf(blk, scale(rng) / 64);
        break;
      case WeightType::kIQ4_XS:  // and 6-bit scales up to 32
        PutHalf(blk, scale(rng) / 2048);
        break;
      case WeightType::kMXFP4:  // e2m1 values up to 12 (doubled) times 2^(e - 128)
        blk[0] = std::uint8_t(118 + byte(rng) % 7);
        break;
      case WeightType::kQ4_1:
        PutHalf(blk, scale(rng));
        PutHalf(blk + 2, -8 * scale(rng));
        break;
      case WeightType::kQ5_1:
        PutHalf(blk, scale(rng));
        PutHalf(blk + 2, -16 * scale(rng));
        break;
      case WeightType::kQ4_K:
      case WeightType::kQ5_K:
        PutHalf(blk, scale(rng) / 8);
        PutHalf(blk + 2, scale(rng) / 8);
        break;
      case WeightType::kQ8_0:
        for (std::size_t j = 2; j < BlockBytes(type); ++j) {
          if (blk[j] == 128) blk[j] = 129;  // ggml's Q8_0 never holds -128
        }
        PutHalf(blk, scale(rng));
        break;
      default:
        PutHalf(blk, scale(rng));
    }
  }
  return r;
}

inline std::vector<float> Normal(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace ctxpar::compute::test_weights
