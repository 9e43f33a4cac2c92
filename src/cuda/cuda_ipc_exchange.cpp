// CudaIpcExchange: peers' receive buffers opened through CUDA IPC handles, copies + flags.
#include "ctxpar/cuda_ipc_exchange.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/ipc_flags.h"

namespace ctxpar {
namespace {

constexpr uint64_t kFlagTimeoutNs = 10'000'000'000ull;

class IpcExchange final : public CudaIpcExchange {
 public:
  IpcExchange(Communicator& comm, size_t slot_bytes) : comm_(comm), slot_bytes_(slot_bytes) {}

  ~IpcExchange() override {
    // Peers may still be writing into this buffer: every rank drains its work, then all meet.
    // Where Init failed (on every rank alike, see Agree) no exchange ran and no peer waits.
    if (ready_) {
      cudaDeviceSynchronize();
      (void)comm_.Barrier();
    }
    for (int j = 0; j < comm_.size(); ++j) {
      if (j != comm_.rank() && peer_base_[j] != nullptr) cudaIpcCloseMemHandle(peer_base_[j]);
    }
    cudaFree(base_);
    cudaFree(error_);
  }

  // Every rank reaches each collective of Init whatever fails on it, and the ranks agree on the
  // outcome after each local step, so that one rank's failure cannot leave the others waiting
  // in the next collective.
  Status Init() {
    const int n = comm_.size();
    peer_base_.assign(n, nullptr);
    cudaIpcMemHandle_t mine{};
    CTXPAR_RETURN_IF_ERROR(Agree(Allocate(&mine)));
    std::vector<cudaIpcMemHandle_t> all(n);
    CTXPAR_RETURN_IF_ERROR(comm_.AllGather(&mine, all.data(), sizeof(mine), DataType::kU8));
    CTXPAR_RETURN_IF_ERROR(Agree(OpenPeers(all)));
    targets_.n = n;
    for (int j = 0; j < n; ++j) {
      targets_.flag[j] = reinterpret_cast<uint64_t*>(peer_base_[j] + FlagsOffset()) + comm_.rank();
    }
    CTXPAR_RETURN_IF_ERROR(comm_.Barrier());
    ready_ = true;
    return Status::Ok();
  }

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  size_t slot_bytes() const override { return slot_bytes_; }

  Status Exchange(const void* send, void* stream) override {
    if (send == nullptr) return InvalidArgument("CudaIpcExchange::Exchange: send is null");
    auto s = static_cast<cudaStream_t>(stream);
    ++seq_;
    const int n = comm_.size();
    const size_t half = HalfOffset(seq_);
    const auto* src = static_cast<const char*>(send);
    for (int j = 0; j < n; ++j) {
      char* dst = peer_base_[j] + half + static_cast<size_t>(comm_.rank()) * slot_bytes_;
      CTXPAR_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src + static_cast<size_t>(j) * slot_bytes_,
                                                  slot_bytes_, cudaMemcpyDeviceToDevice, s));
    }
    CTXPAR_CUDA_RETURN_IF_ERROR(cuda::LaunchRaiseFlags(targets_, seq_, s));
    const auto* flags = reinterpret_cast<const uint64_t*>(base_ + FlagsOffset());
    CTXPAR_CUDA_RETURN_IF_ERROR(cuda::LaunchWaitFlags(flags, n, seq_, kFlagTimeoutNs, error_, s));
    return Status::Ok();
  }

  const void* recv() const override { return base_ + HalfOffset(seq_); }

  Status Synchronize(void* stream) override {
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    uint32_t error = 0;
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy(&error, error_, sizeof(error), cudaMemcpyDeviceToHost));
    if (error != 0) {
      return Unavailable("CudaIpcExchange: rank " + std::to_string(error - 1) +
                         " did not raise its flag within 10 s (step " + std::to_string(seq_) +
                         " or earlier); is every rank calling Exchange?");
    }
    return Status::Ok();
  }

 private:
  // This rank's buffer (slots and flags, zeroed) and its IPC handle.
  Status Allocate(cudaIpcMemHandle_t* handle) {
    const size_t bytes = BufferBytes();
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&base_), bytes));
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&error_), sizeof(uint32_t)));
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaMemset(base_, 0, bytes));
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaMemset(error_, 0, sizeof(uint32_t)));
    // The zeroed flags must be in place before any peer can raise one.
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(handle, base_));
    return Status::Ok();
  }

  Status OpenPeers(const std::vector<cudaIpcMemHandle_t>& all) {
    for (int j = 0; j < comm_.size(); ++j) {
      if (j == comm_.rank()) {
        peer_base_[j] = base_;
        continue;
      }
      void* p = nullptr;
      CTXPAR_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&p, all[j], cudaIpcMemLazyEnablePeerAccess));
      peer_base_[j] = static_cast<char*>(p);
    }
    return Status::Ok();
  }

  // Collective: ok when `local` is ok on every rank; otherwise `local` where it failed and an
  // error naming a failed rank on the others.
  Status Agree(const Status& local) {
    int32_t failed = local.ok() ? -1 : comm_.rank();
    CTXPAR_RETURN_IF_ERROR(comm_.AllReduce(&failed, &failed, 1, DataType::kI32, ReduceOp::kMax));
    if (failed < 0) return Status::Ok();
    if (!local.ok()) return local;
    return Unavailable("CudaIpcExchange: rank " + std::to_string(failed) +
                       " could not set up its buffer or open its peers'");
  }

  size_t BufferBytes() const { return FlagsOffset() + comm_.size() * sizeof(uint64_t); }
  size_t FlagsOffset() const { return 2 * static_cast<size_t>(comm_.size()) * slot_bytes_; }
  size_t HalfOffset(uint64_t seq) const {
    return (seq % 2) * static_cast<size_t>(comm_.size()) * slot_bytes_;
  }

  Communicator& comm_;
  size_t slot_bytes_;
  char* base_ = nullptr;
  uint32_t* error_ = nullptr;
  std::vector<char*> peer_base_;
  cuda::FlagTargets targets_{};
  uint64_t seq_ = 0;
  bool ready_ = false;  // Init succeeded on every rank
};

}  // namespace

Expected<std::unique_ptr<CudaIpcExchange>> CudaIpcExchange::Create(Communicator& comm,
                                                                   size_t slot_bytes) {
  if (slot_bytes == 0 || slot_bytes % 16 != 0) {
    return InvalidArgument("CudaIpcExchange: slot_bytes=" + std::to_string(slot_bytes) +
                           " must be a positive multiple of 16");
  }
  if (comm.size() > cuda::kMaxIpcPeers) {
    return InvalidArgument("CudaIpcExchange: the group has " + std::to_string(comm.size()) +
                           " ranks, more than " + std::to_string(cuda::kMaxIpcPeers));
  }
  auto exchange = std::make_unique<IpcExchange>(comm, slot_bytes);
  CTXPAR_RETURN_IF_ERROR(exchange->Init());
  return std::unique_ptr<CudaIpcExchange>(std::move(exchange));
}

}  // namespace ctxpar
