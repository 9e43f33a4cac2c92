// Turning CUDA runtime errors into Status (internal to src/cuda and its tests).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "ctxpar/status.h"

namespace ctxpar::cuda {

inline Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ")");
}

}  // namespace ctxpar::cuda

#define CTXPAR_CUDA_RETURN_IF_ERROR(expr) \
  CTXPAR_RETURN_IF_ERROR(::ctxpar::cuda::CudaStatus((expr), #expr))
