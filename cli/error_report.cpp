#include "error_report.h"

#include <cstdio>
#include <string>

#include "command.h"
#include "signals.h"

namespace ctxpar::cli {
namespace {

bool g_line_open = false;  // the last byte WriteOutput wrote was not a newline

}  // namespace

int ExitStatusFor(const Status& status) {
  if (const int interrupted = InterruptedExitStatus(status); interrupted != 0) return interrupted;
  return status.code() == StatusCode::kInternal || status.code() == StatusCode::kUnavailable
             ? kExitInternal
             : kExitInvalid;
}

void WriteOutput(std::string_view text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  g_line_open = text.back() != '\n';
}

int ReportError(const Status& status, std::string_view prefix) {
  if (g_line_open) WriteOutput("\n");
  std::string text(prefix);
  text += status.message() + "\n";
  if (!status.error_id().empty()) text += "run: ctxpar explain " + status.error_id() + "\n";
  std::fputs(text.c_str(), stderr);
  return ExitStatusFor(status);
}

}  // namespace ctxpar::cli
