// The loader's catalog errors keep the Status codes its API promises (kNotFound for a missing
// file or key, kDataLoss for a corrupt file) where one catalog entry covers several of them.
#pragma once

#include <string>
#include <string_view>

#include "ctxpar/error_catalog.h"
#include "ctxpar/status.h"
#include "loader/file_bytes.h"

namespace ctxpar::loader_internal {

inline Status WithCode(StatusCode code, const Status& s) {
  return Status(code, s.message(), s.error_id());
}

// The catalog entries a file format's Open reports, each with {file}: the file cannot be opened
// or mapped ({reason}; the MapFailure's code kept), it is malformed ({detail}), or it holds what
// the reader does not implement ({detail}; the parser's kUnimplemented).
struct OpenErrorIds {
  std::string_view cannot_open;
  std::string_view malformed;
  std::string_view unsupported;
};

inline Status CannotOpen(const OpenErrorIds& ids, const std::string& path,
                         const loader::MapFailure& failure) {
  return WithCode(failure.code, CatalogError(ids.cannot_open,
                                             {{"file", PyRepr(path)}, {"reason", failure.reason}}));
}

inline Status ParseFailed(const OpenErrorIds& ids, const std::string& path, const Status& s) {
  return CatalogError(s.code() == StatusCode::kUnimplemented ? ids.unsupported : ids.malformed,
                      {{"file", PyRepr(path)}, {"detail", s.message()}});
}

}  // namespace ctxpar::loader_internal
