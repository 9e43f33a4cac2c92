// Registry of `ctxpar bench` kinds; cli/bench_<kind>.cpp registers with CTXPAR_REGISTER_BENCH.
#pragma once

#include <string>
#include <vector>

#include "command.h"

namespace CLI {
class App;
}  // namespace CLI

namespace ctxpar::cli {
bool RegisterBench(const Command& bench);

// Parses a benchmark's options (CLI11 prints help and its own messages): -1 to go on, else the
// exit code (kExitOk after --help, kExitInvalid on a bad option).
int ParseBenchOptions(CLI::App& app, const std::vector<std::string>& args);
}  // namespace ctxpar::cli

#define CTXPAR_REGISTER_BENCH(name, summary, fn)                    \
  [[maybe_unused]] static const bool ctxpar_bench_registered_##fn = \
      ::ctxpar::cli::RegisterBench({name, summary, &fn})
