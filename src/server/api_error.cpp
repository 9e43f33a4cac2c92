#include "server/api_error.h"

namespace ctxpar::server {

ApiError ToApiError(const Status& status, std::string param) {
  ApiError e;
  e.status = status;
  e.param = std::move(param);
  e.code = status.error_id();
  if (status.error_id() == "CTXPAR-HTTP-005") {
    e.http_status = 404;
    e.type = "not_found_error";
    e.code = "model_not_found";
  } else if (status.error_id() == "CTXPAR-HTTP-006") {
    e.http_status = 401;
    e.type = "authentication_error";
    e.code = "invalid_api_key";
  } else if (status.code() == StatusCode::kUnavailable) {
    e.http_status = 503;
    e.type = "unavailable_error";
  } else if (status.code() == StatusCode::kInternal) {
    e.http_status = 500;
    e.type = "server_error";
  }
  return e;
}

nlohmann::json ErrorBody(const ApiError& error) {
  std::string message = error.status.message();
  if (!error.status.error_id().empty()) {
    message += " (ctxpar explain " + error.status.error_id() + ")";
  }
  auto null_or = [](const std::string& s) {
    return s.empty() ? nlohmann::json() : nlohmann::json(s);
  };
  return {{"error",
           {{"message", message},
            {"type", error.type},
            {"param", null_or(error.param)},
            {"code", null_or(error.code)}}}};
}

}  // namespace ctxpar::server
