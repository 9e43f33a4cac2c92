// Validation and layout of the merge and a2a pack / unpack launchers (cuda_combine.h).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "ctxpar/cuda_combine.h"
#include "cuda/combine_kernels.h"
#include "cuda/cuda_check.h"

namespace ctxpar {
namespace {

int64_t RoundUp16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

int64_t ElementBytes(DataType dtype) { return dtype == DataType::kF32 ? 4 : 2; }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

Status CheckHeadDim(const char* api, int head_dim) {
  if (head_dim <= 0 || head_dim % 8 != 0) {
    return InvalidArgument(std::string(api) + ": head_dim=" + std::to_string(head_dim) +
                           " must be a positive multiple of 8");
  }
  return Status::Ok();
}

Status CheckPointer(const char* api, const char* field, const void* p) {
  if (p == nullptr || !Aligned16(p)) {
    return InvalidArgument(std::string(api) + ": " + field +
                           " must be a non-null, 16-byte aligned device pointer");
  }
  return Status::Ok();
}

Status CheckA2a(const char* api, const CudaA2aParams& a) {
  if (a.n < 1 || a.n > cuda::kMaxMergeSources) {
    return InvalidArgument(std::string(api) + ": n=" + std::to_string(a.n) + " must be in [1, " +
                           std::to_string(cuda::kMaxMergeSources) + "]");
  }
  if (a.batch < 0) {
    return InvalidArgument(std::string(api) + ": batch=" + std::to_string(a.batch) +
                           " must be >= 0");
  }
  if (a.heads_per_rank < 1) {
    return InvalidArgument(std::string(api) + ": heads_per_rank=" +
                           std::to_string(a.heads_per_rank) + " must be >= 1");
  }
  if (a.o_dtype != DataType::kF32 && a.o_dtype != DataType::kBF16) {
    return InvalidArgument(std::string(api) + ": o_dtype must be f32 or bf16, got " +
                           std::string(DataTypeName(a.o_dtype)));
  }
  return CheckHeadDim(api, a.head_dim);
}

int64_t LseOffsetBytes(const CudaA2aParams& a) {
  return RoundUp16(static_cast<int64_t>(a.batch) * a.heads_per_rank * a.head_dim *
                   ElementBytes(a.o_dtype));
}

}  // namespace

size_t A2aSlotBytes(const CudaA2aParams& a) {
  return static_cast<size_t>(LseOffsetBytes(a) +
                             RoundUp16(static_cast<int64_t>(a.batch) * a.heads_per_rank * 4));
}

Status MergeStatesCuda(const CudaMergeParams& p, void* stream) {
  constexpr const char* kApi = "MergeStatesCuda";
  if (p.n < 1 || p.n > cuda::kMaxMergeSources) {
    return InvalidArgument(std::string(kApi) + ": n=" + std::to_string(p.n) + " must be in [1, " +
                           std::to_string(cuda::kMaxMergeSources) + "]");
  }
  if (p.o_dtype != DataType::kF32 && p.o_dtype != DataType::kBF16) {
    return InvalidArgument(std::string(kApi) + ": o_dtype must be f32 or bf16, got " +
                           std::string(DataTypeName(p.o_dtype)));
  }
  if (p.num_states < 0) {
    return InvalidArgument(std::string(kApi) + ": num_states=" + std::to_string(p.num_states) +
                           " must be >= 0");
  }
  CTXPAR_RETURN_IF_ERROR(CheckHeadDim(kApi, p.head_dim));
  if (p.num_states == 0) return Status::Ok();
  CTXPAR_RETURN_IF_ERROR(CheckPointer(kApi, "o_parts", p.o_parts));
  CTXPAR_RETURN_IF_ERROR(CheckPointer(kApi, "o", p.o));
  if (p.lse_parts == nullptr) return InvalidArgument(std::string(kApi) + ": lse_parts is null");
  cuda::MergePlanes planes;
  planes.o = p.o_parts;
  planes.o_stride_bytes = static_cast<int64_t>(p.num_states) * p.head_dim * ElementBytes(p.o_dtype);
  planes.lse = p.lse_parts;
  planes.lse_stride = p.num_states;
  planes.n = p.n;
  planes.num_states = p.num_states;
  planes.head_dim = p.head_dim;
  planes.out_o = p.o;
  planes.out_lse = p.lse;
  return cuda::CudaStatus(cuda::LaunchMerge(planes, p.o_dtype, static_cast<cudaStream_t>(stream)),
                          kApi);
}

Status PackA2aCuda(const CudaA2aParams& a, const float* o, const float* lse, void* send,
                   void* stream) {
  constexpr const char* kApi = "PackA2aCuda";
  CTXPAR_RETURN_IF_ERROR(CheckA2a(kApi, a));
  if (a.batch == 0) return Status::Ok();
  CTXPAR_RETURN_IF_ERROR(CheckPointer(kApi, "o", o));
  CTXPAR_RETURN_IF_ERROR(CheckPointer(kApi, "send", send));
  if (lse == nullptr) return InvalidArgument(std::string(kApi) + ": lse is null");
  return cuda::CudaStatus(cuda::LaunchPack(o, lse, send, a, static_cast<int64_t>(A2aSlotBytes(a)),
                                           LseOffsetBytes(a), static_cast<cudaStream_t>(stream)),
                          kApi);
}

Status UnpackMergeA2aCuda(const CudaA2aParams& a, const void* recv, float* o, float* lse,
                          void* stream) {
  constexpr const char* kApi = "UnpackMergeA2aCuda";
  CTXPAR_RETURN_IF_ERROR(CheckA2a(kApi, a));
  if (a.batch == 0) return Status::Ok();
  CTXPAR_RETURN_IF_ERROR(CheckPointer(kApi, "recv", recv));
  CTXPAR_RETURN_IF_ERROR(CheckPointer(kApi, "o", o));
  const int64_t slot = static_cast<int64_t>(A2aSlotBytes(a));
  cuda::MergePlanes planes;
  planes.o = recv;
  planes.o_stride_bytes = slot;
  planes.lse = reinterpret_cast<const float*>(static_cast<const char*>(recv) + LseOffsetBytes(a));
  planes.lse_stride = static_cast<int>(slot / 4);
  planes.n = a.n;
  planes.num_states = a.batch * a.heads_per_rank;
  planes.head_dim = a.head_dim;
  planes.out_o = o;
  planes.out_lse = lse;
  return cuda::CudaStatus(cuda::LaunchMerge(planes, a.o_dtype, static_cast<cudaStream_t>(stream)),
                          kApi);
}

}  // namespace ctxpar
