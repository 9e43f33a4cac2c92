// The MPI communicator (OpenMPI): collectives map one to one onto MPI's nonblocking ones, waited
// for with a deadline (communicator.h); errors return (the communicator is set to
// MPI_ERRORS_RETURN) and become Status naming the collective.
#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/thread_pool.h"
#include "reduce.h"

namespace ctxpar {
namespace {

// The tag of the two-rank exchanges (Exchange); nothing else sends point to point on a
// communicator.
constexpr int kExchangeTag = 1;
// Liveness probes after a timeout, on the communicator's private duplicate.
constexpr int kPingTag = 2;
constexpr int kPongTag = 3;

using Clock = std::chrono::steady_clock;
// A waiting rank polls without pause this long (a decode step's collectives complete within it),
// then sleeps between polls, from kFirstSleep doubling to kMaxSleep.
constexpr auto kSpin = std::chrono::milliseconds(1);
constexpr auto kFirstSleep = std::chrono::microseconds(20);
constexpr auto kMaxSleep = std::chrono::milliseconds(2);
// How long a timed-out rank waits for the other ranks to answer its probe.
constexpr auto kAnswerWindow = std::chrono::seconds(2);

MPI_Datatype ToMpi(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
      return MPI_FLOAT;
    case DataType::kBF16:
    case DataType::kF16:
      return MPI_UINT16_T;
    case DataType::kF64:
      return MPI_DOUBLE;
    case DataType::kI32:
      return MPI_INT32_T;
    case DataType::kU8:
    case DataType::kF8E4M3:
    case DataType::kF8E5M2:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

// MPI has no bf16, fp16 or fp8: their sums and maxima are user operations on their storage.
template <DataType kType, ReduceOp kOp>
void UserOp(void* in, void* inout, int* len, MPI_Datatype*) {
  comm_internal::ReduceInto(inout, in, static_cast<std::size_t>(*len), kType, kOp);
}

MPI_Op ToMpiOp(DataType dtype, ReduceOp op) {
  constexpr DataType kUserTypes[] = {DataType::kBF16, DataType::kF16, DataType::kF8E4M3,
                                     DataType::kF8E5M2};
  int t = 0;
  while (t < 4 && kUserTypes[t] != dtype) ++t;
  if (t == 4) return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
  // [kUserTypes][sum, max]
  static MPI_Op ops[4][2];
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Op_create(&UserOp<DataType::kBF16, ReduceOp::kSum>, 1, &ops[0][0]);
    MPI_Op_create(&UserOp<DataType::kBF16, ReduceOp::kMax>, 1, &ops[0][1]);
    MPI_Op_create(&UserOp<DataType::kF16, ReduceOp::kSum>, 1, &ops[1][0]);
    MPI_Op_create(&UserOp<DataType::kF16, ReduceOp::kMax>, 1, &ops[1][1]);
    MPI_Op_create(&UserOp<DataType::kF8E4M3, ReduceOp::kSum>, 1, &ops[2][0]);
    MPI_Op_create(&UserOp<DataType::kF8E4M3, ReduceOp::kMax>, 1, &ops[2][1]);
    MPI_Op_create(&UserOp<DataType::kF8E5M2, ReduceOp::kSum>, 1, &ops[3][0]);
    MPI_Op_create(&UserOp<DataType::kF8E5M2, ReduceOp::kMax>, 1, &ops[3][1]);
  });
  return ops[t][op == ReduceOp::kMax];
}

Status MpiError(std::string_view collective, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Unavailable(fmt::format("{}: MPI error {}: {}", collective, code, std::string(text, len)));
}

Expected<int> ToInt(std::string_view collective, std::size_t count) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    return InvalidArgument(
        fmt::format("{}: count {} exceeds MPI's int limit {}", collective, count, INT_MAX));
  }
  return static_cast<int>(count);
}

#define CTXPAR_MPI_CALL(name, call)                             \
  do {                                                          \
    const int mpi_rc_ = (call);                                 \
    if (mpi_rc_ != MPI_SUCCESS) return MpiError(name, mpi_rc_); \
  } while (0)

class MpiCommunicator;

// A duplicate of MPI_COMM_WORLD for the liveness probes of timed-out collectives, shared by
// every communicator of the process, so that a rank waiting in any of them answers. It lives
// until MPI_Finalize: a probe may still be in flight to a rank that never receives it, and
// freeing the channel would let a later communicator reuse its context id and receive the stale
// message as its own (Open MPI then holds that communicator's real traffic out of sequence).
struct ProbeChannel {
  MPI_Comm comm = MPI_COMM_NULL;
  // The machine runs more ranks than it has cores (MachineOversubscribed): a waiting rank
  // yields its core between polls instead of spinning.
  bool yield = false;
  // Each timeout's pings carry a new serial, which the pongs echo: an answer to an earlier
  // timeout's ping does not vouch for a rank now.
  int serial = 0;
  // The payloads of sends still possibly in flight (freed requests): they must outlive the send.
  std::deque<int> payloads;
  const int* Payload(int value) { return &payloads.emplace_back(value); }
};

class MpiWindow final : public SharedWindow {
 public:
  // `owner` made the window and outlives it (communicator.h); its deadline applies to Sync.
  MpiWindow(MpiCommunicator* owner, MPI_Comm node, MPI_Win win, std::size_t bytes,
            CommCounters* counters)
      : SharedWindow(bytes, counters), owner_(owner), node_(node), win_(win) {
    int n = 0;
    MPI_Comm_size(node_, &n);
    for (int r = 0; r < n; ++r) {
      MPI_Aint size = 0;
      int disp = 0;
      void* base = nullptr;
      MPI_Win_shared_query(win_, r, &size, &disp, &base);
      segments_.push_back(base);
    }
  }
  ~MpiWindow() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
    MPI_Comm_free(&node_);
  }
  void* Segment(int rank) override { return segments_[rank]; }
  Status Sync() override;

 private:
  MpiCommunicator* owner_;
  MPI_Comm node_;
  MPI_Win win_;
  std::vector<void*> segments_;
};

class MpiCommunicator final : public Communicator {
  friend class MpiWindow;

 public:
  // Takes `comm`; `timeout` <= 0: no deadline. `probes` is the process's probe channel.
  MpiCommunicator(MPI_Comm comm, double timeout_seconds, ProbeChannel* probes)
      : comm_(comm), timeout_seconds_(timeout_seconds), probes_(probes) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // This communicator's ranks as world ranks, which the probes address and errors name.
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(comm_, &mine);
    MPI_Comm_group(probes_->comm, &world);
    std::vector<int> local(size_);
    for (int r = 0; r < size_; ++r) local[r] = r;
    world_ranks_.resize(size_);
    MPI_Group_translate_ranks(mine, size_, local.data(), world, world_ranks_.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
  }
  ~MpiCommunicator() override {
    // After a timeout MPI still holds the abandoned call's request on comm_ and may still
    // receive into scratch_: freeing either would crash the progress engine or corrupt the heap,
    // so both are left to the job's end (the scratch buffer deliberately leaks).
    if (abandoned_) {
      new std::vector<char>(std::move(scratch_));
      return;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  void AllowUnboundedWait() override { unbounded_next_ = true; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllGather(const void* send, void* recv, std::size_t count, DataType dtype) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, ToInt("AllGather", count));
    const std::size_t bytes_per_rank = count * DataTypeSize(dtype);
    if (size_ == 2) {
      const int peer = 1 - rank_;
      std::memmove(static_cast<char*>(recv) + rank_ * bytes_per_rank, send, bytes_per_rank);
      CTXPAR_RETURN_IF_ERROR(Exchange("AllGather", send, n,
                                      static_cast<char*>(recv) + peer * bytes_per_rank, n, dtype));
    } else {
      MPI_Request r = MPI_REQUEST_NULL;
      CTXPAR_MPI_CALL("AllGather",
                      MPI_Iallgather(send, n, ToMpi(dtype), recv, n, ToMpi(dtype), comm_, &r));
      CTXPAR_RETURN_IF_ERROR(Wait("AllGather", &r, 1));
    }
    const std::uint64_t bytes = (size_ - 1) * count * DataTypeSize(dtype);
    Count(Collective::kAllGather, bytes, bytes);
    return Status::Ok();
  }

  Status ReduceScatter(const void* send, void* recv, std::size_t recv_count,
                       DataType dtype) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, ToInt("ReduceScatter", recv_count));
    // MPI_Reduce_scatter rather than MPI_Reduce_scatter_block: OpenMPI 4.1's default algorithm
    // for the block variant took milliseconds for 128 KiB on one node, the general one about a
    // tenth of that (docs/perf-combine.md).
    if (size_ == 2) {
      // Between two ranks: send the peer its chunk, receive ours, add. A C micro-benchmark at
      // 4160 bytes per chunk took 2.8 us this way against 4.4 us for MPI_Reduce_scatter and 5.2
      // us for MPI_Ireduce_scatter (best of 40 trials, load 8).
      const std::size_t chunk = recv_count * DataTypeSize(dtype);
      const int peer = 1 - rank_;
      scratch_.resize(chunk);
      CTXPAR_RETURN_IF_ERROR(Exchange("ReduceScatter",
                                      static_cast<const char*>(send) + peer * chunk, n,
                                      scratch_.data(), n, dtype));
      if (recv != static_cast<const char*>(send) + rank_ * chunk) {
        std::memmove(recv, static_cast<const char*>(send) + rank_ * chunk, chunk);
      }
      comm_internal::ReduceInto(recv, scratch_.data(), recv_count, dtype, ReduceOp::kSum);
    } else {
      counts_.assign(size_, n);
      MPI_Request r = MPI_REQUEST_NULL;
      CTXPAR_MPI_CALL("ReduceScatter",
                      MPI_Ireduce_scatter(send, recv, counts_.data(), ToMpi(dtype),
                                          ToMpiOp(dtype, ReduceOp::kSum), comm_, &r));
      CTXPAR_RETURN_IF_ERROR(Wait("ReduceScatter", &r, 1));
    }
    const std::uint64_t bytes = (size_ - 1) * recv_count * DataTypeSize(dtype);
    Count(Collective::kReduceScatter, bytes, bytes);
    return Status::Ok();
  }

  Status AllToAll(const void* send, void* recv, std::size_t count, DataType dtype) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, ToInt("AllToAll", count));
    MPI_Request r = MPI_REQUEST_NULL;
    CTXPAR_MPI_CALL("AllToAll",
                    MPI_Ialltoall(send, n, ToMpi(dtype), recv, n, ToMpi(dtype), comm_, &r));
    CTXPAR_RETURN_IF_ERROR(Wait("AllToAll", &r, 1));
    const std::uint64_t bytes = (size_ - 1) * count * DataTypeSize(dtype);
    Count(Collective::kAllToAll, bytes, bytes);
    return Status::Ok();
  }

  Status AllToAllV(const void* send, std::span<const std::size_t> send_counts,
                   std::span<const std::size_t> send_displs, void* recv,
                   std::span<const std::size_t> recv_counts,
                   std::span<const std::size_t> recv_displs, DataType dtype) override {
    const std::size_t n = static_cast<std::size_t>(size_);
    CTXPAR_RETURN_IF_ERROR(CheckAllToAllVSpans(send_counts, send_displs, recv_counts, recv_displs));
    // Member scratch: at decode sizes an allocation per call is a measurable part of the call.
    std::vector<int>& sc = counts_;
    sc.resize(n);
    sd_.resize(n);
    rc_.resize(n);
    rd_.resize(n);
    std::vector<int>&sd = sd_, &rc = rc_, &rd = rd_;
    std::uint64_t sent = 0, received = 0;
    for (std::size_t j = 0; j < n; ++j) {
      CTXPAR_ASSIGN_OR_RETURN(sc[j], ToInt("AllToAllV", send_counts[j]));
      CTXPAR_ASSIGN_OR_RETURN(sd[j], ToInt("AllToAllV", send_displs[j]));
      CTXPAR_ASSIGN_OR_RETURN(rc[j], ToInt("AllToAllV", recv_counts[j]));
      CTXPAR_ASSIGN_OR_RETURN(rd[j], ToInt("AllToAllV", recv_displs[j]));
      if (static_cast<int>(j) != rank_) {
        sent += send_counts[j] * DataTypeSize(dtype);
        received += recv_counts[j] * DataTypeSize(dtype);
      }
    }
    if (n == 2) {
      // Between two ranks the exchange is one send and one receive (a2a at GQA batch 1:
      // 0.65-0.69 of ag_rs against 0.69-0.71 with MPI_Alltoallv, docs/perf-combine.md).
      const int peer = 1 - rank_;
      const std::size_t elem = DataTypeSize(dtype);
      if (sc[rank_] != rc[rank_]) {
        return InvalidArgument(
            fmt::format("AllToAllV: rank {} sends itself {} elements but expects {}", rank_,
                        sc[rank_], rc[rank_]));
      }
      std::memcpy(static_cast<char*>(recv) + rd[rank_] * elem,
                  static_cast<const char*>(send) + sd[rank_] * elem, sc[rank_] * elem);
      CTXPAR_RETURN_IF_ERROR(Exchange("AllToAllV", static_cast<const char*>(send) + sd[peer] * elem,
                                      sc[peer], static_cast<char*>(recv) + rd[peer] * elem,
                                      rc[peer], dtype));
    } else {
      MPI_Request r = MPI_REQUEST_NULL;
      CTXPAR_MPI_CALL("AllToAllV", MPI_Ialltoallv(send, sc.data(), sd.data(), ToMpi(dtype), recv,
                                                  rc.data(), rd.data(), ToMpi(dtype), comm_, &r));
      CTXPAR_RETURN_IF_ERROR(Wait("AllToAllV", &r, 1));
    }
    Count(Collective::kAllToAllV, sent, received);
    return Status::Ok();
  }

  Status AllReduce(const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, ToInt("AllReduce", count));
    if (size_ == 2) {
      // Exchange and combine: both ranks compute op(a, b) of the same two operands, and sum and
      // max are commutative, so they hold the same bits.
      const std::size_t bytes = count * DataTypeSize(dtype);
      scratch_.resize(bytes);
      if (recv != send) std::memcpy(recv, send, bytes);
      CTXPAR_RETURN_IF_ERROR(Exchange("AllReduce", recv, n, scratch_.data(), n, dtype));
      comm_internal::ReduceInto(recv, scratch_.data(), count, dtype, op);
    } else {
      MPI_Request r = MPI_REQUEST_NULL;
      CTXPAR_MPI_CALL("AllReduce", MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, n,
                                                  ToMpi(dtype), ToMpiOp(dtype, op), comm_, &r));
      CTXPAR_RETURN_IF_ERROR(Wait("AllReduce", &r, 1));
    }
    const std::uint64_t bytes = (size_ - 1) * count * DataTypeSize(dtype);
    Count(Collective::kAllReduce, bytes, bytes);
    return Status::Ok();
  }

  Status Broadcast(void* buffer, std::size_t count, DataType dtype, int root) override {
    if (root < 0 || root >= size_) {
      return InvalidArgument(
          fmt::format("Broadcast: root {} is not a rank of a group of {}", root, size_));
    }
    CTXPAR_ASSIGN_OR_RETURN(const int n, ToInt("Broadcast", count));
    MPI_Request r = MPI_REQUEST_NULL;
    CTXPAR_MPI_CALL("Broadcast", MPI_Ibcast(buffer, n, ToMpi(dtype), root, comm_, &r));
    CTXPAR_RETURN_IF_ERROR(Wait("Broadcast", &r, 1));
    const std::uint64_t bytes = count * DataTypeSize(dtype);
    Count(Collective::kBroadcast, rank_ == root ? (size_ - 1) * bytes : 0,
          rank_ == root ? 0 : bytes);
    return Status::Ok();
  }

  Status Barrier() override {
    CTXPAR_RETURN_IF_ERROR(BarrierWait("Barrier", comm_));
    Count(Collective::kBarrier, 0, 0);
    return Status::Ok();
  }

  Expected<std::unique_ptr<Communicator>> Split(int color, int key) override {
    if (color < 0) {
      return InvalidArgument(fmt::format("Split: color must be >= 0, got {}", color));
    }
    MPI_Comm sub = MPI_COMM_NULL;
    CTXPAR_MPI_CALL("Split", MPI_Comm_split(comm_, color, key, &sub));
    Count(Collective::kSplit, 0, 0);
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub, timeout_seconds_, probes_));
  }

  Expected<std::unique_ptr<SharedWindow>> AllocateSharedWindow(std::size_t bytes) override {
    MPI_Comm node = MPI_COMM_NULL;
    CTXPAR_MPI_CALL("AllocateSharedWindow",
                    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    int all_local = node_size == size_ ? 1 : 0;
    CTXPAR_MPI_CALL("AllocateSharedWindow",
                    MPI_Allreduce(MPI_IN_PLACE, &all_local, 1, MPI_INT, MPI_MIN, comm_));
    if (!all_local) {
      MPI_Comm_free(&node);
      return SpansNodes();
    }
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* base = nullptr;
    MPI_Win win = MPI_WIN_NULL;
    const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(std::max<std::size_t>(bytes, 1)),
                                           1, info, node, &base, &win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
      MPI_Comm_free(&node);
      return MpiError("AllocateSharedWindow", rc);
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    return std::unique_ptr<SharedWindow>(new MpiWindow(this, node, win, bytes, &counters_));
  }

 private:
  Status SpansNodes() {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> names(static_cast<std::size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
    CTXPAR_MPI_CALL("AllocateSharedWindow",
                    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                                  MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_));
    auto host = [&](int r) { return std::string(names.data() + r * MPI_MAX_PROCESSOR_NAME); };
    int peer = 1;
    while (peer < size_ - 1 && host(peer) == host(0)) ++peer;
    return CatalogError("CTXPAR-DCP-007", {{"rank", "0"},
                                           {"host", host(0)},
                                           {"peer", std::to_string(peer)},
                                           {"peer_host", host(peer)}});
  }

  // Two ranks: sends `send_count` elements to the peer and receives `recv_count` from it. Every
  // collective between two ranks is this one exchange (and local work), which skips the
  // collective framework's request set-up.
  Status Exchange(std::string_view collective, const void* send, int send_count, void* recv,
                  int recv_count, DataType dtype) {
    const int peer = 1 - rank_;
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    CTXPAR_MPI_CALL(collective,
                    MPI_Irecv(recv, recv_count, ToMpi(dtype), peer, kExchangeTag, comm_, &r[0]));
    CTXPAR_MPI_CALL(collective,
                    MPI_Isend(send, send_count, ToMpi(dtype), peer, kExchangeTag, comm_, &r[1]));
    return Wait(collective, r, 2);
  }

  // A barrier over `comm` (this communicator's ranks, or the node communicator of a window,
  // which holds the same ranks in the same order). Between two ranks an empty exchange is one:
  // neither receive completes before the peer has sent.
  Status BarrierWait(std::string_view name, MPI_Comm comm) {
    if (size_ == 2) return Exchange(name, nullptr, 0, nullptr, 0, DataType::kU8);
    MPI_Request r = MPI_REQUEST_NULL;
    CTXPAR_MPI_CALL(name, MPI_Ibarrier(comm, &r));
    return Wait(name, &r, 1);
  }

  // Completes `requests`: polls for kSpin, then sleeps between polls, answering other ranks'
  // probes, until done or past the deadline (TimedOut).
  Status Wait(std::string_view collective, MPI_Request* requests, int n) {
    const bool bounded = timeout_seconds_ > 0 && !unbounded_next_;
    unbounded_next_ = false;
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(bounded ? timeout_seconds_ : 0));
    auto sleep = kFirstSleep;
    for (std::uint64_t polls = 0;; ++polls) {
      bool done = false;
      CTXPAR_RETURN_IF_ERROR(TestAll(collective, requests, n, &done));
      if (done) return Status::Ok();
      // A rank that shares its core with a busy one hands the core over between polls.
      if (probes_->yield) sched_yield();
      // The clock is read every 64 polls while spinning: a poll costs well under a microsecond.
      if (polls % 64 != 0) continue;
      const Clock::time_point now = Clock::now();
      if (now - start < kSpin) continue;
      AnswerProbes();
      if (bounded && now >= deadline) return TimedOut(collective, requests, n, start);
      std::this_thread::sleep_for(sleep);
      sleep = std::min<std::chrono::microseconds>(sleep * 2, kMaxSleep);
    }
  }

  Status TestAll(std::string_view collective, MPI_Request* requests, int n, bool* done) {
    MPI_Status statuses[2];
    int flag = 0;
    const int rc = MPI_Testall(n, requests, &flag, statuses);
    if (rc == MPI_ERR_IN_STATUS) {
      for (int i = 0; i < n; ++i) {
        const int e = statuses[i].MPI_ERROR;
        if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) return MpiError(collective, e);
      }
    }
    if (rc != MPI_SUCCESS) return MpiError(collective, rc);
    *done = flag != 0;
    return Status::Ok();
  }

  // Answers the probes of ranks that timed out waiting: a rank that waits in any collective, of
  // any communicator, is alive and answers.
  void AnswerProbes() {
    const MPI_Comm c = probes_->comm;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, c, &flag, &st) != MPI_SUCCESS || !flag) return;
      int payload = 0;
      MPI_Recv(&payload, 1, MPI_INT, st.MPI_SOURCE, kPingTag, c, MPI_STATUS_IGNORE);
      MPI_Request r = MPI_REQUEST_NULL;
      MPI_Isend(probes_->Payload(payload), 1, MPI_INT, st.MPI_SOURCE, kPongTag, c, &r);
      MPI_Request_free(&r);
    }
  }

  // Past the deadline: probes the other ranks of this communicator and names, as world ranks,
  // those that do not answer within kAnswerWindow. A collective that completes meanwhile was
  // only late.
  Status TimedOut(std::string_view collective, MPI_Request* requests, int n,
                  Clock::time_point start) {
    const MPI_Comm c = probes_->comm;
    const int serial = ++probes_->serial;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      MPI_Isend(probes_->Payload(serial), 1, MPI_INT, world_ranks_[p], kPingTag, c, &r);
      MPI_Request_free(&r);
    }
    int world_size = 0;
    MPI_Comm_size(c, &world_size);
    std::vector<bool> answered(world_size, false);
    int missing = size_ - 1;
    const Clock::time_point window_end = Clock::now() + kAnswerWindow;
    while (missing > 0 && Clock::now() < window_end) {
      AnswerProbes();
      int flag = 0;
      MPI_Status st;
      while (MPI_Iprobe(MPI_ANY_SOURCE, kPongTag, c, &flag, &st) == MPI_SUCCESS && flag) {
        int payload = 0;
        MPI_Recv(&payload, 1, MPI_INT, st.MPI_SOURCE, kPongTag, c, MPI_STATUS_IGNORE);
        if (payload != serial) continue;
        const bool member = std::find(world_ranks_.begin(), world_ranks_.end(), st.MPI_SOURCE) !=
                            world_ranks_.end();
        if (member && !answered[st.MPI_SOURCE]) --missing;
        answered[st.MPI_SOURCE] = true;
      }
      bool done = false;
      CTXPAR_RETURN_IF_ERROR(TestAll(collective, requests, n, &done));
      if (done) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    abandoned_ = true;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    std::string silent;
    for (int p = 0; p < size_; ++p) {
      if (p != rank_ && !answered[world_ranks_[p]]) {
        silent += fmt::format("{}{}", silent.empty() ? "" : ", ", world_ranks_[p]);
      }
    }
    const std::string seconds = fmt::format("{:.0f}", waited);
    const std::string me = std::to_string(world_ranks_[rank_]);
    if (silent.empty()) {
      return CatalogError(
          "CTXPAR-COMM-002",
          {{"collective", std::string(collective)}, {"rank", me}, {"seconds", seconds}});
    }
    return CatalogError("CTXPAR-COMM-001", {{"collective", std::string(collective)},
                                            {"rank", me},
                                            {"seconds", seconds},
                                            {"silent", (missing > 1 ? "ranks " : "rank ") + silent},
                                            {"size", std::to_string(world_size)}});
  }

  MPI_Comm comm_;
  double timeout_seconds_;
  ProbeChannel* probes_;
  std::vector<int> world_ranks_;  // world rank of each rank of comm_
  bool unbounded_next_ = false;
  bool abandoned_ = false;  // a call timed out with its request pending
  int rank_ = 0;
  int size_ = 0;
  std::vector<int> counts_, sd_, rc_, rd_;
  std::vector<char> scratch_;  // the peer's share in the two-rank reductions
};

// Whether the ranks on this rank's machine outnumber its cores. A machine is a kernel (its boot
// id): ranks in containers or network namespaces of one machine, which MPI counts as separate
// nodes, share its cores all the same. Collective over `world`.
Expected<bool> MachineOversubscribed(MPI_Comm world) {
  std::array<char, 40> boot{};
  std::ifstream("/proc/sys/kernel/random/boot_id").read(boot.data(), boot.size() - 1);
  int size = 0;
  MPI_Comm_size(world, &size);
  std::vector<char> all(boot.size() * static_cast<std::size_t>(size));
  CTXPAR_MPI_CALL("MakeMpiWorld",
                  MPI_Allgather(boot.data(), static_cast<int>(boot.size()), MPI_CHAR, all.data(),
                                static_cast<int>(boot.size()), MPI_CHAR, world));
  int same = 0;
  for (int r = 0; r < size; ++r) {
    same += std::equal(boot.begin(), boot.end(), all.begin() + r * std::ptrdiff_t(boot.size()));
  }
  return same > UsableCores();
}

// Finalises MPI at exit when MakeMpiWorld initialised it.
struct MpiFinalizer {
  ~MpiFinalizer() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
};

Status MpiWindow::Sync() {
  CountSync();
  CTXPAR_MPI_CALL("SharedWindow::Sync", MPI_Win_sync(win_));
  CTXPAR_RETURN_IF_ERROR(owner_->BarrierWait("SharedWindow::Sync", node_));
  CTXPAR_MPI_CALL("SharedWindow::Sync", MPI_Win_sync(win_));
  return Status::Ok();
}

}  // namespace

bool MpiCompiledIn() { return true; }

Expected<std::unique_ptr<Communicator>> MakeMpiWorld() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
#if defined(OPEN_MPI)
    // Open MPI's shared-memory transport sends up to 4 KiB eagerly and larger messages with a
    // rendezvous round trip; a decode combine's message is a few KiB (GQA, batch 1: 4160 bytes),
    // where the round trip quadrupled the exchange (docs/perf-combine.md). A value the user set
    // wins.
    setenv("OMPI_MCA_btl_vader_eager_limit", "16384", /*overwrite=*/0);
    setenv("OMPI_MCA_btl_sm_eager_limit", "16384", /*overwrite=*/0);
#endif
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return Unavailable(fmt::format("MPI_Init_thread failed with {}", rc));
    static MpiFinalizer finalizer;
  }
  CTXPAR_ASSIGN_OR_RETURN(const double timeout, CollectiveTimeoutFromEnv());
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  CTXPAR_MPI_CALL("MakeMpiWorld", MPI_Comm_dup(MPI_COMM_WORLD, &world));
  // Every world of the process shares it, up to and past MPI_Finalize (ProbeChannel).
  static ProbeChannel& probes = *new ProbeChannel;
  if (probes.comm == MPI_COMM_NULL) {
    CTXPAR_MPI_CALL("MakeMpiWorld", MPI_Comm_dup(MPI_COMM_WORLD, &probes.comm));
  }
  CTXPAR_ASSIGN_OR_RETURN(probes.yield, MachineOversubscribed(world));
  return std::unique_ptr<Communicator>(new MpiCommunicator(world, timeout, &probes));
}

}  // namespace ctxpar
