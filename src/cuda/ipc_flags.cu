// Flag kernels of the CUDA IPC exchange: release stores and acquire spins at system scope.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ipc_flags.h"

namespace ctxpar::cuda {
namespace {

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t LoadAcquireSys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void StoreReleaseSys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__global__ void RaiseFlagsKernel(const FlagTargets targets, uint64_t seq) {
  const int j = threadIdx.x;
  if (j >= targets.n) return;
  __threadfence_system();
  StoreReleaseSys(targets.flag[j], seq);
}

__global__ void WaitFlagsKernel(const uint64_t* flags, int n, uint64_t seq, uint64_t timeout_ns,
                                uint32_t* error) {
  const int r = threadIdx.x;
  if (r >= n) return;
  const uint64_t start = GlobalTimerNs();
  while (LoadAcquireSys(flags + r) < seq) {
    if (GlobalTimerNs() - start > timeout_ns) {
      atomicCAS(error, 0u, static_cast<uint32_t>(r + 1));
      return;
    }
    // Other processes' kernels share this GPU by time slices: back off instead of hammering.
    __nanosleep(200);
  }
  __threadfence_system();
}

}  // namespace

cudaError_t LaunchRaiseFlags(const FlagTargets& targets, uint64_t seq, cudaStream_t stream) {
  RaiseFlagsKernel<<<1, kMaxIpcPeers, 0, stream>>>(targets, seq);
  return cudaGetLastError();
}

cudaError_t LaunchWaitFlags(const uint64_t* flags, int n, uint64_t seq, uint64_t timeout_ns,
                            uint32_t* error, cudaStream_t stream) {
  WaitFlagsKernel<<<1, kMaxIpcPeers, 0, stream>>>(flags, n, seq, timeout_ns, error);
  return cudaGetLastError();
}

}  // namespace ctxpar::cuda
