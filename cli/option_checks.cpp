#include "option_checks.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <thread>

#include "ctxpar/error_catalog.h"

namespace ctxpar::cli {
namespace {

Status BadValue(std::string_view flag, std::string_view value, std::string reason,
                std::string valid) {
  return CatalogError("CTXPAR-FLAG-008", {{"value", PyRepr(value)},
                                          {"flag", std::string(flag)},
                                          {"reason", std::move(reason)},
                                          {"valid", std::move(valid)}});
}

// A number outside its range is FLAG-003, as for the launch flags: with FLAG-008's reason "out
// of range" the two texts were the same, and `ctxpar explain --message` named FLAG-003.
Status OutOfRange(std::string_view flag, std::string_view value, std::string valid) {
  return CatalogError(
      "CTXPAR-FLAG-003",
      {{"value", PyRepr(value)}, {"flag", std::string(flag)}, {"valid", std::move(valid)}});
}

std::string Trimmed(double x) {
  std::string s = std::to_string(x);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

int HardwareThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

Status CheckThreads(std::string_view flag, long long value, bool zero_means_default) {
  const int max = HardwareThreads();
  if ((value >= 1 && value <= max) || (value == 0 && zero_means_default)) return Status::Ok();
  std::string valid = "integers from 1 to " + std::to_string(max);
  if (zero_means_default) valid = "0 (the default) or " + valid;
  return CatalogError("CTXPAR-FLAG-007", {{"value", std::to_string(value)},
                                          {"flag", std::string(flag)},
                                          {"max", std::to_string(max)},
                                          {"valid", valid}});
}

Expected<std::vector<int>> ParseCountList(std::string_view flag, std::string_view text, int min,
                                          int max) {
  const std::string valid = "comma-separated integers from " + std::to_string(min) + " to " +
                            std::to_string(max) + ", k for 1024 (e.g. 4k,32k)";
  std::vector<int> out;
  size_t pos = 0;
  for (;;) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(pos, end - pos);
    std::string_view digits = item;
    std::int64_t scale = 1;
    if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
      scale = 1024;
      digits.remove_suffix(1);
    }
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
      return BadValue(flag, item, "not a count", valid);
    }
    std::int64_t value = 0;
    for (char c : digits) {
      value = value * 10 + (c - '0');
      if (value * scale > max) return OutOfRange(flag, item, valid);
    }
    value *= scale;
    if (value < min) return OutOfRange(flag, item, valid);
    out.push_back(static_cast<int>(value));
    if (end == text.size()) return out;
    pos = end + 1;
  }
}

Status CheckSeconds(std::string_view flag, double value, double min, double max) {
  if (std::isfinite(value) && value >= min && value <= max) return Status::Ok();
  const std::string valid = "numbers from " + Trimmed(min) + " to " + Trimmed(max);
  if (std::isfinite(value)) return OutOfRange(flag, Trimmed(value), valid);
  return BadValue(flag, Trimmed(value), "not a finite number", valid);
}

}  // namespace ctxpar::cli
