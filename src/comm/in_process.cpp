// The in-process communicator: N threads of one process, one per rank, meeting at a shared slot
// table. Every collective publishes this rank's arguments, waits for all ranks, checks that the
// arguments agree (so a mismatch fails on every rank alike), copies straight from the peers'
// buffers, and waits again so that no buffer is reused while a peer still reads it.
#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ctxpar/communicator.h"
#include "reduce.h"

namespace ctxpar {
namespace {

struct Slot {
  Collective op = Collective::kBarrier;
  DataType dtype = DataType::kU8;
  std::size_t count = 0;
  int root = 0;
  ReduceOp reduce = ReduceOp::kSum;
  const void* send = nullptr;
  void* recv = nullptr;
  std::span<const std::size_t> send_counts{}, send_displs{}, recv_counts{}, recv_displs{};
  int color = 0;
  int key = 0;
  std::shared_ptr<void> shared{};  // published by a leader: a new group or a window's memory
};

struct Group {
  explicit Group(int n) : size(n), slots(n) {}
  // Meets the other ranks. Fails, naming the collective, when a rank has left the group before
  // everyone arrived: that meeting can never complete, and waiting would hang the process.
  Status Wait(std::string_view collective) {
    std::unique_lock<std::mutex> lock(mu);
    const std::uint64_t generation = gen;
    if (left < 0) {
      if (++arrived == size) {
        arrived = 0;
        ++gen;
        cv.notify_all();
        return Status::Ok();
      }
      cv.wait(lock, [&] { return gen != generation || left >= 0; });
      if (gen != generation) return Status::Ok();
    }
    return Unavailable(fmt::format(
        "{}: rank {} left the in-process group before the call completed", collective, left));
  }
  // A rank leaves when its communicator is destroyed or its RunInProcess function returns.
  void Leave(int rank) {
    std::lock_guard<std::mutex> lock(mu);
    if (left < 0) left = rank;
    cv.notify_all();
  }
  const int size;
  std::vector<Slot> slots;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t gen = 0;
  int left = -1;  // the first rank that left
};

class InProcessWindow final : public SharedWindow {
 public:
  InProcessWindow(std::shared_ptr<Group> group, std::shared_ptr<void> memory, std::size_t bytes,
                  CommCounters* counters)
      : SharedWindow(bytes, counters), group_(std::move(group)), memory_(std::move(memory)) {}
  void* Segment(int rank) override {
    return static_cast<unsigned char*>(memory_.get()) + static_cast<std::size_t>(rank) * bytes();
  }
  Status Sync() override {
    CountSync();
    // The mutex inside orders every write before every later read.
    return group_->Wait("SharedWindow::Sync");
  }

 private:
  std::shared_ptr<Group> group_;
  std::shared_ptr<void> memory_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  ~InProcessCommunicator() override { Leave(); }
  void Leave() { group_->Leave(rank_); }

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  Status AllGather(const void* send, void* recv, std::size_t count, DataType dtype) override {
    CTXPAR_RETURN_IF_ERROR(
        Publish({.op = Collective::kAllGather, .dtype = dtype, .count = count, .send = send}));
    const std::size_t bytes = count * DataTypeSize(dtype);
    for (int j = 0; j < size(); ++j) {
      std::memcpy(static_cast<unsigned char*>(recv) + j * bytes, group_->slots[j].send, bytes);
    }
    return Finish(Collective::kAllGather, (size() - 1) * bytes, (size() - 1) * bytes);
  }

  Status ReduceScatter(const void* send, void* recv, std::size_t recv_count,
                       DataType dtype) override {
    CTXPAR_RETURN_IF_ERROR(Publish(
        {.op = Collective::kReduceScatter, .dtype = dtype, .count = recv_count, .send = send}));
    const std::size_t bytes = recv_count * DataTypeSize(dtype);
    const std::size_t offset = static_cast<std::size_t>(rank_) * bytes;
    std::memcpy(recv, static_cast<const unsigned char*>(group_->slots[0].send) + offset, bytes);
    for (int j = 1; j < size(); ++j) {
      comm_internal::ReduceInto(recv,
                                static_cast<const unsigned char*>(group_->slots[j].send) + offset,
                                recv_count, dtype, ReduceOp::kSum);
    }
    return Finish(Collective::kReduceScatter, (size() - 1) * bytes, (size() - 1) * bytes);
  }

  Status AllToAll(const void* send, void* recv, std::size_t count, DataType dtype) override {
    CTXPAR_RETURN_IF_ERROR(
        Publish({.op = Collective::kAllToAll, .dtype = dtype, .count = count, .send = send}));
    const std::size_t bytes = count * DataTypeSize(dtype);
    for (int j = 0; j < size(); ++j) {
      std::memcpy(static_cast<unsigned char*>(recv) + j * bytes,
                  static_cast<const unsigned char*>(group_->slots[j].send) + rank_ * bytes, bytes);
    }
    return Finish(Collective::kAllToAll, (size() - 1) * bytes, (size() - 1) * bytes);
  }

  Status AllToAllV(const void* send, std::span<const std::size_t> send_counts,
                   std::span<const std::size_t> send_displs, void* recv,
                   std::span<const std::size_t> recv_counts,
                   std::span<const std::size_t> recv_displs, DataType dtype) override {
    CTXPAR_RETURN_IF_ERROR(CheckAllToAllVSpans(send_counts, send_displs, recv_counts, recv_displs));
    CTXPAR_RETURN_IF_ERROR(Publish({.op = Collective::kAllToAllV,
                                    .dtype = dtype,
                                    .send = send,
                                    .send_counts = send_counts,
                                    .send_displs = send_displs,
                                    .recv_counts = recv_counts,
                                    .recv_displs = recv_displs}));
    const std::size_t es = DataTypeSize(dtype);
    std::uint64_t sent = 0, received = 0;
    for (int j = 0; j < size(); ++j) {
      const Slot& peer = group_->slots[j];
      std::memcpy(static_cast<unsigned char*>(recv) + recv_displs[j] * es,
                  static_cast<const unsigned char*>(peer.send) + peer.send_displs[rank_] * es,
                  recv_counts[j] * es);
      if (j != rank_) {
        sent += send_counts[j] * es;
        received += recv_counts[j] * es;
      }
    }
    return Finish(Collective::kAllToAllV, sent, received);
  }

  Status AllReduce(const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op) override {
    CTXPAR_RETURN_IF_ERROR(Publish({.op = Collective::kAllReduce,
                                    .dtype = dtype,
                                    .count = count,
                                    .reduce = op,
                                    .send = send}));
    const std::size_t bytes = count * DataTypeSize(dtype);
    std::vector<unsigned char> acc(bytes);
    std::memcpy(acc.data(), group_->slots[0].send, bytes);
    for (int j = 1; j < size(); ++j) {
      comm_internal::ReduceInto(acc.data(), group_->slots[j].send, count, dtype, op);
    }
    // Every rank has read every send buffer; recv may alias send.
    CTXPAR_RETURN_IF_ERROR(group_->Wait("AllReduce"));
    std::memcpy(recv, acc.data(), bytes);
    return Finish(Collective::kAllReduce, (size() - 1) * bytes, (size() - 1) * bytes);
  }

  Status Broadcast(void* buffer, std::size_t count, DataType dtype, int root) override {
    if (root < 0 || root >= size()) {
      return InvalidArgument(
          fmt::format("Broadcast: root {} is not a rank of a group of {}", root, size()));
    }
    CTXPAR_RETURN_IF_ERROR(Publish({.op = Collective::kBroadcast,
                                    .dtype = dtype,
                                    .count = count,
                                    .root = root,
                                    .send = buffer}));
    const std::size_t bytes = count * DataTypeSize(dtype);
    if (rank_ != root) std::memcpy(buffer, group_->slots[root].send, bytes);
    return Finish(Collective::kBroadcast, rank_ == root ? (size() - 1) * bytes : 0,
                  rank_ == root ? 0 : bytes);
  }

  Status Barrier() override {
    CTXPAR_RETURN_IF_ERROR(Publish({.op = Collective::kBarrier}));
    return Finish(Collective::kBarrier, 0, 0);
  }

  Expected<std::unique_ptr<Communicator>> Split(int color, int key) override {
    if (color < 0) {
      return InvalidArgument(fmt::format("Split: color must be >= 0, got {}", color));
    }
    CTXPAR_RETURN_IF_ERROR(Publish({.op = Collective::kSplit, .color = color, .key = key}));
    std::vector<int> same;
    for (int j = 0; j < size(); ++j) {
      if (group_->slots[j].color == color) same.push_back(j);
    }
    std::stable_sort(same.begin(), same.end(),
                     [&](int a, int b) { return group_->slots[a].key < group_->slots[b].key; });
    const int new_rank =
        static_cast<int>(std::find(same.begin(), same.end(), rank_) - same.begin());
    // The leader (lowest old rank of the color) creates the group before anyone reads it.
    const int leader = *std::min_element(same.begin(), same.end());
    if (leader == rank_)
      group_->slots[rank_].shared = std::make_shared<Group>(static_cast<int>(same.size()));
    CTXPAR_RETURN_IF_ERROR(group_->Wait("Split"));
    std::shared_ptr<Group> mine = std::static_pointer_cast<Group>(group_->slots[leader].shared);
    CTXPAR_RETURN_IF_ERROR(group_->Wait("Split"));
    group_->slots[rank_].shared.reset();
    Count(Collective::kSplit, 0, 0);
    return std::unique_ptr<Communicator>(new InProcessCommunicator(std::move(mine), new_rank));
  }

  Expected<std::unique_ptr<SharedWindow>> AllocateSharedWindow(std::size_t bytes) override {
    CTXPAR_RETURN_IF_ERROR(Publish({.op = Collective::kSharedWindow, .count = bytes}));
    if (rank_ == 0) {
      group_->slots[0].shared = std::shared_ptr<unsigned char[]>(
          new unsigned char[std::max<std::size_t>(1, bytes * size())]());
    }
    CTXPAR_RETURN_IF_ERROR(group_->Wait("AllocateSharedWindow"));
    std::shared_ptr<void> memory = group_->slots[0].shared;
    CTXPAR_RETURN_IF_ERROR(group_->Wait("AllocateSharedWindow"));
    if (rank_ == 0) group_->slots[0].shared.reset();
    return std::unique_ptr<SharedWindow>(
        new InProcessWindow(group_, std::move(memory), bytes, &counters_));
  }

 private:
  // Publishes this rank's arguments and waits for every rank; on disagreement every rank fails.
  Status Publish(const Slot& s) {
    group_->slots[rank_] = s;
    CTXPAR_RETURN_IF_ERROR(group_->Wait(CollectiveName(s.op)));
    Status st = CheckAgreement();
    if (!st.ok()) CTXPAR_RETURN_IF_ERROR(group_->Wait(CollectiveName(s.op)));
    return st;
  }

  Status CheckAgreement() const {
    const Slot& a = group_->slots[0];
    const std::string_view name = CollectiveName(group_->slots[rank_].op);
    for (int j = 1; j < size(); ++j) {
      const Slot& b = group_->slots[j];
      if (b.op != a.op) {
        return InvalidArgument(fmt::format("{}: rank 0 called {} but rank {} called {}", name,
                                           CollectiveName(a.op), j, CollectiveName(b.op)));
      }
      if (b.dtype != a.dtype) {
        return InvalidArgument(fmt::format("{}: rank 0 passed data type {} but rank {} passed {}",
                                           name, DataTypeName(a.dtype), j, DataTypeName(b.dtype)));
      }
      if (b.count != a.count) {
        return InvalidArgument(fmt::format("{}: rank 0 passed count {} but rank {} passed {}", name,
                                           a.count, j, b.count));
      }
      if (b.root != a.root) {
        return InvalidArgument(fmt::format("{}: rank 0 passed root {} but rank {} passed {}", name,
                                           a.root, j, b.root));
      }
      if (b.reduce != a.reduce) {
        return InvalidArgument(
            fmt::format("{}: ranks 0 and {} passed different operations", name, j));
      }
    }
    if (a.op == Collective::kAllToAllV) {
      for (int i = 0; i < size(); ++i) {
        for (int j = 0; j < size(); ++j) {
          const std::size_t sent = group_->slots[i].send_counts[j];
          const std::size_t expected = group_->slots[j].recv_counts[i];
          if (sent != expected) {
            return InvalidArgument(
                fmt::format("{}: rank {} sends {} elements to rank {}, which expects {}", name, i,
                            sent, j, expected));
          }
        }
      }
    }
    return Status::Ok();
  }

  Status Finish(Collective c, std::uint64_t sent, std::uint64_t received) {
    CTXPAR_RETURN_IF_ERROR(group_->Wait(CollectiveName(c)));
    Count(c, sent, received);
    return Status::Ok();
  }

  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeInProcessGroup(int size) {
  std::vector<std::unique_ptr<Communicator>> comms;
  if (size < 1) return comms;
  auto group = std::make_shared<Group>(size);
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return comms;
}

Status RunInProcess(int size, const std::function<Status(Communicator&)>& fn) {
  if (size < 1)
    return InvalidArgument(fmt::format("RunInProcess: size must be >= 1, got {}", size));
  std::vector<std::unique_ptr<Communicator>> comms = MakeInProcessGroup(size);
  std::vector<Status> results(size);
  std::vector<std::thread> threads;
  for (int r = 1; r < size; ++r) {
    threads.emplace_back([&, r] {
      results[r] = fn(*comms[r]);
      static_cast<InProcessCommunicator&>(*comms[r]).Leave();
    });
  }
  results[0] = fn(*comms[0]);
  static_cast<InProcessCommunicator&>(*comms[0]).Leave();
  for (std::thread& t : threads) t.join();
  for (Status& s : results) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace ctxpar
