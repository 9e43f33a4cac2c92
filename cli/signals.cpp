#include "signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <string>

#include "ctxpar/error_catalog.h"

namespace ctxpar::cli {
namespace {

std::atomic<int> g_stop{0};
std::atomic<bool> g_quiet{false};

// Async-signal-safe: only atomics, write(2) and _exit.
void OnSignal(int sig) {
  const int as = sig == SIGUSR1 ? SIGINT : sig == SIGUSR2 ? SIGTERM : sig;
  int none = 0;
  if (g_stop.compare_exchange_strong(none, as)) return;
  if (sig == SIGUSR1 || sig == SIGUSR2) return;  // the launcher forwards one request only
  if (!g_quiet.load()) {
    static const char kMessage[] = "ctxpar: interrupted again, stopping at once\n";
    [[maybe_unused]] ssize_t w = write(STDOUT_FILENO, "\n", 1);
    w = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  }
  _exit(128 + as);
}

const char* SignalName(int sig) { return sig == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace

void InstallStopHandlers(bool in_mpi_job) {
  g_quiet.store(in_mpi_job);
  struct sigaction sa {};
  sa.sa_handler = &OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI's and the kernels' system calls go on
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaction(sig, &sa, nullptr);
}

int StopRequested() { return g_stop.load(); }

Expected<int> AgreeOnStop(Communicator& world) {
  int32_t stop = StopRequested();
  CTXPAR_RETURN_IF_ERROR(world.AllReduce(&stop, &stop, 1, DataType::kI32, ReduceOp::kMax));
  return static_cast<int>(stop);
}

Status Interrupted(int signal, int tokens) {
  return CatalogError("CTXPAR-RUN-001",
                      {{"signal", SignalName(signal)}, {"tokens", std::to_string(tokens)}});
}

int InterruptedExitStatus(const Status& status) {
  if (status.error_id() != "CTXPAR-RUN-001") return 0;
  return 128 + (status.message().find("SIGTERM") != std::string::npos ? SIGTERM : SIGINT);
}

}  // namespace ctxpar::cli
