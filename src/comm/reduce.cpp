#include "reduce.h"

#include <algorithm>
#include <cstdint>

#include "ctxpar/dtype.h"

namespace ctxpar::comm_internal {

namespace {
template <typename T>
void Apply(T* inout, const T* in, std::size_t count, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (std::size_t i = 0; i < count; ++i) inout[i] = static_cast<T>(inout[i] + in[i]);
  } else {
    for (std::size_t i = 0; i < count; ++i) inout[i] = std::max(inout[i], in[i]);
  }
}
}  // namespace

void ReduceInto(void* inout, const void* in, std::size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kF32:
      return Apply(static_cast<float*>(inout), static_cast<const float*>(in), count, op);
    case DataType::kF64:
      return Apply(static_cast<double*>(inout), static_cast<const double*>(in), count, op);
    case DataType::kI32:
      return Apply(static_cast<int32_t*>(inout), static_cast<const int32_t*>(in), count, op);
    case DataType::kU8:
      return Apply(static_cast<uint8_t*>(inout), static_cast<const uint8_t*>(in), count, op);
    case DataType::kBF16:
    case DataType::kF16: {
      const bool bf16 = dtype == DataType::kBF16;
      auto* a = static_cast<uint16_t*>(inout);
      const auto* b = static_cast<const uint16_t*>(in);
      for (std::size_t i = 0; i < count; ++i) {
        const float x = bf16 ? Bf16ToFloat(a[i]) : Fp16ToFp32(a[i]);
        const float y = bf16 ? Bf16ToFloat(b[i]) : Fp16ToFp32(b[i]);
        const float r = op == ReduceOp::kSum ? x + y : std::max(x, y);
        a[i] = bf16 ? FloatToBf16(r) : Fp32ToFp16(r);
      }
      return;
    }
    case DataType::kF8E4M3:
    case DataType::kF8E5M2: {
      const bool e4m3 = dtype == DataType::kF8E4M3;
      auto* a = static_cast<uint8_t*>(inout);
      const auto* b = static_cast<const uint8_t*>(in);
      for (std::size_t i = 0; i < count; ++i) {
        const float x = e4m3 ? Fp8E4M3ToFloat(a[i]) : Fp8E5M2ToFloat(a[i]);
        const float y = e4m3 ? Fp8E4M3ToFloat(b[i]) : Fp8E5M2ToFloat(b[i]);
        const float r = op == ReduceOp::kSum ? x + y : std::max(x, y);
        a[i] = e4m3 ? FloatToFp8E4M3(r) : FloatToFp8E5M2(r);
      }
      return;
    }
  }
}

}  // namespace ctxpar::comm_internal
