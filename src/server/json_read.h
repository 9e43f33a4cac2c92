// Reading request JSON for the protocol layer (internal to src/server): typed fields with
// OpenAI's error objects naming the field (CTXPAR-HTTP-001..003, -007), shared by the routes'
// parsers (request.cpp, tokenize.cpp).
//
// null is an absent field: a Read of null leaves *out as it was and succeeds.
//
// Thread safety: functions of their arguments.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/request.h"

namespace ctxpar::server {

using MaybeError = std::optional<ApiError>;

#define CTXPAR_RETURN_IF_API_ERROR(expr) \
  if (::ctxpar::server::MaybeError api_error_ = (expr)) return *api_error_

// A value as an error message quotes it: JSON, cut to a readable length.
std::string Quote(const nlohmann::json& value);
// CTXPAR-HTTP-002: `param` is not of the type `expected` describes.
ApiError TypeError(std::string_view param, std::string_view expected, const nlohmann::json& value);
// CTXPAR-HTTP-004: `param` of route `path` breaks `rule`.
ApiError RangeError(std::string_view path, std::string_view param, std::string_view rule,
                    const std::string& value);
// CTXPAR-HTTP-003: route `path` needs `param`.
ApiError Missing(std::string_view path, std::string_view param);
// CTXPAR-HTTP-007: `param` asks for what the server does not implement.
ApiError Unsupported(std::string_view param, std::string detail);

// obj[key], or null when absent.
const nlohmann::json& Field(const nlohmann::json& obj, std::string_view key);
MaybeError Read(const nlohmann::json& v, std::string_view param, bool* out);
MaybeError Read(const nlohmann::json& v, std::string_view param, float* out);
// Integers above INT64_MAX read as INT64_MAX (the range checks then refuse them).
MaybeError Read(const nlohmann::json& v, std::string_view param, int64_t* out);
MaybeError Read(const nlohmann::json& v, std::string_view param, int* out);
// A string or a list of strings.
MaybeError ReadStrings(const nlohmann::json& v, std::string_view param,
                       std::vector<std::string>* out);
bool IsIdList(const nlohmann::json& v);
// A list of integers that fit int32; the vocabulary range is the engine's to check.
MaybeError ReadIds(const nlohmann::json& v, std::string_view param, std::vector<int32_t>* out);

// CTXPAR-HTTP-004 for a text of `bytes` bytes longer than model.max_prompt_bytes (refused before
// it is tokenized: it cannot fit the context).
MaybeError CheckTextBytes(std::string_view path, std::string_view param, std::size_t bytes,
                          const ModelContext& model);
// CTXPAR-HTTP-007 for text where the model has no tokenizer.
MaybeError NeedTokenizer(const ModelContext& model, std::string_view param);
// The body of `path` as one JSON object, else CTXPAR-HTTP-001.
ApiExpected<nlohmann::json> ParseObject(std::string_view path, std::string_view body);

// Deeper than any chat request (a tool schema is a handful of levels): copying and rendering
// recurse over a value, so one nested 100,000 deep is refused first.
inline constexpr int kMaxJsonDepth = 64;
// Whether v nests deeper than kMaxJsonDepth, found without recursion.
bool NestedTooDeep(const nlohmann::json& v);

}  // namespace ctxpar::server
