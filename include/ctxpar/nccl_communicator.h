// The Communicator interface (communicator.h) over NCCL, for ranks that each drive one GPU.
//
// Contract, where it differs from communicator.h:
// - Buffers are DEVICE memory of the rank's current CUDA device (cudaMalloc), not host memory.
// - Each collective is enqueued on the communicator's stream and the call returns once the stream
//   has finished it (the interface is blocking); a NCCL or CUDA failure is returned as a Status
//   whose message starts with the collective's name.
// - AllToAll and AllToAllV are grouped ncclSend/ncclRecv pairs (ncclGroupStart/End).
// - AllocateSharedWindow is kUnimplemented: one-sided GPU exchange is CudaIpcExchange's job.
// - NCCL refuses two ranks on one GPU ("invalid usage"): one rank per device.
// - Byte counters follow communicator.h (the MPI implementation's accounting).
// - Split's children share the parent's stream: destroy them before the parent.
// Thread safety: one thread at a time per communicator, as every Communicator.
#pragma once

#include <memory>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar {

// True when ctxpar was built with NCCL.
bool NcclCompiledIn();

// Collective over `bootstrap` (every rank of it calls, e.g. the MPI world): rank 0 makes the NCCL
// unique id and broadcasts it through `bootstrap`; the NCCL communicator has bootstrap's ranks
// and size and uses the calling thread's current CUDA device. stream: a cudaStream_t owned by the
// caller, or null for a stream the communicator creates and owns.
// Unavailable when ctxpar was built without NCCL or no CUDA device is present.
Expected<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& bootstrap,
                                                             void* stream = nullptr);

}  // namespace ctxpar
