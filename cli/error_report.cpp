#include "error_report.h"

#include <cstdio>
#include <string>

#include "command.h"

namespace ctxpar::cli {

int ExitStatusFor(const Status& status) {
  return status.code() == StatusCode::kInternal || status.code() == StatusCode::kUnavailable
             ? kExitInternal
             : kExitInvalid;
}

int ReportError(const Status& status, std::string_view prefix) {
  std::string text(prefix);
  text += status.message() + "\n";
  if (!status.error_id().empty()) text += "run: ctxpar explain " + status.error_id() + "\n";
  std::fputs(text.c_str(), stderr);
  return ExitStatusFor(status);
}

}  // namespace ctxpar::cli
