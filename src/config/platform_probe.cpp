// ProbePlatform: what this machine is, read at run time.
//
// With CUDA, the runtime is asked for devices; no driver or no device means CPU, so one binary
// serves GPU and CPU machines. Fabric support is read through driver calls that the runtime does
// not expose (a device attribute, then a trial fabric allocation); they are fetched through
// cudaGetDriverEntryPointByVersion, because libcuda is not there to link against on build
// machines without a driver.
#include <string>

#include "ctxpar/platform.h"

#if defined(CTXPAR_HAVE_CUDA)
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace ctxpar {

#if defined(CTXPAR_HAVE_CUDA)
namespace {

// A driver entry point by name (see the file comment), or null.
template <class Fn>
Fn DriverFn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult query{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &query) !=
          cudaSuccess ||
      query != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// The attribute says what the GPU and driver can do, not that this node has a fabric to use: it
// has been reported as 1 on H100-class GPUs without an IMEX channel. What fi_a2a needs is memory
// it can export as a fabric handle, so the probe makes one, as NCCL does before it uses fabric
// handles (there cuMemCreate fails with CUDA_ERROR_NOT_PERMITTED or _NOT_SUPPORTED).
bool FabricSupported(int device) {
  const auto get_attribute =
      DriverFn<CUresult (*)(int*, CUdevice_attribute, CUdevice)>("cuDeviceGetAttribute");
  int supported = 0;
  if (get_attribute == nullptr ||
      get_attribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, device) !=
          CUDA_SUCCESS ||
      supported == 0) {
    return false;
  }
  const auto granularity =
      DriverFn<CUresult (*)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags)>(
          "cuMemGetAllocationGranularity");
  const auto create =
      DriverFn<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                            unsigned long long)>("cuMemCreate");
  const auto export_handle =
      DriverFn<CUresult (*)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                            unsigned long long)>("cuMemExportToShareableHandle");
  const auto release = DriverFn<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  if (granularity == nullptr || create == nullptr || export_handle == nullptr ||
      release == nullptr || cudaSetDevice(device) != cudaSuccess ||
      cudaFree(nullptr) != cudaSuccess) {
    return false;
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  size_t bytes = 0;
  if (granularity(&bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || bytes == 0) {
    return false;
  }
  CUmemGenericAllocationHandle handle{};
  if (create(&handle, bytes, &prop, 0) != CUDA_SUCCESS) return false;
  CUmemFabricHandle fabric{};
  const bool exported =
      export_handle(&fabric, handle, CU_MEM_HANDLE_TYPE_FABRIC, 0) == CUDA_SUCCESS;
  release(handle);
  return exported;
}

}  // namespace

Platform ProbePlatform() {
  Platform p;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::string why = "no CUDA device";
    if (err == cudaErrorInsufficientDriver) why = "no usable CUDA driver";
    if (err != cudaSuccess) why += std::string(" (") + cudaGetErrorName(err) + ")";
    p.description = "CPU only (probed: " + why + ")";
    return p;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    p.description = "CPU only (probed: the properties of CUDA device 0 are unreadable)";
    return p;
  }
  p.kind = PlatformKind::kCuda;
  p.sm = prop.major * 10 + prop.minor;
  p.mnnvl_fabric = FabricSupported(0);
  p.description = std::string(prop.name) + " (sm" + std::to_string(p.sm) + "), " +
                  std::to_string(count) + " device(s), " +
                  (p.mnnvl_fabric ? "MNNVL fabric" : "no MNNVL fabric") + " (probed)";
  return p;
}

#else

Platform ProbePlatform() {
  Platform p;
  p.description = "CPU only (probed: this build has no CUDA support)";
  return p;
}

#endif

}  // namespace ctxpar
