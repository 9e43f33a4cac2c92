// The loader's catalog errors keep the Status codes its API promises (kNotFound for a missing
// file or key, kDataLoss for a corrupt file) where one catalog entry covers several of them.
#pragma once

#include <string>

#include "ctxpar/status.h"

namespace ctxpar::loader_internal {

inline Status WithCode(StatusCode code, const Status& s) {
  return Status(code, s.message(), s.error_id());
}

}  // namespace ctxpar::loader_internal
