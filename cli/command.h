// The subcommands of the `ctxpar` binary. Each cli/<name>.cpp registers one with
// CTXPAR_REGISTER_COMMAND; main() dispatches on argv[1].
//
// A command receives the arguments after its name and returns the process exit status:
// 0 success, 2 invalid input or configuration, 1 internal failure.
#pragma once

#include <string>
#include <vector>

namespace ctxpar::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

bool RegisterCommand(const Command& command);
const std::vector<Command>& Commands();

inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitInvalid = 2;

}  // namespace ctxpar::cli

#define CTXPAR_REGISTER_COMMAND(name, summary, fn)                                         \
  [[maybe_unused]] static const bool ctxpar_registered_##fn =                              \
      ::ctxpar::cli::RegisterCommand({name, summary, &fn})
