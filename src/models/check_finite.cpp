#include "models/check_finite.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "ctxpar/error_catalog.h"

namespace ctxpar {

Status CheckFinite(const float* values, std::size_t n, std::string_view what,
                   std::string_view model_file) {
  // A sum is NaN when any term is NaN or infinite (inf - inf included), and the common case
  // costs one pass without a branch per value.
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) sum += values[i] * 0.0f;
  if (sum == 0.0f) return Status::Ok();
  std::size_t count = 0;
  std::size_t first = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) {
      if (count++ == 0) first = i;
    }
  }
  return CatalogError("CTXPAR-MODEL-009", {{"file", PyRepr(model_file)},
                                           {"count", std::to_string(count)},
                                           {"what", std::string(what)},
                                           {"index", std::to_string(first)},
                                           {"value", fmt::format("{}", values[first])}});
}

}  // namespace ctxpar
