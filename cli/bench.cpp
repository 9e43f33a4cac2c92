// `ctxpar bench KIND [options]`: dispatches to the benchmarks that cli/bench_*.cpp register.
#include "bench.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "error_report.h"
#include "launch_flags.h"

namespace ctxpar::cli {

namespace {
std::vector<Command>& BenchRegistry() {
  static std::vector<Command> benches;
  return benches;
}

int RunBench(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::FILE* out = args.empty() ? stderr : stdout;  // an error's usage goes with the error
    std::fprintf(out, "usage: ctxpar bench KIND [options]\n\n");
    for (const Command& b : BenchRegistry()) std::fprintf(out, "  %-10s %s\n", b.name, b.summary);
    return args.empty() ? kExitInvalid : kExitOk;
  }
  for (const Command& b : BenchRegistry()) {
    if (args[0] == b.name) return b.run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::fprintf(stderr, "ctxpar bench: unknown benchmark '%s' (see ctxpar bench --help)\n",
               args[0].c_str());
  return kExitInvalid;
}
}  // namespace

int ParseBenchOptions(CLI::App& app, const std::vector<std::string>& args, std::string_view kind) {
  Status status;
  const int rc = ParseCommandLine(app, args, "bench " + std::string(kind), &status);
  return rc > 0 ? ReportError(status) : rc;
}

bool RegisterBench(const Command& bench) {
  BenchRegistry().push_back(bench);
  return true;
}

CTXPAR_REGISTER_COMMAND("bench", "kernel and collective benchmarks with measured ceilings",
                        RunBench);

}  // namespace ctxpar::cli
