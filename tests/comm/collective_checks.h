// Checks of every collective, written once and run on any Communicator: by the in-process tests
// (one thread per rank) and by the MPI tests (one process per rank). Expected values are computed
// from closed forms of the rank and the element index, not by the code under test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "ctxpar/dtype.h"
#include "ctxpar/communicator.h"

namespace ctxpar::testing {

// Element i of rank r's contribution.
inline float Val(int r, std::size_t i) { return static_cast<float>(r * 1000 + i) * 0.5f; }

inline void CheckAllGather(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t count = 7;
  std::vector<float> send(count), recv(count * n, -1.0f);
  for (std::size_t i = 0; i < count; ++i) send[i] = Val(me, i);
  comm.ResetCounters();
  ASSERT_TRUE(comm.AllGather(send.data(), recv.data(), count, DataType::kF32).ok());
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(recv[r * count + i], Val(r, i));
  }
  const CollectiveCounters& c = comm.counters()[Collective::kAllGather];
  EXPECT_EQ(c.calls, 1u);
  EXPECT_EQ(c.bytes_sent, (n - 1) * count * 4);
  EXPECT_EQ(c.bytes_received, (n - 1) * count * 4);
}

inline void CheckReduceScatter(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t count = 5;
  std::vector<double> send(count * n), recv(count, -1.0);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = Val(me, i);
  comm.ResetCounters();
  ASSERT_TRUE(comm.ReduceScatter(send.data(), recv.data(), count, DataType::kF64).ok());
  for (std::size_t i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += Val(r, me * count + i);
    EXPECT_EQ(recv[i], want);
  }
  EXPECT_EQ(comm.counters()[Collective::kReduceScatter].bytes_sent, (n - 1) * count * 8);
}

inline void CheckAllToAll(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t count = 3;
  std::vector<int32_t> send(count * n), recv(count * n, -1);
  // chunk j for rank j carries (me, j, i).
  for (int j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < count; ++i) send[j * count + i] = me * 10000 + j * 100 + i;
  }
  comm.ResetCounters();
  ASSERT_TRUE(comm.AllToAll(send.data(), recv.data(), count, DataType::kI32).ok());
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < count; ++i) {
      EXPECT_EQ(recv[r * count + i], static_cast<int32_t>(r * 10000 + me * 100 + i));
    }
  }
  EXPECT_EQ(comm.counters()[Collective::kAllToAll].bytes_received, (n - 1) * count * 4);
}

inline void CheckAllToAllV(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  // Rank r sends (r + j + 1) bytes to rank j.
  std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
  std::size_t stotal = 0, rtotal = 0;
  for (int j = 0; j < n; ++j) {
    sc[j] = me + j + 1;
    sd[j] = stotal;
    stotal += sc[j];
    rc[j] = j + me + 1;
    rd[j] = rtotal;
    rtotal += rc[j];
  }
  std::vector<uint8_t> send(stotal), recv(rtotal, 0);
  for (int j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < sc[j]; ++i) send[sd[j] + i] = static_cast<uint8_t>(me * 16 + j + i);
  }
  comm.ResetCounters();
  ASSERT_TRUE(comm.AllToAllV(send.data(), sc, sd, recv.data(), rc, rd, DataType::kU8).ok());
  std::uint64_t want_recv = 0;
  for (int r = 0; r < n; ++r) {
    for (std::size_t i = 0; i < rc[r]; ++i) {
      EXPECT_EQ(recv[rd[r] + i], static_cast<uint8_t>(r * 16 + me + i));
    }
    if (r != me) want_recv += rc[r];
  }
  EXPECT_EQ(comm.counters()[Collective::kAllToAllV].bytes_received, want_recv);
}

inline void CheckAllReduce(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  std::vector<float> buf = {static_cast<float>(me), -static_cast<float>(me), 1.5f};
  ASSERT_TRUE(
      comm.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kF32, ReduceOp::kSum).ok());
  EXPECT_EQ(buf[0], n * (n - 1) / 2.0f);
  EXPECT_EQ(buf[1], -n * (n - 1) / 2.0f);
  EXPECT_EQ(buf[2], 1.5f * n);
  int32_t mx = (me * 7) % n;
  ASSERT_TRUE(comm.AllReduce(&mx, &mx, 1, DataType::kI32, ReduceOp::kMax).ok());
  int32_t want = 0;
  for (int r = 0; r < n; ++r) want = std::max<int32_t>(want, (r * 7) % n);
  EXPECT_EQ(mx, want);
  // bf16: 1 + 2 + ... exact in bf16 for small n.
  uint16_t b = FloatToBf16(static_cast<float>(me + 1)), out = 0;
  ASSERT_TRUE(comm.AllReduce(&b, &out, 1, DataType::kBF16, ReduceOp::kSum).ok());
  EXPECT_EQ(Bf16ToFloat(out), n * (n + 1) / 2.0f);
  ASSERT_TRUE(comm.AllReduce(&b, &out, 1, DataType::kBF16, ReduceOp::kMax).ok());
  EXPECT_EQ(Bf16ToFloat(out), static_cast<float>(n));
}

inline void CheckBroadcastAndBarrier(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const int root = n - 1;
  std::vector<double> buf(4, me == root ? 3.25 : 0.0);
  comm.ResetCounters();
  ASSERT_TRUE(comm.Broadcast(buf.data(), buf.size(), DataType::kF64, root).ok());
  for (double x : buf) EXPECT_EQ(x, 3.25);
  EXPECT_EQ(comm.counters()[Collective::kBroadcast].bytes_received, me == root ? 0u : 32u);
  EXPECT_TRUE(comm.Barrier().ok());
  EXPECT_FALSE(comm.Broadcast(buf.data(), 1, DataType::kF64, n).ok());
}

// Split into blocks of two consecutive ranks (a DCP group of 2 inside the TP group), reversed
// inside each block by the key.
inline void CheckSplit(Communicator& comm) {
  const int me = comm.rank();
  auto sub = comm.Split(me / 2, -me);
  ASSERT_TRUE(sub.ok()) << sub.status().ToString();
  const int block = std::min(2, comm.size() - (me / 2) * 2);
  EXPECT_EQ((*sub)->size(), block);
  const int expected_rank = block == 2 ? 1 - me % 2 : 0;
  EXPECT_EQ((*sub)->rank(), expected_rank);
  int32_t v = me, sum = 0;
  ASSERT_TRUE((*sub)->AllReduce(&v, &sum, 1, DataType::kI32, ReduceOp::kSum).ok());
  EXPECT_EQ(sum, block == 2 ? (me / 2) * 4 + 1 : me);
}

inline void CheckSharedWindow(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  auto win = comm.AllocateSharedWindow(n * sizeof(int32_t));
  ASSERT_TRUE(win.ok()) << win.status().ToString();
  const std::uint64_t sent_before = comm.counters()[Collective::kSharedWindow].bytes_sent;
  for (int j = 0; j < n; ++j) static_cast<int32_t*>((*win)->Segment(j))[me] = me * 100 + j;
  (*win)->NoteSent((n - 1) * sizeof(int32_t));
  ASSERT_TRUE((*win)->Sync().ok());
  const auto* mine = static_cast<const int32_t*>((*win)->Segment(me));
  for (int r = 0; r < n; ++r) EXPECT_EQ(mine[r], r * 100 + me);
  EXPECT_EQ(comm.counters()[Collective::kSharedWindow].bytes_sent - sent_before,
            (n - 1) * sizeof(int32_t));
  ASSERT_TRUE((*win)->Sync().ok());
}

// Every check above, in the order the tests run them.
inline void CheckEveryCollective(Communicator& comm) {
  CheckAllGather(comm);
  CheckReduceScatter(comm);
  CheckAllToAll(comm);
  CheckAllToAllV(comm);
  CheckAllReduce(comm);
  CheckBroadcastAndBarrier(comm);
  CheckSplit(comm);
  CheckSharedWindow(comm);
}

}  // namespace ctxpar::testing
