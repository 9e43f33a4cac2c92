// GGUF metadata values and the typed lookups of GgufFile.
#include <fmt/format.h>

#include <limits>
#include <optional>
#include <type_traits>

#include "ctxpar/error_catalog.h"
#include "ctxpar/gguf.h"
#include "loader/loader_errors.h"

namespace ctxpar {
namespace {

// Variant index <-> GGUF type id: the scalars come in GGUF order with kArray (9) left out.
GgufType TypeOfScalarIndex(size_t index) {
  return static_cast<GgufType>(index < 9 ? index : index + 1);
}
constexpr size_t kFirstArrayIndex = 12;

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "unknown";
}

GgufType GgufValue::type() const {
  return data_.index() < kFirstArrayIndex ? TypeOfScalarIndex(data_.index()) : GgufType::kArray;
}

GgufType GgufValue::element_type() const {
  if (data_.index() < kFirstArrayIndex) return type();
  return TypeOfScalarIndex(data_.index() - kFirstArrayIndex);
}

size_t GgufValue::size() const {
  return std::visit(
      [](const auto& v) -> size_t {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          return 1;
        } else if constexpr (requires { v.size(); }) {
          return v.size();
        } else {
          return 1;
        }
      },
      data_);
}

std::string GgufValue::TypeName() const {
  if (!is_array()) return std::string(GgufTypeName(type()));
  if (const auto* nested = get_if<std::vector<GgufValue>>(); nested && !nested->empty()) {
    return fmt::format("array[{}]", nested->front().TypeName());
  }
  return fmt::format("array[{}]", GgufTypeName(element_type()));
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  const auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].value;
}

Expected<const GgufValue*> GgufFile::Lookup(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) {
    return CatalogError("CTXPAR-GGUF-004", {{"file", PyRepr(path())}, {"key", std::string(key)}});
  }
  return v;
}

Status GgufFile::WrongType(std::string_view key, const GgufValue& v,
                           std::string_view wanted) const {
  return CatalogError("CTXPAR-GGUF-005", {{"file", PyRepr(path())},
                                          {"key", std::string(key)},
                                          {"type", v.TypeName()},
                                          {"wanted", std::string(wanted)}});
}

template <typename T>
Expected<T> GgufFile::GetExact(std::string_view key, std::string_view wanted) const {
  CTXPAR_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(key));
  if (const T* x = v->get_if<T>()) return *x;
  return WrongType(key, *v, wanted);
}

Expected<std::string> GgufFile::GetString(std::string_view key) const {
  return GetExact<std::string>(key, "string");
}
Expected<uint32_t> GgufFile::GetU32(std::string_view key) const {
  return GetExact<uint32_t>(key, "u32");
}
Expected<int32_t> GgufFile::GetI32(std::string_view key) const {
  return GetExact<int32_t>(key, "i32");
}
Expected<uint64_t> GgufFile::GetU64(std::string_view key) const {
  return GetExact<uint64_t>(key, "u64");
}
Expected<float> GgufFile::GetF32(std::string_view key) const { return GetExact<float>(key, "f32"); }
Expected<bool> GgufFile::GetBool(std::string_view key) const { return GetExact<bool>(key, "bool"); }

Expected<int64_t> GgufFile::GetInteger(std::string_view key) const {
  CTXPAR_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(key));
  std::optional<int64_t> out;
  bool too_big = false;
  std::visit(
      [&](const auto& x) {
        using V = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<V, uint64_t>) {
          too_big = x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
          if (!too_big) out = static_cast<int64_t>(x);
        } else if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>) {
          out = static_cast<int64_t>(x);
        }
      },
      v->data());
  if (too_big) {
    return loader_internal::WithCode(
        StatusCode::kOutOfRange,
        CatalogError("CTXPAR-GGUF-006", {{"file", PyRepr(path())},
                                         {"item", std::string(key)},
                                         {"value", std::to_string(*v->get_if<uint64_t>())},
                                         {"rule", "it must fit a signed 64-bit integer"}}));
  }
  if (!out) return WrongType(key, *v, "an integer");
  return *out;
}

Expected<double> GgufFile::GetFloat(std::string_view key) const {
  CTXPAR_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(key));
  if (const auto* f = v->get_if<float>()) return static_cast<double>(*f);
  if (const auto* d = v->get_if<double>()) return *d;
  return WrongType(key, *v, "f32 or f64");
}

}  // namespace ctxpar
