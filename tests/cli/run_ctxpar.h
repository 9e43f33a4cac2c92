// Runs a program (RunProgram: argv[0] is its path; RunCtxpar: the built ctxpar binary,
// CTXPAR_BIN) with an exact argv, no shell in between, and captures its exit status, stdout and
// stderr; `input`, when given, is its stdin. CTXPAR_PLATFORM is removed from the environment
// unless the caller sets it, so the tests do not depend on the caller's shell.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace ctxpar::testing {

struct RunResult {
  int exit_status = -1;  // -1 when the process did not exit normally (a crash)
  int signal = 0;
  std::string out;
  std::string err;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline RunResult RunProgram(std::vector<std::string> argv_store,
                            const std::vector<std::string>& env = {},
                            const std::optional<std::string>& input = std::nullopt) {
  std::vector<char*> argv;
  for (std::string& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "CTXPAR_PLATFORM=", 16) != 0) env_store.emplace_back(*e);
  }
  env_store.insert(env_store.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  char out_path[] = "/tmp/ctxpar_cli_out_XXXXXX";
  char err_path[] = "/tmp/ctxpar_cli_err_XXXXXX";
  int out_fd = mkstemp(out_path);
  int err_fd = mkstemp(err_path);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  char in_path[] = "/tmp/ctxpar_cli_in_XXXXXX";
  int in_fd = -1;
  if (input.has_value()) {
    in_fd = mkstemp(in_path);
    if (write(in_fd, input->data(), input->size()) != static_cast<ssize_t>(input->size())) {
      return {};
    }
    lseek(in_fd, 0, SEEK_SET);
    posix_spawn_file_actions_adddup2(&actions, in_fd, 0);
  }
  RunResult result;
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) == 0) {
    int status = 0;
    pid_t waited = -1;
    // A signal delivered to the test process interrupts the wait; the status is only read once
    // the child has ended.
    do {
      waited = waitpid(pid, &status, 0);
    } while (waited == -1 && errno == EINTR);
    if (waited == pid && WIFEXITED(status)) result.exit_status = WEXITSTATUS(status);
    if (waited == pid && WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  close(out_fd);
  close(err_fd);
  if (in_fd >= 0) {
    close(in_fd);
    unlink(in_path);
  }
  result.out = ReadAll(out_path);
  result.err = ReadAll(err_path);
  unlink(out_path);
  unlink(err_path);
  return result;
}

inline RunResult RunCtxpar(const std::vector<std::string>& args,
                           const std::vector<std::string>& env = {},
                           const std::optional<std::string>& input = std::nullopt) {
  std::vector<std::string> argv = {CTXPAR_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(std::move(argv), env, input);
}

}  // namespace ctxpar::testing
