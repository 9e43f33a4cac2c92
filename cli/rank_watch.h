// RankWatch: rank 0 of `ctxpar serve` and `ctxpar generate` watching the other ranks, so that a
// rank that dies (kill -9, the out-of-memory killer, a crash, its host going down) is noticed at
// once and named with its host, rather than left to mpirun, which ends the job and cuts every
// open stream.
//
// Every rank calls Create (collective: the ranks exchange their pids and host names).
// - Ranks on rank 0's host: rank 0 holds their pidfds, and reads how one ended from /proc while
//   it is a zombie, or once its parent (mpirun) has collected it, from its pidfd (Linux 6.15's
//   PIDFD_GET_INFO; on older kernels the status is then said to be unknown).
// - Ranks on other hosts: each holds a TCP connection to rank 0 (to the first of rank 0's IPv4
//   addresses that answers), which its kernel closes when the process dies for any reason; rank
//   0 reads that close. A rank that ends normally says so first (a byte before it closes), so
//   the end of a run is no death. A thread of the rank also sends a byte every kBeat, so that
//   a link taken down or a stalled host, which close nothing, show as silence. A rank that
//   cannot connect is not watched (mpirun still ends the job when it dies).
// Wait returns the first death as CTXPAR-RUN-003 naming the rank, its pid and its host, or a
// silence of kSilence as CTXPAR-RUN-004.
//
// Thread safety: Wait from one thread; Create and destruction from the rank's main thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar::cli {

class RankWatch {
 public:
  static constexpr std::chrono::milliseconds kBeat{500};
  static constexpr std::chrono::seconds kSilence{5};

  static Expected<std::unique_ptr<RankWatch>> Create(Communicator& world);
  ~RankWatch();
  // Waits up to `timeout`; the death of a watched rank, else nullopt.
  std::optional<Status> Wait(std::chrono::milliseconds timeout);

 private:
  struct Peer {
    int rank = 0;
    int pid = 0;
    std::string host;
    int fd = -1;          // a pidfd (same host) or the rank's connection (another host)
    bool remote = false;  // fd is a connection
    std::chrono::steady_clock::time_point heard;  // remote: its last byte
  };
  std::vector<Peer> peers_;
  int link_ = -1;      // a rank on another host than rank 0: its connection to rank 0
  std::jthread beat_;  // sends its heartbeats
};

}  // namespace ctxpar::cli
