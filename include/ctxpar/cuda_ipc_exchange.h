// One-sided all-to-all of packed partial states through CUDA IPC memory: the single-node GPU
// analogue of fi_a2a (which needs MNNVL fabric memory; platform.h's CheckFiA2aRuntime decides
// whether that one is available).
//
// Every rank of a group (processes on one node; several may share one GPU) owns a receive buffer
// of n slots of `slot_bytes` (twice: steps alternate between two halves) plus n 64-bit flags, one
// per source. Exchange(send) copies send slot j straight into rank j's receive buffer, slot
// rank(), then raises rank j's flag for this rank to the step's sequence number (written after
// the data, behind a system-scope fence); the rank then waits on the device until all n of its
// own flags have reached the sequence number, so work enqueued after Exchange on the same stream
// reads complete data. With cuda_combine.h: PackA2aCuda -> Exchange -> UnpackMergeA2aCuda(recv()).
//
// Contract
// - send: device memory of n * slot_bytes bytes; recv(): n * slot_bytes bytes, slot r from rank
//   r, valid for work on `stream` after the Exchange until the next-but-one Exchange (halves
//   alternate; a peer can run at most one step ahead, because its next step needs this rank's
//   data, which this rank sends only after its own earlier work on the stream).
// - Every rank calls Exchange the same number of times, each with its own stream order:
//   consume recv() on the same stream before the next Exchange.
// - A peer that does not raise its flag within 10 s makes the wait give up; Synchronize reports
//   it (Unavailable, naming the peer and the step) instead of hanging forever.
// - Create and the destructor are collective over the bootstrap communicator (host collectives:
//   the handle all-gather and barriers); the communicator must outlive the exchange.
// Thread safety: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar {

class CudaIpcExchange {
 public:
  // Collective over `comm` (all ranks on one node, each with its current CUDA device set).
  static Expected<std::unique_ptr<CudaIpcExchange>> Create(Communicator& comm, size_t slot_bytes);

  virtual ~CudaIpcExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual size_t slot_bytes() const = 0;

  // Enqueues the exchange of one step on `stream` (a cudaStream_t).
  virtual Status Exchange(const void* send, void* stream) = 0;
  // The receive half of the latest Exchange.
  virtual const void* recv() const = 0;
  // Waits for `stream` and reports a peer that never raised its flag.
  virtual Status Synchronize(void* stream) = 0;
};

}  // namespace ctxpar
