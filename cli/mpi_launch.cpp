#include "mpi_launch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "command.h"
#include "ctxpar/error_catalog.h"
#include "error_report.h"
#include "tcp_link.h"

namespace ctxpar::cli {
namespace {

std::atomic<int> g_signals{0};
std::atomic<int> g_first_signal{0};

void CountSignal(int sig) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  g_signals.fetch_add(1);
}

std::vector<std::string> SplitBlanks(const char* text) {
  std::vector<std::string> out;
  if (text == nullptr) return out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// The ranks named in a CTXPAR-COMM-001 message ("rank 1", "ranks 1, 3"), read back through the
// catalog's own matcher.
std::vector<int> SilentRanks(const Status& status) {
  std::vector<int> ranks;
  const std::optional<CatalogMatch> m = MatchCatalogMessage(status.message());
  if (!m) return ranks;
  for (const auto& [name, value] : m->values) {
    if (name != "silent") continue;
    for (size_t i = 0; i < value.size();) {
      if (value[i] < '0' || value[i] > '9') {
        ++i;
        continue;
      }
      size_t end = i;
      while (end < value.size() && value[end] >= '0' && value[end] <= '9') ++end;
      ranks.push_back(std::atoi(value.substr(i, end - i).c_str()));
      i = end;
    }
  }
  return ranks;
}

// The processes whose parent is `parent` (mpirun's local ranks), from /proc.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: comm may hold blanks, so read after its closing parenthesis.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

// Rank 0's connection to the launcher (RunUnderMpirun), held until the process ends: its close
// without kFinished first tells the launcher that rank 0 has ended abnormally, and kUnreachable
// before the close that mpirun cannot end the job (TellLauncherWhyRank0Ends).
constexpr char kFinished = 'E';
constexpr char kUnreachable = 'U';
int g_launcher_link = -1;

void ConnectToLauncher() {
  const char* text = std::getenv("CTXPAR_LAUNCHER");
  if (text == nullptr || g_launcher_link >= 0) return;
  if (std::optional<Contact> c = ParseContact(text)) g_launcher_link = Connect(*c, 2000);
}

[[noreturn]] void ReportTimeoutAndExit(int rank, const Status& status) {
  const std::vector<int> silent = SilentRanks(status);
  int reporter = 0;
  while (std::find(silent.begin(), silent.end(), reporter) != silent.end()) ++reporter;
  if (rank == reporter) {
    std::_Exit(ReportError(status));
  }
  // The reporter's exit ends the job; wait for it rather than race its message.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::_Exit(ExitStatusFor(status));
}

}  // namespace

void TellLauncherWhyRank0Ends(const Status& fault) {
  if (g_launcher_link >= 0 && fault.error_id() == "CTXPAR-RUN-004") {
    [[maybe_unused]] const ssize_t sent = send(g_launcher_link, &kUnreachable, 1, MSG_NOSIGNAL);
  }
}

bool UnderMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

int RunUnderMpirun(std::string_view command, int n, const std::vector<std::string>& args) {
  const char* launcher_env = std::getenv("CTXPAR_MPIRUN");
  const std::string launcher =
      launcher_env != nullptr && *launcher_env != '\0' ? launcher_env : "mpirun";
  std::vector<char> self(4096);
  const ssize_t len = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (len <= 0) {
    return ReportError(Internal("cannot find this program's own executable to start " +
                                std::to_string(n) + " ranks"),
                       "ctxpar " + std::string(command) + ": ");
  }
  std::vector<std::string> argv = {launcher, "--quiet"};
  const std::vector<std::string> user = SplitBlanks(std::getenv("CTXPAR_MPIRUN_ARGS"));
  // mpirun binds up to two ranks to one core each, and each rank then runs all its --threads
  // there; unbound, the ranks' threads share the cores, which the default --threads divides. A
  // binding the user asks for (--bind-to, or cores per rank with PE=) stands.
  auto binds = [](const std::string& a) {
    return a.find("bind-to") != std::string::npos || a.find("PE=") != std::string::npos ||
           a.find("pe=") != std::string::npos;
  };
  if (std::none_of(user.begin(), user.end(), binds)) argv.insert(argv.end(), {"--bind-to", "none"});
  argv.insert(argv.end(), user.begin(), user.end());
  // Rank 0 holds a connection to this process (rank_watch.h), whose close says it has ended.
  Contact contact;
  const int listener = Listen(&contact);
  if (listener >= 0) {
    setenv("CTXPAR_LAUNCHER", ContactText(contact).c_str(), 1);
    argv.insert(argv.end(), {"-x", "CTXPAR_LAUNCHER"});
  }
  argv.insert(argv.end(),
              {"-np", std::to_string(n), std::string(self.data(), len), std::string(command)});
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  struct sigaction count {};
  count.sa_handler = &CountSignal;
  sigemptyset(&count.sa_mask);
  struct sigaction old_int {};
  struct sigaction old_term {};
  sigaction(SIGINT, &count, &old_int);
  sigaction(SIGTERM, &count, &old_term);
  std::fflush(nullptr);
  int exec_error[2];
  if (pipe2(exec_error, O_CLOEXEC) != 0) return ReportError(Internal("pipe2 failed"));
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    // The job ends with this process even when it is killed outright (SIGKILL cannot be
    // forwarded): mpirun takes SIGTERM as its cue to stop the ranks.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    execvp(cargv[0], cargv.data());
    const int err = errno;
    [[maybe_unused]] ssize_t w = write(exec_error[1], &err, sizeof(err));
    _exit(127);
  }
  close(exec_error[1]);
  int err = 0;
  const bool exec_failed = child > 0 && read(exec_error[0], &err, sizeof(err)) == sizeof(err);
  close(exec_error[0]);
  if (child < 0 || exec_failed) {
    if (child > 0) waitpid(child, nullptr, 0);
    if (listener >= 0) close(listener);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    return ReportError(CatalogError("CTXPAR-RUN-002", {{"launcher", PyRepr(launcher)},
                                                       {"reason", std::strerror(err)},
                                                       {"ranks", std::to_string(n)}}));
  }
  // Polled rather than blocked in waitpid, so that no signal can slip in unnoticed between a
  // check and the wait. The first signal becomes the ranks' stop request; after a second one
  // the ranks get kSecondSignalGrace to finish that stop (it takes about one token) before they
  // are killed, on which mpirun ends the job and cleans up.
  constexpr auto kSecondSignalGrace = std::chrono::seconds(1);
  // Once rank 0 has ended without finishing (a rank lost, a collective timed out), mpirun ends
  // the job within a moment, unless a daemon it must stop is on a host it no longer reaches (a
  // link down): then it would wait for it for good. When rank 0 has said so, it gets no grace.
  constexpr auto kJobEndGrace = std::chrono::seconds(3);
  int forwarded = 0;
  std::optional<std::chrono::steady_clock::time_point> second_at, rank0_ended;
  int rank0 = -1;
  bool rank0_finished = false, unreachable = false, stopped_mpirun = false;
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (listener >= 0 && rank0 < 0) {
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, 0) == 1) rank0 = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    }
    if (rank0 >= 0 && !rank0_ended && !rank0_finished) {
      char byte = 0;
      const ssize_t got = recv(rank0, &byte, 1, MSG_DONTWAIT);
      if (got == 1 && byte == kFinished) rank0_finished = true;
      if (got == 1 && byte == kUnreachable) unreachable = true;
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) rank0_ended = now;
    }
    if (rank0_ended && !stopped_mpirun && (unreachable || now - *rank0_ended >= kJobEndGrace)) {
      std::fprintf(stderr,
                   "ctxpar %s: rank 0 has ended, but mpirun is still waiting for ranks it "
                   "cannot reach: stopping it\n",
                   std::string(command).c_str());
      // Its whole tree: the local ranks, and the daemons it started (through ssh or a launch
      // agent) that still hold this command's output.
      std::vector<pid_t> tree = {child};
      for (std::size_t i = 0; i < tree.size(); ++i) {
        for (pid_t c : ChildrenOf(tree[i])) tree.push_back(c);
      }
      // Parents first: a launch agent's shell that saw its daemon killed would say "Killed".
      for (pid_t p : tree) kill(p, SIGKILL);
      stopped_mpirun = true;
    }
    const int seen = g_signals.load();
    if (forwarded == 0 && seen >= 1) {
      kill(child, g_first_signal.load() == SIGTERM ? SIGUSR2 : SIGUSR1);
      forwarded = 1;
    }
    if (forwarded == 1 && seen >= 2) {
      if (!second_at) second_at = now;
      if (now - *second_at >= kSecondSignalGrace) {
        for (pid_t rank : ChildrenOf(child)) kill(rank, SIGKILL);
        forwarded = 2;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (rank0 >= 0) close(rank0);
  if (listener >= 0) close(listener);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (stopped_mpirun) return kExitInternal;
  const int first = g_first_signal.load();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (forwarded >= 2 && code != 128 + first) {
    // The ranks were killed before rank 0 reported the interruption.
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "ctxpar %s: interrupted twice by %s: the ranks were stopped at once\n",
                 std::string(command).c_str(), first == SIGTERM ? "SIGTERM" : "SIGINT");
    return 128 + first;
  }
  return code;
}

int ReportBeforeWorld(const Status& status) {
  if (UnderMpi()) {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
      const char* rank = std::getenv(v);
      if (rank != nullptr) {
        if (std::strcmp(rank, "0") != 0) return kExitOk;
        break;
      }
    }
  }
  return ReportError(status);
}

int RunOnRanks(int tp, const std::function<Status(Communicator& world)>& run) {
  std::unique_ptr<Communicator> world;
  if (UnderMpi()) {
    Expected<std::unique_ptr<Communicator>> mpi = MakeMpiWorld();
    if (!mpi.ok()) return ReportBeforeWorld(mpi.status());
    world = std::move(*mpi);
    if (world->rank() == 0) ConnectToLauncher();
    if (world->size() != tp) {
      return FinishRank(*world, InvalidArgument("the MPI job has " + std::to_string(world->size()) +
                                                " ranks, but tp_size is " + std::to_string(tp)));
    }
  } else {
    world = std::move(MakeInProcessGroup(1)[0]);
  }
  return FinishRank(*world, run(*world));
}

int FinishRank(Communicator& world, const Status& status) {
  if (status.error_id().starts_with("CTXPAR-COMM-")) ReportTimeoutAndExit(world.rank(), status);
  // The lowest failing rank (the maximum of size - rank), then its code, message and ID.
  int32_t lowest = status.ok() ? 0 : world.size() - world.rank();
  Status agreed = world.AllReduce(&lowest, &lowest, 1, DataType::kI32, ReduceOp::kMax);
  const int first = world.size() - lowest;
  if (agreed.ok() && first < world.size()) {
    const bool mine = first == world.rank();
    int32_t sizes[3] = {mine ? static_cast<int32_t>(status.code()) : 0,
                        mine ? static_cast<int32_t>(status.message().size()) : 0,
                        mine ? static_cast<int32_t>(status.error_id().size()) : 0};
    std::string text;
    agreed = world.Broadcast(sizes, 3, DataType::kI32, first);
    if (agreed.ok()) {
      text = mine ? status.message() + status.error_id() : std::string(sizes[1] + sizes[2], '\0');
      agreed = world.Broadcast(text.data(), text.size(), DataType::kU8, first);
    }
    if (agreed.ok()) {
      agreed = Status(static_cast<StatusCode>(sizes[0]), text.substr(0, sizes[1]),
                      text.substr(sizes[1]));
    }
  }
  if (!agreed.ok() && agreed.error_id().starts_with("CTXPAR-COMM-")) {
    // The agreement itself timed out: this rank's own error is the one it can tell.
    ReportTimeoutAndExit(world.rank(), status.ok() ? agreed : status);
  }
  // Every rank agreed: mpirun ends the job as soon as rank 0 returns.
  if (g_launcher_link >= 0) {
    [[maybe_unused]] const ssize_t sent = send(g_launcher_link, &kFinished, 1, MSG_NOSIGNAL);
  }
  if (world.rank() != 0 || agreed.ok()) return kExitOk;
  return ReportError(agreed);
}

}  // namespace ctxpar::cli
