// Registry of `ctxpar bench` kinds; cli/bench_<kind>.cpp registers with CTXPAR_REGISTER_BENCH.
#pragma once

#include "command.h"

namespace ctxpar::cli {
bool RegisterBench(const Command& bench);
}  // namespace ctxpar::cli

#define CTXPAR_REGISTER_BENCH(name, summary, fn) \
  [[maybe_unused]] static const bool ctxpar_bench_registered_##fn = \
      ::ctxpar::cli::RegisterBench({name, summary, &fn})
