// RankWatch: rank 0 of `ctxpar serve` watching the other ranks of its machine, so that a rank
// that dies (kill -9, the out-of-memory killer, a crash) is noticed at once and named, rather
// than left to mpirun, which ends the job and cuts every open stream.
//
// Every rank calls Create (collective: the ranks exchange their pids and hosts); rank 0 gets
// pidfds of the ranks on its host. Wait sleeps up to a timeout and returns the first death as
// CTXPAR-RUN-003 with the rank's signal or exit status, read from /proc while the dead rank is a
// zombie, or once its parent (mpirun) has collected it, from its pidfd (Linux 6.15's
// PIDFD_GET_INFO; on older kernels the status is then said to be unknown).
//
// Thread safety: Wait from one thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar::cli {

class RankWatch {
 public:
  static Expected<std::unique_ptr<RankWatch>> Create(Communicator& world);
  ~RankWatch();
  // Waits up to `timeout`; the death of a watched rank, else nullopt.
  std::optional<Status> Wait(std::chrono::milliseconds timeout);

 private:
  struct Peer {
    int rank = 0;
    int pid = 0;
    int fd = -1;
  };
  std::vector<Peer> peers_;
};

}  // namespace ctxpar::cli
