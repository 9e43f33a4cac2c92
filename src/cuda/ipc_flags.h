// The flag kernels of the CUDA IPC exchange (internal to src/cuda).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ctxpar::cuda {

inline constexpr int kMaxIpcPeers = 64;

// For each peer j < n: the flag that says "this rank's data for peer j is complete".
struct FlagTargets {
  uint64_t* flag[kMaxIpcPeers];
  int n = 0;
};

// Raises every target flag to `seq` behind a system-scope fence. Stream order puts it after the
// copies enqueued before it, so the peers' data is complete when they see the flag.
cudaError_t LaunchRaiseFlags(const FlagTargets& targets, uint64_t seq, cudaStream_t stream);

// Waits until flags[r] >= seq for every r < n (acquire, system scope). A flag still short after
// timeout_ns leaves r + 1 in *error (the first such peer) and lets the kernel end.
cudaError_t LaunchWaitFlags(const uint64_t* flags, int n, uint64_t seq, uint64_t timeout_ns,
                            uint32_t* error, cudaStream_t stream);

}  // namespace ctxpar::cuda
