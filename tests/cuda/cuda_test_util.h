// Helpers for the CUDA tests: skipping without a device, device buffers, bf16 data, error norms.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/dtype.h"
#include "ctxpar/cuda_attention.h"

namespace ctxpar::testing {

// GTEST_SKIP()s the calling test with "no CUDA device: ..." when the runtime finds none.
#define CTXPAR_SKIP_WITHOUT_CUDA_DEVICE()                                          \
  do {                                                                             \
    const ::ctxpar::Expected<int> ctxpar_devices_ = ::ctxpar::CudaDeviceCount();   \
    if (!ctxpar_devices_.ok()) GTEST_SKIP() << ctxpar_devices_.status().message(); \
  } while (0)

#define CTXPAR_ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device allocation that frees itself.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
inline cudaError_t Upload(const DeviceBuffer& dst, const std::vector<T>& src) {
  return cudaMemcpy(dst.get(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice);
}

template <typename T>
inline cudaError_t Download(std::vector<T>& dst, const DeviceBuffer& src) {
  return cudaMemcpy(dst.data(), src.get(), dst.size() * sizeof(T), cudaMemcpyDeviceToHost);
}

// Fills a device buffer with 0xff bytes: NaN for fp32 and bf16, so an unwritten output shows.
inline cudaError_t Poison(const DeviceBuffer& buf) {
  return cudaMemset(buf.get(), 0xff, buf.bytes());
}

// Random bf16 values in [-1, 1) (no zeros to hide behind) and their exact fp32 widening.
inline void RandomBf16(std::mt19937& rng, size_t n, std::vector<uint16_t>& bits,
                       std::vector<float>& values) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  bits.resize(n);
  values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float x = dist(rng);
    if (x == 0.0f) x = 0.5f;
    bits[i] = FloatToBf16(x);
    values[i] = Bf16ToFloat(bits[i]);
  }
}

inline std::vector<float> RandomFloats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ||got - want|| / max(||want||, 1e-30) over finite references; a NaN in `got` makes it NaN.
inline double RelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0.0;
  double den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

}  // namespace ctxpar::testing
