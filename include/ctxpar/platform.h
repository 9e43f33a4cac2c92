// The platform ctxpar runs on: CPU only, AMD ROCm, or NVIDIA CUDA with its compute capability and
// MNNVL fabric support. Rules that depend on the hardware (fi_a2a, the MoE all-to-all backends)
// read a Platform; the probe fills one in at run time, `--platform` and the environment variable
// CTXPAR_PLATFORM override it for tests and dry runs.
//
// Thread safety: ProbePlatform may be called from any thread (the CUDA runtime serialises its
// own initialisation); everything else is a pure function of its arguments.
#pragma once

#include <string>
#include <string_view>

#include "ctxpar/status.h"

namespace ctxpar {

enum class PlatformKind { kCpu, kRocm, kCuda };

// Where a Platform came from. A platform named by the user (flag or environment) is taken as the
// target of a dry run, so the init-time platform checks apply to it; a probed one is this machine.
enum class PlatformOrigin { kProbe, kFlag, kEnvironment };

struct Platform {
  PlatformKind kind = PlatformKind::kCpu;
  int sm = 0;                 // compute capability major*10 + minor (90 = Hopper); 0 when not CUDA
  bool mnnvl_fabric = false;  // device 0 can export memory as a fabric handle (platform_probe.cpp)
  std::string description;    // for humans: "NVIDIA H200 (sm90), no MNNVL fabric, probed"
  PlatformOrigin origin = PlatformOrigin::kProbe;

  bool is_cpu() const { return kind == PlatformKind::kCpu; }
  bool is_cuda() const { return kind == PlatformKind::kCuda; }
  bool is_rocm() const { return kind == PlatformKind::kRocm; }
  // The spec that ParsePlatform reads back: "cpu", "rocm", "cuda:sm90", "cuda:sm100+mnnvl".
  std::string Spec() const;
};

// Parses "cpu", "rocm", "cuda:smXY" or "cuda:smXY+mnnvl" (XY: two or three digits, >= 10).
// Fails with CTXPAR-FLAG-006 naming `origin` ("--platform", "CTXPAR_PLATFORM").
Expected<Platform> ParsePlatform(std::string_view spec, std::string_view origin = "--platform");

// What this machine is, read at run time. A build with CUDA on a machine without a driver or a
// device reports cpu; a build without CUDA always reports cpu. Never fails.
Platform ProbePlatform();

// The platform to use when the user gave no --platform: CTXPAR_PLATFORM when it is set (origin
// kEnvironment; an invalid value is CTXPAR-FLAG-006), otherwise ProbePlatform().
Expected<Platform> PlatformFromEnvironmentOrProbe();

// The authoritative fi_a2a probe run at runtime init (CTXPAR-DCP-006, kFailedPrecondition):
// fi_a2a needs a CUDA device of SM90 or newer with MNNVL fabric support.
Status CheckFiA2aRuntime(const Platform& platform);

}  // namespace ctxpar
