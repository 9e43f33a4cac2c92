#include "ctxpar/gguf_hparams.h"

#include <fmt/format.h>

#include <cmath>

#include "ctxpar/error_catalog.h"

namespace ctxpar {

Status HparamError(const GgufFile& file, std::string_view item, const std::string& value,
                   std::string_view rule) {
  return CatalogError("CTXPAR-GGUF-006", {{"file", PyRepr(file.path())},
                                          {"item", std::string(item)},
                                          {"value", value},
                                          {"rule", std::string(rule)}});
}

Expected<int> ReadIntHparam(const GgufFile& file, std::string_view key, int min, int max,
                            std::optional<int> fallback) {
  if (fallback && file.Find(key) == nullptr) return *fallback;
  CTXPAR_ASSIGN_OR_RETURN(const int64_t v, file.GetInteger(key));
  if (v < min || v > max) {
    return HparamError(file, key, v, fmt::format("it must be in [{}, {}]", min, max));
  }
  return static_cast<int>(v);
}

Expected<float> ReadFloatHparam(const GgufFile& file, std::string_view key, const FloatRange& range,
                                std::optional<float> fallback) {
  if (fallback && file.Find(key) == nullptr) return *fallback;
  CTXPAR_ASSIGN_OR_RETURN(const double v, file.GetFloat(key));
  const bool above_min = range.min_open ? v > range.min : v >= range.min;
  const bool below_max = range.max_open ? v < range.max : v <= range.max;
  if (!std::isfinite(v) || !above_min || !below_max) {
    return HparamError(file, key, fmt::format("{}", v),
                       fmt::format("it must be a finite number {}", range.text));
  }
  return static_cast<float>(v);
}

}  // namespace ctxpar
