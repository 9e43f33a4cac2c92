#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "command.h"

namespace ctxpar::cli {

namespace {
std::vector<Command>& Registry() {
  static std::vector<Command> commands;
  return commands;
}

int Usage(std::FILE* out) {
  std::fprintf(out,
               "ctxpar: context-parallel LLM inference\n\nusage: ctxpar COMMAND [options]\n\n");
  std::vector<Command> sorted = Commands();
  std::sort(sorted.begin(), sorted.end(),
            [](const Command& a, const Command& b) { return std::string(a.name) < b.name; });
  for (const Command& c : sorted) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n`ctxpar COMMAND --help` describes a command's options.\n");
  return out == stdout ? kExitOk : kExitInvalid;
}
}  // namespace

bool RegisterCommand(const Command& command) {
  Registry().push_back(command);
  return true;
}

const std::vector<Command>& Commands() { return Registry(); }

}  // namespace ctxpar::cli

int main(int argc, char** argv) {
  using namespace ctxpar::cli;
  if (argc < 2) return Usage(stderr);
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") return Usage(stdout);
  for (const Command& c : Commands()) {
    if (name == c.name) {
      try {
        return c.run(std::vector<std::string>(argv + 2, argv + argc));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "ctxpar %s: internal error: %s\n", c.name, e.what());
        return kExitInternal;
      }
    }
  }
  std::fprintf(stderr, "ctxpar: unknown command '%s'\n\n", name.c_str());
  return Usage(stderr);
}
