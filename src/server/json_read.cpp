#include "server/json_read.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "ctxpar/error_catalog.h"

namespace ctxpar::server {

using json = nlohmann::json;

namespace {

constexpr std::size_t kQuoteChars = 80;

// Appends the JSON of `value` to `out` until out holds more than kQuoteChars characters: the
// work and the stack depth are bounded by the quote's length, not by the value's size or depth
// (a value nested 100,000 deep would overflow a recursive dump's stack).
void QuoteInto(const json& value, std::string& out) {
  struct Level {
    const json* container;
    json::const_iterator next;
  };
  std::vector<Level> stack;
  const json* v = &value;
  while (out.size() <= kQuoteChars) {
    if (v != nullptr) {
      if (v->is_structured() && !v->empty()) {
        out += v->is_object() ? '{' : '[';
        stack.push_back({v, v->begin()});
      } else if (v->is_string()) {
        const std::string& text = v->get_ref<const std::string&>();
        out += json(text.substr(0, kQuoteChars + 1))
                   .dump(-1, ' ', false, json::error_handler_t::replace);
      } else {
        out += v->dump(-1, ' ', false, json::error_handler_t::replace);
      }
      v = nullptr;
      continue;
    }
    if (stack.empty()) return;
    Level& top = stack.back();
    if (top.next == top.container->end()) {
      out += top.container->is_object() ? '}' : ']';
      stack.pop_back();
      continue;
    }
    if (top.next != top.container->begin()) out += ',';
    if (top.container->is_object()) {
      out += json(top.next.key().substr(0, kQuoteChars + 1))
                 .dump(-1, ' ', false, json::error_handler_t::replace) +
             ':';
    }
    v = &*top.next;
    ++top.next;
  }
}

}  // namespace

std::string Quote(const json& value) {
  std::string text;
  QuoteInto(value, text);
  return text.size() > kQuoteChars ? text.substr(0, kQuoteChars - 3) + "..." : text;
}

ApiError TypeError(std::string_view param, std::string_view expected, const json& value) {
  return ToApiError(CatalogError("CTXPAR-HTTP-002", {{"field", std::string(param)},
                                                     {"expected", std::string(expected)},
                                                     {"value", Quote(value)}}),
                    std::string(param));
}

ApiError RangeError(std::string_view path, std::string_view param, std::string_view rule,
                    const std::string& value) {
  return ToApiError(CatalogError("CTXPAR-HTTP-004", {{"field", std::string(param)},
                                                     {"rule", std::string(rule)},
                                                     {"route", std::string(path)},
                                                     {"value", value}}),
                    std::string(param));
}

ApiError Missing(std::string_view path, std::string_view param) {
  return ToApiError(CatalogError("CTXPAR-HTTP-003",
                                 {{"route", std::string(path)}, {"field", std::string(param)}}),
                    std::string(param));
}

ApiError Unsupported(std::string_view param, std::string detail) {
  return ToApiError(CatalogError("CTXPAR-HTTP-007",
                                 {{"field", std::string(param)}, {"detail", std::move(detail)}}),
                    std::string(param));
}

const json& Field(const json& obj, std::string_view key) {
  static const json kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

MaybeError Read(const json& v, std::string_view param, bool* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) return TypeError(param, "a boolean", v);
  *out = v.get<bool>();
  return std::nullopt;
}

MaybeError Read(const json& v, std::string_view param, float* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) return TypeError(param, "a number", v);
  *out = v.get<float>();
  return std::nullopt;
}

MaybeError Read(const json& v, std::string_view param, int64_t* out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) return TypeError(param, "an integer", v);
  *out = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX} ? INT64_MAX
                                                                           : v.get<int64_t>();
  return std::nullopt;
}

MaybeError Read(const json& v, std::string_view param, int* out) {
  int64_t wide = *out;
  CTXPAR_RETURN_IF_API_ERROR(Read(v, param, &wide));
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
    return TypeError(param, "a 32-bit integer", v);
  }
  *out = static_cast<int>(wide);
  return std::nullopt;
}

MaybeError ReadStrings(const json& v, std::string_view param, std::vector<std::string>* out) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    out->assign(1, v.get<std::string>());
    return std::nullopt;
  }
  if (!v.is_array()) return TypeError(param, "a string or a list of strings", v);
  out->clear();
  for (const json& s : v) {
    if (!s.is_string()) return TypeError(param, "a string or a list of strings", v);
    out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

bool IsIdList(const json& v) {
  return v.is_array() &&
         std::all_of(v.begin(), v.end(), [](const json& t) { return t.is_number_integer(); });
}

MaybeError ReadIds(const json& v, std::string_view param, std::vector<int32_t>* out) {
  if (!IsIdList(v)) return TypeError(param, "a list of token ids", v);
  out->clear();
  for (const json& t : v) {
    const int64_t id = t.get<int64_t>();
    // Out-of-vocabulary ids are the engine's to refuse (CTXPAR-ENGINE-010); only the type here.
    if (t.is_number_unsigned() && t.get<uint64_t>() > uint64_t{INT32_MAX}) {
      return TypeError(param, "a list of token ids", v);
    }
    out->push_back(static_cast<int32_t>(std::clamp<int64_t>(id, INT32_MIN, INT32_MAX)));
  }
  return std::nullopt;
}

MaybeError CheckTextBytes(std::string_view path, std::string_view param, std::size_t bytes,
                          const ModelContext& model) {
  if (model.max_prompt_bytes <= 0 || static_cast<int64_t>(bytes) <= model.max_prompt_bytes) {
    return std::nullopt;
  }
  return RangeError(path, param,
                    fmt::format("at most {} bytes of text (no longer text fits the context of {} "
                                "tokens)",
                                model.max_prompt_bytes, model.context_length),
                    fmt::format("{} bytes", bytes));
}

MaybeError NeedTokenizer(const ModelContext& model, std::string_view param) {
  if (model.tokenizer != nullptr) return std::nullopt;
  return Unsupported(param, "text prompts need the model's tokenizer, and " +
                                PyRepr(model.served_model_name) + " has none: send token ids");
}

ApiExpected<json> ParseObject(std::string_view path, std::string_view body) {
  std::string detail = "expected one JSON object";
  // A raw NUL is never valid JSON (a string escapes it), but nlohmann's parser would stop at one
  // and accept what came before it.
  if (const std::size_t nul = body.find('\0'); nul != std::string_view::npos) {
    detail = fmt::format("a NUL byte at offset {}: JSON has none outside escapes", nul);
    return ToApiError(
        CatalogError("CTXPAR-HTTP-001", {{"route", std::string(path)}, {"detail", detail}}));
  }
  try {
    json parsed = json::parse(body);
    if (parsed.is_object()) return parsed;
  } catch (const json::exception& e) {
    // A syntax error, or a number out of the double range (out_of_range.406): nlohmann's
    // exceptions stop here, the caller gets an ApiError.
    detail = e.what();
  }
  return ToApiError(
      CatalogError("CTXPAR-HTTP-001", {{"route", std::string(path)}, {"detail", detail}}));
}

bool NestedTooDeep(const nlohmann::json& v) {
  std::vector<std::pair<const nlohmann::json*, int>> stack = {{&v, 1}};
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    if (!node->is_structured()) continue;
    if (depth > kMaxJsonDepth) return true;
    for (const nlohmann::json& child : *node) stack.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace ctxpar::server
