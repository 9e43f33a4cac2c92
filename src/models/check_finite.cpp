#include "models/check_finite.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "ctxpar/error_catalog.h"

namespace ctxpar {

namespace {

bool AllFinite(const float* values, std::size_t n) {
  // A sum is NaN when any term is NaN or infinite (inf - inf included), and the common case
  // costs one pass without a branch per value; 16 independent sums let it vectorize.
  constexpr std::size_t kSums = 16;
  float sums[kSums] = {};
  std::size_t k = 0;
  for (; k + kSums <= n; k += kSums) {
    for (std::size_t j = 0; j < kSums; ++j) sums[j] += values[k + j] * 0.0f;
  }
  for (; k < n; ++k) sums[0] += values[k] * 0.0f;
  float sum = 0.0f;
  for (float s : sums) sum += s;
  return sum == 0.0f;
}

Status NotFinite(const float* values, std::size_t n, std::string_view what,
                 std::string_view model_file) {
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

}  // namespace

Status CheckFinite(const float* values, std::size_t n, std::string_view what,
                   std::string_view model_file) {
  if (AllFinite(values, n)) return Status::Ok();
  return NotFinite(values, n, what, model_file);
}

Status CheckLayerFinite(const float* values, std::size_t n, int layer,
                        std::string_view model_file) {
  if (AllFinite(values, n)) return Status::Ok();
  return NotFinite(values, n, fmt::format("the output of layer {}", layer), model_file);
}

}  // namespace ctxpar
