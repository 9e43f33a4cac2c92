// ApiError: a refusal as the HTTP layer answers it, OpenAI's error object
// {"error": {"message", "type", "param", "code"}} with its HTTP status.
//
// The message is the Status's, followed by the catalog ID when it has one
// ("... (ctxpar explain CTXPAR-HTTP-002)"); code is OpenAI's code where OpenAI has one
// (invalid_api_key, model_not_found), else the catalog ID, else null; param names the request
// field at fault, or null.
//
// Thread safety: values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "ctxpar/status.h"

namespace ctxpar::server {

struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string param;  // "" is null
  std::string code;   // "" is null
  Status status;
};

// Either a value or the ApiError that refuses it.
template <typename T>
using ApiExpected = std::variant<T, ApiError>;

// The HTTP status and type for a Status: 404 for CTXPAR-HTTP-005, 401 for CTXPAR-HTTP-006, 503
// for kUnavailable (a full queue, a stopped engine, a server not ready), 500 for kInternal, 400
// for the rest. `param` names the field.
ApiError ToApiError(const Status& status, std::string param = {});

nlohmann::json ErrorBody(const ApiError& error);

}  // namespace ctxpar::server
