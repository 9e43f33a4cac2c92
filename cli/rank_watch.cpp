#include "rank_watch.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "ctxpar/error_catalog.h"

namespace ctxpar::cli {
namespace {

int32_t HostHash() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return static_cast<int32_t>(std::hash<std::string>{}(name)&0x7fffffff);
}

// Linux 6.15's PIDFD_GET_INFO (linux/pidfd.h; Debian 12's headers predate it): the exit status
// of a reaped process, to any holder of its pidfd. Version 0 of the struct, 64 bytes.
struct PidfdInfo {
  uint64_t mask;
  uint64_t cgroupid;
  uint32_t ids[11];
  int32_t exit_code;
};
constexpr uint64_t kPidfdInfoExit = 1u << 3;
constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfo);

std::string Describe(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) +
           (abbrev != nullptr ? std::string(" (SIG") + abbrev + ")" : "");
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// The exit status of a zombie, from /proc/PID/stat (field 52, exit_code).
std::optional<int> ZombieStatus(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  // Fields from the 3rd (state) on; exit_code is the 52nd.
  if (fields.size() < 50 || fields[0] != "Z") return std::nullopt;
  return std::stoi(fields[49]);
}

// How a dead rank ended: read from its zombie, or once mpirun has collected it, from its pidfd;
// mpirun and this thread race for it, so both are tried for a moment.
std::string HowItEnded(int pid, int pidfd) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (std::optional<int> status = ZombieStatus(pid)) return Describe(*status);
    PidfdInfo info{};
    info.mask = kPidfdInfoExit;
    if (ioctl(pidfd, kPidfdGetInfo, &info) == 0 && (info.mask & kPidfdInfoExit) != 0) {
      return Describe(info.exit_code);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "exited (its status went to mpirun first)";
}

}  // namespace

Expected<std::unique_ptr<RankWatch>> RankWatch::Create(Communicator& world) {
  auto watch = std::make_unique<RankWatch>();
  if (world.size() == 1) return watch;
  const int32_t mine[2] = {static_cast<int32_t>(getpid()), HostHash()};
  std::vector<int32_t> all(2 * static_cast<std::size_t>(world.size()));
  CTXPAR_RETURN_IF_ERROR(world.AllGather(mine, all.data(), 2, DataType::kI32));
  if (world.rank() != 0) return watch;
  for (int r = 1; r < world.size(); ++r) {
    if (all[2 * r + 1] != mine[1]) continue;  // another host: mpirun's to watch
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, all[2 * r], 0));
    if (fd < 0) {
      return Internal("cannot watch rank " + std::to_string(r) +
                      ": pidfd_open: " + std::strerror(errno));
    }
    watch->peers_.push_back({r, all[2 * r], fd});
  }
  return watch;
}

RankWatch::~RankWatch() {
  for (const Peer& p : peers_) close(p.fd);
}

std::optional<Status> RankWatch::Wait(std::chrono::milliseconds timeout) {
  if (peers_.empty()) {
    std::this_thread::sleep_for(timeout);
    return std::nullopt;
  }
  std::vector<pollfd> fds;
  for (const Peer& p : peers_) fds.push_back({p.fd, POLLIN, 0});
  if (poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    const Peer& p = peers_[i];
    return CatalogError("CTXPAR-RUN-003", {{"rank", std::to_string(p.rank)},
                                           {"pid", std::to_string(p.pid)},
                                           {"how", HowItEnded(p.pid, p.fd)}});
  }
  return std::nullopt;
}

}  // namespace ctxpar::cli
