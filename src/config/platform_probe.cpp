// ProbePlatform: what this machine is, read at run time.
//
// With CUDA, the runtime is asked for devices; no driver or no device means CPU, so one binary
// serves GPU and CPU machines. Fabric support is a driver attribute that the runtime does not
// expose: cuDeviceGetAttribute is fetched through cudaGetDriverEntryPointByVersion, because
// libcuda is not there to link against on build machines without a driver.
#include <string>

#include "ctxpar/platform.h"

#if defined(CTXPAR_HAVE_CUDA)
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace ctxpar {

#if defined(CTXPAR_HAVE_CUDA)
namespace {

bool FabricSupported(int device) {
  using GetAttributeFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult query{};
  if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &fn, 12000, cudaEnableDefault,
                                       &query) != cudaSuccess ||
      query != cudaDriverEntryPointSuccess || fn == nullptr) {
    return false;
  }
  int supported = 0;
  CUresult rc = reinterpret_cast<GetAttributeFn>(fn)(
      &supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, device);
  return rc == CUDA_SUCCESS && supported != 0;
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
