// The catalog entries of errors raised while running: the CLI's own input, model files,
// processes and collectives. The configuration entries are in error_catalog.cpp.
#include "error_catalog_internal.h"

namespace ctxpar::core_internal {
namespace {

constexpr StatusCode kInput = StatusCode::kInvalidArgument;
constexpr StatusCode kSystem = StatusCode::kUnavailable;

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
      {"CTXPAR-FLAG-007",
       "A thread count the machine cannot run",
       "Invalid value {value} for {flag}: out of range for this machine, which has {max} hardware "
       "threads; valid values: {valid}.",
       kInput,
       "--threads is the number of threads per process (per rank under MPI). More threads than "
       "the machine's hardware threads only take turns on the same cores, and each one costs a "
       "process slot and a stack, so ctxpar refuses counts above the machine's. Zero or a "
       "negative count has no meaning (except 0 for generate, which asks for the default).",
       "A thread count copied from a bigger machine, a negative number from a script, or a very "
       "large number (--threads 100000) meant as 'all'.",
       {"Leave --threads out: generate takes cores / ranks, which is what the model runs best "
        "with.",
        "Give at most the machine's hardware threads (nproc)."},
       "ctxpar bench attention --threads 100000",
       "ctxpar bench attention --threads 2",
       {"CTXPAR-SYS-001", "CTXPAR-FLAG-008"}},
      {"CTXPAR-FLAG-008",
       "A benchmark option got a value it cannot use",
       "Invalid value {value} for {flag}: {reason}; valid values: {valid}.",
       kInput,
       "The benchmarks' own options (context lengths, thread lists, durations) are read whole: "
       "a count is digits with an optional k (times 1024), a duration a finite number of "
       "seconds. A value that only starts like one (1e9 read as 1) or a NaN that passes every "
       "comparison would run a benchmark that measures something else than asked.",
       "ctxpar bench attention --contexts 1e9 (exponent notation), --contexts 4.5k, an empty "
       "item in a list (4k,,8k), or ctxpar bench combine --seconds nan / inf.",
       {"Write counts in digits with an optional k: --contexts 4k,32k,131072.",
        "Give durations as plain numbers within the range the message states."},
       "ctxpar bench attention --contexts 1e9",
       "ctxpar bench attention --contexts 128k",
       {"CTXPAR-FLAG-007", "CTXPAR-FLAG-002"}},
      {"CTXPAR-SYS-001",
       "A thread could not be started",
       "Could start only {started} of the {count} threads asked for: {reason}; ask for fewer "
       "threads (--threads), or raise the system's limits (ulimit -u, ulimit -v).",
       kSystem,
       "ctxpar starts its worker threads once, when a model or benchmark is set up. The system "
       "refused one: each thread counts against the per-user process limit and needs memory "
       "for its stack. The threads that had started are stopped again, nothing is left running.",
       "--threads far above the machine's cores on a machine with a low `ulimit -u`, many ranks "
       "per node each with many threads, or a memory limit (`ulimit -v`, a container) that "
       "leaves no room for the stacks.",
       {"Lower --threads: more threads than hardware threads never helps.",
        "With several ranks per node, give each about cores / ranks threads (the default).",
        "Raise the limits the reason names (ulimit -u, ulimit -v) if the count is right."},
       "ctxpar generate --threads 512 'Hello'",
       "ctxpar generate --threads 8 'Hello'",
       {"CTXPAR-FLAG-007"}},
  };
}

}  // namespace ctxpar::core_internal
