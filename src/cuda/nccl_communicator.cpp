// NcclCommunicator: communicator.h's collectives over NCCL on device buffers.
#include "ctxpar/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"

namespace ctxpar {
namespace {

Status NcclStatus(ncclResult_t r, const char* collective, const char* call) {
  if (r == ncclSuccess) return Status::Ok();
  return Internal(std::string(collective) + ": " + call + " failed: " + ncclGetErrorString(r));
}

Status CudaCallStatus(cudaError_t err, const char* collective, const char* call) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(collective) + ": " + call + " failed: " + cudaGetErrorName(err) +
                  " (" + cudaGetErrorString(err) + ")");
}

ncclDataType_t ToNccl(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
      return ncclFloat32;
    case DataType::kBF16:
      return ncclBfloat16;
    case DataType::kF16:
      return ncclFloat16;
    case DataType::kF64:
      return ncclFloat64;
    case DataType::kI32:
      return ncclInt32;
    case DataType::kU8:
      return ncclUint8;
    case DataType::kF8E4M3:
    case DataType::kF8E5M2:
      // Moved as bytes only: nothing reduces an fp8 buffer on the GPU (the KV cache is local).
      return ncclUint8;
  }
  return ncclUint8;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, cudaStream_t stream, bool owns_stream,
                   int32_t* scratch)
      : comm_(comm),
        rank_(rank),
        size_(size),
        stream_(stream),
        owns_stream_(owns_stream),
        scratch_(scratch) {}
  ~NcclCommunicator() override {
    ncclCommDestroy(comm_);
    cudaFree(scratch_);
    if (owns_stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status AllGather(const void* send, void* recv, std::size_t count, DataType dtype) override {
    CTXPAR_RETURN_IF_ERROR(
        NcclStatus(ncclAllGather(send, recv, count, ToNccl(dtype), comm_, stream_), "AllGather",
                   "ncclAllGather"));
    CTXPAR_RETURN_IF_ERROR(Finish("AllGather"));
    const std::uint64_t bytes = (size_ - 1) * count * DataTypeSize(dtype);
    Count(Collective::kAllGather, bytes, bytes);
    return Status::Ok();
  }

  Status ReduceScatter(const void* send, void* recv, std::size_t recv_count,
                       DataType dtype) override {
    CTXPAR_RETURN_IF_ERROR(NcclStatus(
        ncclReduceScatter(send, recv, recv_count, ToNccl(dtype), ncclSum, comm_, stream_),
        "ReduceScatter", "ncclReduceScatter"));
    CTXPAR_RETURN_IF_ERROR(Finish("ReduceScatter"));
    const std::uint64_t bytes = (size_ - 1) * recv_count * DataTypeSize(dtype);
    Count(Collective::kReduceScatter, bytes, bytes);
    return Status::Ok();
  }

  Status AllToAll(const void* send, void* recv, std::size_t count, DataType dtype) override {
    const std::vector<std::size_t> counts(size_, count);
    std::vector<std::size_t> displs(size_);
    for (int j = 0; j < size_; ++j) displs[j] = j * count;
    CTXPAR_RETURN_IF_ERROR(SendRecv("AllToAll", send, counts, displs, recv, counts, displs, dtype));
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
    CTXPAR_RETURN_IF_ERROR(SendRecv("AllToAllV", send, send_counts, send_displs, recv, recv_counts,
                                    recv_displs, dtype));
    std::uint64_t sent = 0, received = 0;
    for (std::size_t j = 0; j < n; ++j) {
      if (static_cast<int>(j) == rank_) continue;
      sent += send_counts[j] * DataTypeSize(dtype);
      received += recv_counts[j] * DataTypeSize(dtype);
    }
    Count(Collective::kAllToAllV, sent, received);
    return Status::Ok();
  }

  Status AllReduce(const void* send, void* recv, std::size_t count, DataType dtype,
                   ReduceOp op) override {
    CTXPAR_RETURN_IF_ERROR(
        NcclStatus(ncclAllReduce(send, recv, count, ToNccl(dtype),
                                 op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, stream_),
                   "AllReduce", "ncclAllReduce"));
    CTXPAR_RETURN_IF_ERROR(Finish("AllReduce"));
    const std::uint64_t bytes = (size_ - 1) * count * DataTypeSize(dtype);
    Count(Collective::kAllReduce, bytes, bytes);
    return Status::Ok();
  }

  Status Broadcast(void* buffer, std::size_t count, DataType dtype, int root) override {
    if (root < 0 || root >= size_) {
      return InvalidArgument("Broadcast: root " + std::to_string(root) +
                             " is not a rank of a group of " + std::to_string(size_));
    }
    CTXPAR_RETURN_IF_ERROR(
        NcclStatus(ncclBroadcast(buffer, buffer, count, ToNccl(dtype), root, comm_, stream_),
                   "Broadcast", "ncclBroadcast"));
    CTXPAR_RETURN_IF_ERROR(Finish("Broadcast"));
    const std::uint64_t bytes = count * DataTypeSize(dtype);
    Count(Collective::kBroadcast, rank_ == root ? (size_ - 1) * bytes : 0,
          rank_ == root ? 0 : bytes);
    return Status::Ok();
  }

  // An all-reduce of one int: every rank has entered once it completes.
  Status Barrier() override {
    CTXPAR_RETURN_IF_ERROR(
        NcclStatus(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_),
                   "Barrier", "ncclAllReduce"));
    CTXPAR_RETURN_IF_ERROR(Finish("Barrier"));
    Count(Collective::kBarrier, 0, 0);
    return Status::Ok();
  }

  Expected<std::unique_ptr<Communicator>> Split(int color, int key) override {
    if (color < 0) {
      return InvalidArgument("Split: color must be >= 0, got " + std::to_string(color));
    }
    ncclComm_t sub = nullptr;
    CTXPAR_RETURN_IF_ERROR(
        NcclStatus(ncclCommSplit(comm_, color, key, &sub, nullptr), "Split", "ncclCommSplit"));
    int sub_rank = 0, sub_size = 0;
    CTXPAR_RETURN_IF_ERROR(
        NcclStatus(ncclCommUserRank(sub, &sub_rank), "Split", "ncclCommUserRank"));
    CTXPAR_RETURN_IF_ERROR(NcclStatus(ncclCommCount(sub, &sub_size), "Split", "ncclCommCount"));
    int32_t* scratch = nullptr;
    CTXPAR_RETURN_IF_ERROR(CudaCallStatus(
        cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(int32_t)), "Split", "cudaMalloc"));
    Count(Collective::kSplit, 0, 0);
    // The child shares the parent's stream, so its work stays ordered with the parent's.
    return std::unique_ptr<Communicator>(
        new NcclCommunicator(sub, sub_rank, sub_size, stream_, false, scratch));
  }

  Expected<std::unique_ptr<SharedWindow>> AllocateSharedWindow(std::size_t) override {
    return Unimplemented(
        "AllocateSharedWindow: the NCCL communicator has no shared host windows; exchange GPU "
        "states one-sided with CudaIpcExchange (cuda_ipc_exchange.h)");
  }

 private:
  Status SendRecv(const char* name, const void* send, std::span<const std::size_t> send_counts,
                  std::span<const std::size_t> send_displs, void* recv,
                  std::span<const std::size_t> recv_counts,
                  std::span<const std::size_t> recv_displs, DataType dtype) {
    const std::size_t es = DataTypeSize(dtype);
    const auto* src = static_cast<const char*>(send);
    auto* dst = static_cast<char*>(recv);
    CTXPAR_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), name, "ncclGroupStart"));
    Status st;
    for (int j = 0; j < size_ && st.ok(); ++j) {
      if (send_counts[j] > 0) {
        st = NcclStatus(
            ncclSend(src + send_displs[j] * es, send_counts[j], ToNccl(dtype), j, comm_, stream_),
            name, "ncclSend");
      }
      if (st.ok() && recv_counts[j] > 0) {
        st = NcclStatus(
            ncclRecv(dst + recv_displs[j] * es, recv_counts[j], ToNccl(dtype), j, comm_, stream_),
            name, "ncclRecv");
      }
    }
    // The group is closed even after a failed call, so that NCCL is left in a usable state.
    const Status end = NcclStatus(ncclGroupEnd(), name, "ncclGroupEnd");
    CTXPAR_RETURN_IF_ERROR(st);
    CTXPAR_RETURN_IF_ERROR(end);
    return Finish(name);
  }

  Status Finish(const char* name) {
    return CudaCallStatus(cudaStreamSynchronize(stream_), name, "cudaStreamSynchronize");
  }

  ncclComm_t comm_;
  int rank_;
  int size_;
  cudaStream_t stream_;
  bool owns_stream_;
  int32_t* scratch_;
};

}  // namespace

bool NcclCompiledIn() { return true; }

Expected<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& bootstrap,
                                                             void* stream) {
  constexpr const char* kApi = "MakeNcclCommunicator";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return Unavailable(std::string(kApi) + ": no CUDA device");
  }
  ncclUniqueId id;
  if (bootstrap.rank() == 0) {
    CTXPAR_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), kApi, "ncclGetUniqueId"));
  }
  CTXPAR_RETURN_IF_ERROR(bootstrap.Broadcast(&id, sizeof(id), DataType::kU8, 0));
  ncclComm_t comm = nullptr;
  CTXPAR_RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()),
                                    kApi, "ncclCommInitRank"));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool owns = s == nullptr;
  int32_t* scratch = nullptr;
  cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(int32_t));
  if (err == cudaSuccess && owns) err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) {
    ncclCommDestroy(comm);
    cudaFree(scratch);
    return CudaCallStatus(err, kApi, "cudaMalloc/cudaStreamCreate");
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(comm, bootstrap.rank(), bootstrap.size(), s, owns, scratch));
}

}  // namespace ctxpar
