// The catalog entries of errors raised while running: the CLI's own input, model files,
// processes and collectives. The configuration entries are in error_catalog.cpp.
#include "error_catalog_internal.h"

namespace ctxpar::core_internal {
namespace {

constexpr StatusCode kInput = StatusCode::kInvalidArgument;

}  // namespace

std::vector<CatalogEntry> RuntimeCatalogEntries() {
  return {
      {"CTXPAR-EXPLAIN-001",
       "The message given to explain is too long",
       "The message is longer than {limit} bytes, the most ctxpar explain --message reads; paste "
       "the lines of the error rather than the whole log.",
       kInput,
       "`ctxpar explain --message` matches a pasted error against every message template of the "
       "catalog. It reads a bounded amount of text so that any input is answered at once; an "
       "error message is a few hundred bytes, so a longer text is a log or a file, not one error.",
       "A whole log or file is piped to `ctxpar explain --message -`, or passed with "
       "--message \"$(cat log)\".",
       {"Paste only the error's lines (the line before `run: ctxpar explain ...` holds it).",
        "Or filter the log first, e.g. grep -m1 -B2 'ctxpar explain' log."},
       "ctxpar explain --message - < whole-run.log",
       "ctxpar explain --message \"tp_size (6) must be divisible by dcp_size (4).\"",
       {"CTXPAR-FLAG-004"}},
  };
}

}  // namespace ctxpar::core_internal
