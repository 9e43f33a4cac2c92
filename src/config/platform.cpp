// Platform specs (--platform, CTXPAR_PLATFORM) and the fi_a2a runtime check.
#include "ctxpar/platform.h"

#include <cstdlib>
#include <string>

#include "ctxpar/config.h"
#include "ctxpar/error_catalog.h"

namespace ctxpar {
namespace {

std::string OriginSuffix(PlatformOrigin origin) {
  switch (origin) {
    case PlatformOrigin::kProbe:
      return "probed";
    case PlatformOrigin::kFlag:
      return "from --platform";
    case PlatformOrigin::kEnvironment:
      return "from CTXPAR_PLATFORM";
  }
  return "";
}

Status BadSpec(std::string_view spec, std::string_view origin) {
  return CatalogError("CTXPAR-FLAG-006",
                      {{"value", PyRepr(spec)}, {"origin", std::string(origin)}});
}

}  // namespace

std::string Platform::Spec() const {
  switch (kind) {
    case PlatformKind::kCpu:
      return "cpu";
    case PlatformKind::kRocm:
      return "rocm";
    case PlatformKind::kCuda:
      return "cuda:sm" + std::to_string(sm) + (mnnvl_fabric ? "+mnnvl" : "");
  }
  return "cpu";
}

Expected<Platform> ParsePlatform(std::string_view spec, std::string_view origin) {
  Platform p;
  p.origin = origin == "CTXPAR_PLATFORM" ? PlatformOrigin::kEnvironment : PlatformOrigin::kFlag;
  if (spec == "cpu") {
    p.kind = PlatformKind::kCpu;
    p.description = "CPU only (" + OriginSuffix(p.origin) + ")";
    return p;
  }
  if (spec == "rocm") {
    p.kind = PlatformKind::kRocm;
    p.description = "AMD ROCm GPU (" + OriginSuffix(p.origin) + ")";
    return p;
  }
  constexpr std::string_view kCudaPrefix = "cuda:sm";
  constexpr std::string_view kMnnvl = "+mnnvl";
  if (!spec.starts_with(kCudaPrefix)) return BadSpec(spec, origin);
  std::string_view rest = spec.substr(kCudaPrefix.size());
  if (rest.ends_with(kMnnvl)) {
    p.mnnvl_fabric = true;
    rest.remove_suffix(kMnnvl.size());
  }
  if (rest.size() < 2 || rest.size() > 3 || rest.front() == '0') return BadSpec(spec, origin);
  int sm = 0;
  for (char c : rest) {
    if (c < '0' || c > '9') return BadSpec(spec, origin);
    sm = sm * 10 + (c - '0');
  }
  p.kind = PlatformKind::kCuda;
  p.sm = sm;
  p.description = "NVIDIA CUDA GPU (sm" + std::to_string(sm) + "), " +
                  (p.mnnvl_fabric ? "MNNVL fabric" : "no MNNVL fabric") + " (" +
                  OriginSuffix(p.origin) + ")";
  return p;
}

Expected<Platform> PlatformFromEnvironmentOrProbe() {
  const char* env = std::getenv("CTXPAR_PLATFORM");
  if (env != nullptr && *env != '\0') return ParsePlatform(env, "CTXPAR_PLATFORM");
  return ProbePlatform();
}

Expected<Platform> PlatformForLaunch(const LaunchConfig& raw) {
  if (raw.given("platform")) return ParsePlatform(std::get<std::string>(raw.raw("platform")));
  return PlatformFromEnvironmentOrProbe();
}

Status CheckFiA2aRuntime(const Platform& platform) {
  std::string found;
  if (!platform.is_cuda()) {
    found = "no CUDA GPU";
  } else if (platform.sm < 90) {
    found = "compute capability sm" + std::to_string(platform.sm) + ", below SM90";
  } else if (!platform.mnnvl_fabric) {
    found = "no MNNVL fabric support";
  } else {
    return Status::Ok();
  }
  return CatalogError("CTXPAR-DCP-006", {{"found", found + " (platform " + platform.Spec() + ")"}});
}

}  // namespace ctxpar
