// How the ctxpar commands report a failed Status: the message on stderr, then
// `run: ctxpar explain ID` when the error is in the catalog, and an exit status that follows the
// error (command.h: 2 for invalid input or configuration, 1 for an internal or system failure).
#pragma once

#include <string_view>

#include "ctxpar/status.h"

namespace ctxpar::cli {

// 128 + signal for an interruption (signals.h), kExitInternal for kInternal and kUnavailable,
// else kExitInvalid.
int ExitStatusFor(const Status& status);

// Writes a command's output (generated text) to stdout and flushes it, remembering whether the
// line is still open.
void WriteOutput(std::string_view text);

// Ends an open output line, prints `status` (after `prefix`, e.g. "ctxpar bench attention: ")
// and returns ExitStatusFor.
int ReportError(const Status& status, std::string_view prefix = {});

}  // namespace ctxpar::cli
