#include "ctxpar/dtype.h"

namespace ctxpar {

std::size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
    case DataType::kI32:
      return 4;
    case DataType::kBF16:
    case DataType::kF16:
      return 2;
    case DataType::kF64:
      return 8;
    case DataType::kU8:
    case DataType::kF8E4M3:
    case DataType::kF8E5M2:
      return 1;
  }
  return 0;
}

std::string_view DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
      return "f32";
    case DataType::kBF16:
      return "bf16";
    case DataType::kF16:
      return "f16";
    case DataType::kF64:
      return "f64";
    case DataType::kI32:
      return "i32";
    case DataType::kU8:
      return "u8";
    case DataType::kF8E4M3:
      return "f8_e4m3";
    case DataType::kF8E5M2:
      return "f8_e5m2";
  }
  return "?";
}

}  // namespace ctxpar
