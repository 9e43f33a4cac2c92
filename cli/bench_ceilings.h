// The ceilings the `ctxpar bench` kernels are measured against, in the same run with the same
// thread count: a STREAM-like read of a buffer far larger than the caches (GB/s) and a
// register-blocked FMA loop (GFLOP/s; or a vdpbf16ps loop on a CPU with avx512_bf16). Also the
// timing helpers they share. Each rate comes by wall time and by CPU time per thread: on a
// shared machine the second says what the code does while it runs, the first also how often it
// was scheduled.
#pragma once

#include <chrono>
#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/cpu_features.h"

namespace ctxpar::cli {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b);
double CpuSeconds(clockid_t clock);

struct Timing {
  double wall = 1e30;
  double cpu = 1e30;
  void KeepBest(const Timing& t) {
    wall = std::min(wall, t.wall);
    cpu = std::min(cpu, t.cpu);
  }
};

// Runs fn(thread) on `threads` threads started together. When the system refuses a thread, the
// ones started are released without running fn and joined, and the benchmark exits with
// CTXPAR-SYS-001.
Timing TimeOnThreads(int threads, const std::function<void(int)>& fn);

// A rate by wall time and by CPU time per thread.
struct Rate {
  double wall = 0;
  double cpu = 0;
};

// Read bandwidth in GB/s: each thread sums its own slice of one buffer of `bytes` (from
// HostBuffer: huge pages where THP allows, like the KV pools); best of `reps`.
Rate MeasureReadCeiling(int threads, size_t bytes, int reps, CpuIsa isa);

// Peak GFLOP/s (a multiply-add counts 2) of `threads` threads; dpbf16 counts 4 per lane.
Rate MeasureComputePeak(int threads, CpuIsa isa, bool dpbf16, int reps);

// Peak int8 GOP/s (a multiply-add counts 2) of `threads` threads on the units of the int8 path
// `unit` (compute::MatMulInt8Isa's name): AMX tile multiplies (tdpbssd on full 16 x 64 tiles),
// AVX512-VNNI vpdpbusd, AVX-VNNI's 256-bit vpdpbusd, or AVX2's vpmaddubsw (32 byte products
// a 256-bit instruction). The caller has made sure the CPU has them (and, for AMX, that Linux
// granted the tile state: compute::MatMulInt8Isa).
Rate MeasureInt8Peak(int threads, std::string_view unit, int reps);

// Peak bf16 GFLOP/s (a multiply-add counts 2) of `threads` threads: AMX tile multiplies
// (tdpbf16ps on full tiles) when `amx`, else vdpbf16ps (MeasureComputePeak's dpbf16 loop). The
// caller has made sure the CPU has them (compute::MatMulBf16Isa).
Rate MeasureBf16Peak(int threads, bool amx, CpuIsa isa, int reps);

// The 1-minute load average: the machine is shared, so every report says how busy it was.
double LoadAverage();

}  // namespace ctxpar::cli
