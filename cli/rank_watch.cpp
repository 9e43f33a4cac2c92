#include "rank_watch.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "ctxpar/error_catalog.h"
#include "tcp_link.h"

namespace ctxpar::cli {
namespace {

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

// What every rank tells the others: its pid and host name.
struct Identity {
  int32_t pid = 0;
  char host[64] = {};
};

constexpr char kBye = 'B';       // a rank's last byte on its connection when it ends normally
constexpr char kBeatByte = 'H';  // a heartbeat

}  // namespace

Expected<std::unique_ptr<RankWatch>> RankWatch::Create(Communicator& world) {
  auto watch = std::make_unique<RankWatch>();
  if (world.size() == 1) return watch;
  const int n = world.size();
  Identity mine;
  mine.pid = static_cast<int32_t>(getpid());
  gethostname(mine.host, sizeof(mine.host) - 1);
  std::vector<Identity> all(static_cast<std::size_t>(n));
  CTXPAR_RETURN_IF_ERROR(world.AllGather(&mine, all.data(), sizeof(Identity), DataType::kU8));
  auto remote = [&](int r) { return std::strcmp(all[r].host, all[0].host) != 0; };
  bool any_remote = false;
  for (int r = 1; r < n; ++r) any_remote = any_remote || remote(r);
  const bool leader = world.rank() == 0;
  if (any_remote) {
    Contact contact;
    int listener = -1;
    if (leader) listener = Listen(&contact);
    CTXPAR_RETURN_IF_ERROR(world.Broadcast(&contact, sizeof(contact), DataType::kU8, 0));
    if (!leader && remote(world.rank())) {
      watch->link_ = Connect(contact, 2000);
      const int32_t me = world.rank();
      if (watch->link_ >= 0 && send(watch->link_, &me, sizeof(me), MSG_NOSIGNAL) != sizeof(me)) {
        close(watch->link_);
        watch->link_ = -1;
      }
    }
    // Every connection is made (queued on the listener) before rank 0 accepts them.
    const int32_t linked = watch->link_ >= 0 ? 1 : 0;
    std::vector<int32_t> links(static_cast<std::size_t>(n));
    CTXPAR_RETURN_IF_ERROR(world.AllGather(&linked, links.data(), 1, DataType::kI32));
    int expected = 0;
    for (int32_t l : links) expected += l;
    for (int i = 0; leader && i < expected; ++i) {
      pollfd p{listener, POLLIN, 0};
      const int fd =
          poll(&p, 1, 5000) == 1 ? accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
      int32_t r = -1;
      if (fd >= 0 && ReadWithin(fd, &r, sizeof(r), 5000) && r > 0 && r < n) {
        watch->peers_.push_back(
            {r, all[r].pid, all[r].host, fd, true, std::chrono::steady_clock::now()});
      } else if (fd >= 0) {
        close(fd);
      }
    }
    if (listener >= 0) close(listener);
    if (watch->link_ >= 0) {
      watch->beat_ = std::jthread([fd = watch->link_](std::stop_token stop) {
        while (!stop.stop_requested()) {
          [[maybe_unused]] const ssize_t sent =
              send(fd, &kBeatByte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          std::this_thread::sleep_for(RankWatch::kBeat);
        }
      });
    }
  }
  if (!leader) return watch;
  for (int r = 1; r < n; ++r) {
    if (remote(r)) continue;
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, all[r].pid, 0));
    if (fd < 0) {
      return Internal("cannot watch rank " + std::to_string(r) +
                      ": pidfd_open: " + std::strerror(errno));
    }
    watch->peers_.push_back({r, all[r].pid, all[r].host, fd, false, {}});
  }
  return watch;
}

RankWatch::~RankWatch() {
  for (const Peer& p : peers_) close(p.fd);
  if (link_ >= 0) {
    beat_ = {};  // stops and joins the heartbeats
    [[maybe_unused]] const ssize_t sent = send(link_, &kBye, 1, MSG_NOSIGNAL);
    close(link_);
  }
}

std::optional<Status> RankWatch::Wait(std::chrono::milliseconds timeout) {
  if (peers_.empty()) {
    std::this_thread::sleep_for(timeout);
    return std::nullopt;
  }
  std::vector<pollfd> fds;
  for (const Peer& p : peers_) {
    fds.push_back({p.fd, static_cast<short>(p.remote ? POLLIN | POLLRDHUP : POLLIN), 0});
  }
  const int ready = poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < fds.size(); ++i) {
    Peer& p = peers_[i];
    auto died = [&](const std::string& how) {
      return CatalogError("CTXPAR-RUN-003", {{"rank", std::to_string(p.rank)},
                                             {"pid", std::to_string(p.pid)},
                                             {"host", p.host},
                                             {"how", how}});
    };
    if (ready > 0 && fds[i].revents != 0 && !p.remote) return died(HowItEnded(p.pid, p.fd));
    if (ready > 0 && fds[i].revents != 0) {
      char bytes[64];
      const ssize_t got = recv(p.fd, bytes, sizeof(bytes), MSG_DONTWAIT);
      if (got > 0 && std::memchr(bytes, kBye, static_cast<std::size_t>(got)) != nullptr) {
        // The rank ended its run: no longer watched.
        close(p.fd);
        peers_.erase(peers_.begin() + static_cast<std::ptrdiff_t>(i));
        return std::nullopt;
      }
      if (got > 0) {
        p.heard = now;
      } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        return died("lost its connection to rank 0: the process died or its host went down");
      }
    }
    if (p.remote && now - p.heard > kSilence) {
      return CatalogError(
          "CTXPAR-RUN-004",
          {{"rank", std::to_string(p.rank)},
           {"pid", std::to_string(p.pid)},
           {"host", p.host},
           {"seconds",
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(now - p.heard).count())}});
    }
  }
  return std::nullopt;
}

}  // namespace ctxpar::cli
