// Registry of `ctxpar bench` kinds; cli/bench_<kind>.cpp registers with CTXPAR_REGISTER_BENCH.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ctxpar::cli {
bool RegisterBench(const Command& bench);

// Parses the options of `ctxpar bench KIND` as every command's (ParseCommandLine: a bad option
// is reported with its catalog ID): -1 to go on, else the exit code (kExitOk after --help).
int ParseBenchOptions(CLI::App& app, const std::vector<std::string>& args, std::string_view kind);
}  // namespace ctxpar::cli

#define CTXPAR_REGISTER_BENCH(name, summary, fn)                    \
  [[maybe_unused]] static const bool ctxpar_bench_registered_##fn = \
      ::ctxpar::cli::RegisterBench({name, summary, &fn})
