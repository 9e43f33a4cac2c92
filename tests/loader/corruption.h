// What the readers' corruption suites hold every malformed input to: a Status, kDataLoss (or
// kUnimplemented for what the format allows but the reader does not take), with a message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar::testing {

template <typename File>
void ExpectGracefulError(const Expected<File>& f, const std::string& what) {
  const StatusCode code = f.status().code();
  EXPECT_TRUE(code == StatusCode::kDataLoss || code == StatusCode::kUnimplemented)
      << what << ": " << f.status().ToString();
  EXPECT_FALSE(f.status().message().empty()) << what;
}

// `image` with 1 to max_flips of its bytes in [0, end) changed (xor with an odd byte) at random.
inline std::vector<uint8_t> FlipBytes(std::vector<uint8_t> image, size_t end, int max_flips,
                                      std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pos(0, end - 1);
  std::uniform_int_distribution<int> flips(1, max_flips);
  std::uniform_int_distribution<int> byte(0, 255);
  const int n = flips(rng);
  for (int k = 0; k < n; ++k) image[pos(rng)] ^= static_cast<uint8_t>(byte(rng) | 1);
  return image;
}

}  // namespace ctxpar::testing
