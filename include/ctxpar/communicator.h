// Communicator: the collectives a group of ranks uses (docs/dcp.md), behind an interface so that
// MPI, NCCL and the in-process (threads) implementation are interchangeable. No MPI or NCCL header
// reaches this file.
//
// Contract
// - Every collective is called by every rank of the communicator, in the same order, with the
//   same counts and data type (AllToAllV: each rank's recv_counts[j] equals rank j's
//   send_counts[me]). A failed call returns a Status whose message starts with the collective's
//   name ("AllGather: ..."); the in-process implementation detects mismatched counts, data types
//   or collectives across ranks and fails on every rank; the MPI implementation turns MPI errors
//   into Status (MPI_ERRORS_RETURN).
// - Counts are in elements of `dtype`; buffers are host memory. Send and receive buffers must not
//   overlap except where a collective says "in place".
// - Byte counters: per collective, the number of calls and the bytes this rank sent to and
//   received from OTHER ranks (its own chunk is not counted). For the all-gather of `count`
//   elements of size s over n ranks: sent = received = (n-1)*count*s.
// - Thread safety: a Communicator is used by one thread at a time (one per rank for the
//   in-process implementation). Counters are read by the same thread.
// - Deadline (MPI): a rank that waits in a collective longer than CTXPAR_COLLECTIVE_TIMEOUT
//   seconds (default 300; 0 turns the deadline off; read by MakeMpiWorld, inherited by Split)
//   fails the call with CTXPAR-COMM-001 naming the ranks that did not answer (a rank stopped,
//   hung or far behind), or CTXPAR-COMM-002 when every rank answers (they wait in different
//   collectives). While it waits a rank polls MPI for the first millisecond and then sleeps
//   between polls (20 us doubling to 2 ms), so a rank left waiting does not hold a core at 100 %.
//   Where the ranks of one machine (one kernel: network namespaces and containers included)
//   outnumber its usable cores, a polling rank also yields its core after every poll
//   (sched_yield), so that the rank whose work it waits for gets the core.
//   After such a failure the call's buffers may still be written by MPI and the communicator is
//   unusable: the job must end (cli/mpi_launch.h aborts it). AllowUnboundedWait() lifts the
//   deadline for one legitimately long wait. The in-process implementation has no deadline.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ctxpar/dtype.h"
#include "ctxpar/status.h"

namespace ctxpar {

enum class ReduceOp { kSum, kMax };

enum class Collective {
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kAllToAllV,
  kAllReduce,
  kBroadcast,
  kBarrier,
  kSplit,
  kSharedWindow,  // one-sided puts into a SharedWindow and its Sync calls
};
inline constexpr int kNumCollectives = 9;
std::string_view CollectiveName(Collective collective);

struct CollectiveCounters {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

struct CommCounters {
  std::array<CollectiveCounters, kNumCollectives> per_collective{};
  const CollectiveCounters& operator[](Collective c) const {
    return per_collective[static_cast<int>(c)];
  }
  CollectiveCounters& operator[](Collective c) { return per_collective[static_cast<int>(c)]; }
  CollectiveCounters Total() const;
};

// Memory that every rank of a communicator can address directly: rank r's segment of `bytes()`
// bytes is readable and writable by every rank through Segment(r). Writes become visible to the
// other ranks after Sync(), which every rank calls (a memory fence plus a barrier).
// The window must be destroyed (by every rank) before its communicator.
class SharedWindow {
 public:
  virtual ~SharedWindow() = default;
  std::size_t bytes() const { return bytes_; }
  virtual void* Segment(int rank) = 0;
  // Counts bytes this rank wrote straight into other ranks' segments through Segment().
  void NoteSent(std::size_t bytes) { (*counters_)[Collective::kSharedWindow].bytes_sent += bytes; }
  // Counts bytes that other ranks wrote into this rank's segment.
  void NoteReceived(std::size_t bytes) {
    (*counters_)[Collective::kSharedWindow].bytes_received += bytes;
  }
  virtual Status Sync() = 0;

 protected:
  // `counters` belongs to the communicator that made the window and outlives it.
  SharedWindow(std::size_t bytes, CommCounters* counters) : bytes_(bytes), counters_(counters) {}
  void CountSync() { ++(*counters_)[Collective::kSharedWindow].calls; }

 private:
  std::size_t bytes_;
  CommCounters* counters_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // recv[size()*count] := the concatenation of every rank's send[count], in rank order.
  virtual Status AllGather(const void* send, void* recv, std::size_t count, DataType dtype) = 0;
  // send[size()*recv_count] summed elementwise over ranks; this rank receives chunk rank().
  virtual Status ReduceScatter(const void* send, void* recv, std::size_t recv_count,
                               DataType dtype) = 0;
  // send holds size() chunks of `count`; chunk j goes to rank j and lands in recv chunk rank().
  virtual Status AllToAll(const void* send, void* recv, std::size_t count, DataType dtype) = 0;
  // Per-peer counts and displacements in elements; each span has size() entries.
  virtual Status AllToAllV(const void* send, std::span<const std::size_t> send_counts,
                           std::span<const std::size_t> send_displs, void* recv,
                           std::span<const std::size_t> recv_counts,
                           std::span<const std::size_t> recv_displs, DataType dtype) = 0;
  // recv[count] := op over ranks of send[count]; send == recv is allowed (in place).
  virtual Status AllReduce(const void* send, void* recv, std::size_t count, DataType dtype,
                           ReduceOp op) = 0;
  virtual Status Broadcast(void* buffer, std::size_t count, DataType dtype, int root) = 0;
  virtual Status Barrier() = 0;
  // Collective over this communicator: the ranks that pass the same color (>= 0) form one new
  // communicator, ranked by (key, old rank). E.g. DCP groups inside a TP group:
  // Split(tp_rank / dcp_size, tp_rank).
  virtual Expected<std::unique_ptr<Communicator>> Split(int color, int key) = 0;
  // Collective: every rank gets a window with a segment of `bytes` per rank. Refused
  // (CTXPAR-DCP-007) when the ranks do not share memory (MPI ranks on different nodes).
  virtual Expected<std::unique_ptr<SharedWindow>> AllocateSharedWindow(std::size_t bytes) = 0;

  // The next collective (only the next) may wait without a deadline, still sleeping between
  // polls: a server's worker ranks wait for the next request's step plan, which can take hours.
  virtual void AllowUnboundedWait() {}

  const CommCounters& counters() const { return counters_; }
  void ResetCounters() { counters_ = CommCounters{}; }

 protected:
  // AllToAllV's argument check, shared by the implementations: every span has size() entries.
  Status CheckAllToAllVSpans(std::span<const std::size_t> send_counts,
                             std::span<const std::size_t> send_displs,
                             std::span<const std::size_t> recv_counts,
                             std::span<const std::size_t> recv_displs) const;
  void Count(Collective c, std::uint64_t sent, std::uint64_t received) {
    CollectiveCounters& k = counters_[c];
    ++k.calls;
    k.bytes_sent += sent;
    k.bytes_received += received;
  }
  CommCounters counters_;
};

// N communicators of one in-process group, sharing state: hand element r to the thread that plays
// rank r. They stay valid while any of them lives.
std::vector<std::unique_ptr<Communicator>> MakeInProcessGroup(int size);

// Runs fn(comm) on `size` threads, one per rank of a fresh in-process group, and returns the first
// failed Status (in rank order), or Ok.
Status RunInProcess(int size, const std::function<Status(Communicator&)>& fn);

// True when ctxpar was built with MPI.
bool MpiCompiledIn();

// The collective deadline CTXPAR_COLLECTIVE_TIMEOUT sets, in seconds (300 when unset, 0: none);
// CTXPAR-COMM-003 when it is not a number >= 0. MakeMpiWorld reads it; a launcher checks it
// before it starts ranks, so that a bad value is reported once.
Expected<double> CollectiveTimeoutFromEnv();

// The communicator of MPI_COMM_WORLD. Initialises MPI (MPI_THREAD_FUNNELED) when the program has
// not, and then finalises it at exit. Unavailable when ctxpar was built without MPI.
Expected<std::unique_ptr<Communicator>> MakeMpiWorld();

}  // namespace ctxpar
