// The launch flags on the command line (CLI11), shared by `check`, `generate` and `serve`.
//
// Usage:
//   CLI::App app{"...", "ctxpar generate"};
//   LaunchFlags flags;
//   AddLaunchFlags(app, &flags);          // every field of ConfigFields(), SGLang spellings
//   app.add_option("prompt", prompt);     // the command's own options
//   if (int rc = ParseCommandLine(app, args, "generate", &status); rc >= 0) ...;
//   CTXPAR_ASSIGN_OR_RETURN(LaunchConfig raw, ToLaunchConfig(flags));
//   CTXPAR_ASSIGN_OR_RETURN(Platform platform, PlatformForLaunch(raw));
//   Resolve(raw, platform, &model_info);
//
// Flags are read as text and converted by ParseFieldText, so a bad value gets the catalog's
// CTXPAR-FLAG-* message (flag, value, valid values) instead of CLI11's.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/config.h"
#include "ctxpar/status.h"

namespace ctxpar::cli {

// What CLI11 filled in; indexed like ConfigFields(). Must outlive the parse (CLI11 keeps
// pointers into it) and must not be copied between AddLaunchFlags and ToLaunchConfig.
struct LaunchFlags {
  std::vector<std::string> text;
  std::vector<CLI::Option*> options;
  std::vector<CLI::Option*> negations;  // the --no-... switch of a tri-state, else nullptr
  const CLI::App* app = nullptr;
};

// Registers every launch flag (and its alias and negation) on `app`.
void AddLaunchFlags(CLI::App& app, LaunchFlags* out);

// The given flags as a raw snapshot; a bad value is CTXPAR-FLAG-001/002/003. For a tri-state
// the last of --x / --no-x on the command line wins, as with argparse.
Expected<LaunchConfig> ToLaunchConfig(const LaunchFlags& flags);

// Gives every single-valued option of `app` argparse's rule for a repeated option: the last
// value wins (CLI11 refuses the repeat by default). Called by ParseCommandLine and the
// benchmarks' parser, so that all commands treat duplicates alike.
void UseArgparseRepeats(CLI::App& app);

// Parses `args` (argv after the command name) with UseArgparseRepeats. Returns -1 when the
// command should go on, or the exit status to return at once: 0 after printing --help, 2 with
// `*error` set to CTXPAR-FLAG-004 (unknown argument), CTXPAR-FLAG-009 (an unknown option in a
// command that takes a positional argument: the message says how to pass a value that starts
// with '-') or CTXPAR-FLAG-005 (any other CLI11 parse error).
int ParseCommandLine(CLI::App& app, const std::vector<std::string>& args, std::string_view command,
                     Status* error);

}  // namespace ctxpar::cli
