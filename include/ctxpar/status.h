// Status and Expected<T>: how every library function of ctxpar reports failure.
//
// Library code never prints, throws or exits; it returns a Status (or an Expected<T> that holds
// either a value or a Status). A Status raised by a configuration rule carries the stable ID of
// its entry in the error catalog (see error_catalog.h), so the CLI can point at `ctxpar explain`.
//
// Thread safety: values; no shared state.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ctxpar {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from the user: a flag, a shape, a file
  kFailedPrecondition,  // valid input that this machine or configuration cannot serve
  kNotFound,
  kOutOfRange,
  kDataLoss,  // a truncated or malformed file
  kUnavailable,  // a peer or device that is not there (a dead rank, no GPU)
  kUnimplemented,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, std::string error_id = {})
      : code_(code), message_(std::move(message)), error_id_(std::move(error_id)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The text a user reads; for catalog errors exactly the catalog's rendered template.
  const std::string& message() const { return message_; }
  // The catalog ID ("CTXPAR-DCP-003", ...) or empty for errors outside the catalog.
  const std::string& error_id() const { return error_id_; }
  // "<code name>: <message>", for logs.
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string error_id_;
};

inline Status InvalidArgument(std::string message) {
  return {StatusCode::kInvalidArgument, std::move(message)};
}
inline Status FailedPrecondition(std::string message) {
  return {StatusCode::kFailedPrecondition, std::move(message)};
}
inline Status Internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }
inline Status DataLoss(std::string message) { return {StatusCode::kDataLoss, std::move(message)}; }
inline Status Unavailable(std::string message) {
  return {StatusCode::kUnavailable, std::move(message)};
}
inline Status NotFound(std::string message) { return {StatusCode::kNotFound, std::move(message)}; }
inline Status OutOfRange(std::string message) {
  return {StatusCode::kOutOfRange, std::move(message)};
}
inline Status Unimplemented(std::string message) {
  return {StatusCode::kUnimplemented, std::move(message)};
}

// A value or the Status that explains why there is none. Constructing from an ok Status is a
// programming error.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : data_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(data_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  explicit operator bool() const { return ok(); }

  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace ctxpar

// Propagates a failed Status from an expression that yields a Status.
#define CTXPAR_RETURN_IF_ERROR(expr)           \
  do {                                         \
    ::ctxpar::Status ctxpar_status_ = (expr);  \
    if (!ctxpar_status_.ok()) return ctxpar_status_; \
  } while (0)

#define CTXPAR_CONCAT_INNER_(a, b) a##b
#define CTXPAR_CONCAT_(a, b) CTXPAR_CONCAT_INNER_(a, b)
// CTXPAR_ASSIGN_OR_RETURN(auto x, MakeX()): binds the value or returns the Status.
#define CTXPAR_ASSIGN_OR_RETURN(lhs, expr)                              \
  auto CTXPAR_CONCAT_(ctxpar_expected_, __LINE__) = (expr);            \
  if (!CTXPAR_CONCAT_(ctxpar_expected_, __LINE__).ok())                \
    return CTXPAR_CONCAT_(ctxpar_expected_, __LINE__).status();        \
  lhs = std::move(CTXPAR_CONCAT_(ctxpar_expected_, __LINE__)).value()
