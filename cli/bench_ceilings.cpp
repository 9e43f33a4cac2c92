#include "bench_ceilings.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <system_error>
#include <thread>

#include "command.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/host_buffer.h"
#include "error_report.h"

namespace ctxpar::cli {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Timing TimeOnThreads(int threads, const std::function<void(int)>& fn) {
  std::atomic<int> ready{0};
  std::atomic<int> go{0};  // 1: run, -1: a thread could not start, return
  std::vector<double> cpu(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    try {
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (go.load(std::memory_order_acquire) == 0) std::this_thread::yield();
        if (go.load(std::memory_order_acquire) < 0) return;
        const double c0 = CpuSeconds(CLOCK_THREAD_CPUTIME_ID);
        fn(t);
        cpu[t] = CpuSeconds(CLOCK_THREAD_CPUTIME_ID) - c0;
      });
    } catch (const std::system_error& e) {
      go.store(-1, std::memory_order_release);
      for (std::thread& started : pool) started.join();
      std::exit(ReportError(CatalogError("CTXPAR-SYS-001", {{"count", std::to_string(threads)},
                                                            {"started", std::to_string(t)},
                                                            {"reason", e.what()}}),
                            "ctxpar bench: "));
    }
  }
  while (ready.load() < threads) std::this_thread::yield();
  const Clock::time_point start = Clock::now();
  go.store(1, std::memory_order_release);
  for (std::thread& t : pool) t.join();
  return {Seconds(start, Clock::now()), std::accumulate(cpu.begin(), cpu.end(), 0.0) / threads};
}

namespace {

__attribute__((target("avx512f"))) float Sum16(__m512 v) {
  alignas(64) float s[16];
  _mm512_store_ps(s, v);
  return std::accumulate(s, s + 16, 0.0f);
}

__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t n) {
  __m512 a[8];
  for (__m512& x : a) x = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 128) {
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return Sum16(a[0]);
}

__attribute__((target("avx2"))) float SumAvx2(const float* p, size_t n) {
  __m256 a[8];
  for (__m256& x : a) x = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 64) {
    for (int j = 0; j < 8; ++j) a[j] = _mm256_add_ps(a[j], _mm256_load_ps(p + i + 8 * j));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  alignas(32) float s[8];
  _mm256_store_ps(s, a[0]);
  return std::accumulate(s, s + 8, 0.0f);
}

float SumScalar(const float* p, size_t n) {
  float a[8] = {};
  for (size_t i = 0; i < n; i += 8) {
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  }
  return std::accumulate(a, a + 8, 0.0f);
}

// Independent chains: more than latency x throughput (Zen 3 and Skylake: 4 x 2 = 8), few enough
// that the chains and the two constants stay in registers: AVX2 and SSE have 16, and 16 chains
// there spilled, which read 51 instead of 86 GFLOP/s on a 2.7 GHz Zen 3 core.
constexpr int kPeakAccs = 16;  // AVX-512: 32 registers
constexpr int kPeakAccs16Regs = 12;

__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t iters) {
  __m512 a[kPeakAccs];
  for (int j = 0; j < kPeakAccs; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 m = _mm512_set1_ps(0.999999f);
  const __m512 c = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < kPeakAccs; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  }
  for (int j = 1; j < kPeakAccs; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return Sum16(a[0]);
}

__attribute__((target("avx512f,avx512bf16"))) float DpBf16LoopAvx512(int64_t iters) {
  __m512 a[kPeakAccs];
  for (int j = 0; j < kPeakAccs; ++j) a[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < kPeakAccs; ++j) a[j] = _mm512_dpbf16_ps(a[j], x, y);
  }
  for (int j = 1; j < kPeakAccs; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  return Sum16(a[0]);
}

__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iters) {
  __m256 a[kPeakAccs16Regs];
  for (int j = 0; j < kPeakAccs16Regs; ++j) a[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.999999f);
  const __m256 c = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < kPeakAccs16Regs; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  }
  for (int j = 1; j < kPeakAccs16Regs; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  alignas(32) float s[8];
  _mm256_store_ps(s, a[0]);
  return std::accumulate(s, s + 8, 0.0f);
}

__attribute__((target("avx512f,avx512vnni"))) float VnniLoop(int64_t iters) {
  __m512i a[kPeakAccs];
  for (int j = 0; j < kPeakAccs; ++j) a[j] = _mm512_set1_epi32(j);
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < kPeakAccs; ++j) a[j] = _mm512_dpbusd_epi32(a[j], x, y);
  }
  for (int j = 1; j < kPeakAccs; ++j) a[0] = _mm512_add_epi32(a[0], a[j]);
  alignas(64) std::int32_t s[16];
  _mm512_store_si512(s, a[0]);
  return static_cast<float>(std::accumulate(s, s + 16, 0));
}

// 256-bit int8 products: AVX-VNNI's vpdpbusd on 8 chains in named registers (GCC 12 stores
// arrays of them to the stack on every pass), and AVX2's vpmaddubsw, whose int16 pairs the kernel
// adds up with vpaddw on other ports: its throughput alone, written out because GCC spills even
// named registers of that loop (no value is read).
constexpr int kYmmInt8Chains = 8;

float MaddubsLoopAvx2(int64_t iters) {
#define CTXPAR_MADDUBS(d) "vpmaddubsw %%ymm15, %%ymm14, %%ymm" #d "\n\t"
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile(CTXPAR_MADDUBS(0) CTXPAR_MADDUBS(1) CTXPAR_MADDUBS(2) CTXPAR_MADDUBS(3)
                     CTXPAR_MADDUBS(4) CTXPAR_MADDUBS(5) CTXPAR_MADDUBS(6) CTXPAR_MADDUBS(7)
                 :
                 :
                 : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7");
  }
#undef CTXPAR_MADDUBS
  return 0.0f;
}

// 8 chains of the 256-bit vpdpbusd: AVX-VNNI's VEX encoding, or (CPUs with AVX512-VNNI but not
// AVX-VNNI, where the int8 path's avx_vnni kernel runs it) the EVEX one.
#define CTXPAR_VNNI_YMM_LOOP(dpbusd)                                                          \
  __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2),    \
          a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5),    \
          a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7);                               \
  const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);                            \
  for (int64_t i = 0; i < iters; ++i) {                                                       \
    a0 = dpbusd(a0, x, y);                                                                    \
    a1 = dpbusd(a1, x, y);                                                                    \
    a2 = dpbusd(a2, x, y);                                                                    \
    a3 = dpbusd(a3, x, y);                                                                    \
    a4 = dpbusd(a4, x, y);                                                                    \
    a5 = dpbusd(a5, x, y);                                                                    \
    a6 = dpbusd(a6, x, y);                                                                    \
    a7 = dpbusd(a7, x, y);                                                                    \
  }                                                                                           \
  const __m256i sum =                                                                         \
      _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),  \
                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7))); \
  return static_cast<float>(_mm256_extract_epi32(sum, 0));

__attribute__((target("avx2,avxvnni"))) float VnniLoopYmm(int64_t iters) {
  CTXPAR_VNNI_YMM_LOOP(_mm256_dpbusd_avx_epi32)
}
__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) float VnniLoopYmmEvex(int64_t iters) {
  CTXPAR_VNNI_YMM_LOOP(_mm256_dpbusd_epi32)
}
#undef CTXPAR_VNNI_YMM_LOOP

// Four accumulator tiles (0-3) over two A (4, 5) and two B (6, 7) tiles, all 16 x 64 bytes: each
// tdpbssd is 16 x 16 x 64 int8 multiply-adds, each tdpbf16ps (kBf16) 16 x 16 x 32 of bf16 pairs
// into fp32. The tile instructions are inline assembly in GCC's headers; ldtilecfg and
// tilerelease are per thread. The result only keeps the loop alive.
template <bool kBf16>
__attribute__((target("amx-tile,amx-int8,amx-bf16"))) float AmxLoop(int64_t iters) {
  struct alignas(64) {
    std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
    std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
    std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
  } config;
  alignas(64) std::uint16_t ab[16 * 32];
  // bf16 1.0, or int8 1s.
  std::fill(std::begin(ab), std::end(ab), kBf16 ? std::uint16_t{0x3f80} : std::uint16_t{0x0101});
  alignas(64) std::int32_t c[16 * 16];
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (int64_t i = 0; i < iters; ++i) {
    if constexpr (kBf16) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    }
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return static_cast<float>(c[0]);
}

float FmaLoopScalar(int64_t iters) {
  float a[kPeakAccs16Regs];
  for (int j = 0; j < kPeakAccs16Regs; ++j) a[j] = static_cast<float>(j);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < kPeakAccs16Regs; ++j) a[j] = a[j] * 0.999999f + 1e-6f;
  }
  return std::accumulate(a, a + kPeakAccs16Regs, 0.0f);
}

}  // namespace

Rate MeasureReadCeiling(int threads, size_t bytes, int reps, CpuIsa isa) {
  const size_t n = bytes / sizeof(float) / (128 * threads) * (128 * threads);
  // The KV pools' allocator (huge pages where THP allows), so that the ceiling and the kernels
  // pay the same page walks.
  Expected<HostBuffer> mem = HostBuffer::Allocate(n * sizeof(float));
  if (!mem.ok()) {
    std::fprintf(stderr, "ctxpar bench: %s\n", mem.status().ToString().c_str());
    std::exit(kExitInternal);
  }
  float* const buf = mem->as<float>();
  std::fill(buf, buf + n, 1.0f);
  std::vector<float> sink(threads);
  const size_t per = n / threads;
  Timing best;
  for (int r = 0; r < reps; ++r) {
    best.KeepBest(TimeOnThreads(threads, [&](int t) {
      const float* p = buf + per * t;
      sink[t] = isa >= CpuIsa::kAvx512 ? SumAvx512(p, per)
                : isa == CpuIsa::kAvx2 ? SumAvx2(p, per)
                                       : SumScalar(p, per);
    }));
  }
  if (std::accumulate(sink.begin(), sink.end(), 0.0f) != static_cast<float>(per) * threads) {
    std::fprintf(stderr, "(read ceiling checksum differs; the figure is still a read rate)\n");
  }
  const double gb = static_cast<double>(n) * sizeof(float) / 1e9;
  return {gb / best.wall, gb / best.cpu};
}

// Peak GFLOP/s (a multiply-add counts 2) of `threads` threads; dpbf16 counts 4 per lane.
Rate MeasureComputePeak(int threads, CpuIsa isa, bool dpbf16, int reps) {
  const int64_t iters = 20'000'000;
  int lanes = isa >= CpuIsa::kAvx512 ? 16 : isa == CpuIsa::kAvx2 ? 8 : 1;
  const double flop_per_op = dpbf16 ? 4.0 : 2.0;
  std::vector<float> sink(threads);
  Timing best;
  for (int r = 0; r < reps; ++r) {
    best.KeepBest(TimeOnThreads(threads, [&](int t) {
      sink[t] = dpbf16                   ? DpBf16LoopAvx512(iters)
                : isa >= CpuIsa::kAvx512 ? FmaLoopAvx512(iters)
                : isa == CpuIsa::kAvx2   ? FmaLoopAvx2(iters)
                                         : FmaLoopScalar(iters / 16);
    }));
  }
  const int64_t done = isa == CpuIsa::kScalar && !dpbf16 ? iters / 16 : iters;
  const int chains = isa >= CpuIsa::kAvx512 || dpbf16 ? kPeakAccs : kPeakAccs16Regs;
  const double gflop = static_cast<double>(done) * chains * lanes * flop_per_op * threads / 1e9;
  return {gflop / best.wall, gflop / best.cpu};
}

Rate MeasureInt8Peak(int threads, std::string_view unit, int reps) {
  const bool amx = unit == "amx", zmm = unit == "avx512_vnni", vnni = unit == "avx_vnni";
  const int64_t iters = amx ? 2'000'000 : 20'000'000;
  std::vector<float> sink(threads);
  Timing best;
  for (int r = 0; r < reps; ++r) {
    best.KeepBest(TimeOnThreads(threads, [&](int t) {
      sink[t] = amx   ? AmxLoop<false>(iters)
                : zmm ? VnniLoop(iters)
                : vnni
                    ? (DetectCpuFeatures().avx_vnni ? VnniLoopYmm(iters) : VnniLoopYmmEvex(iters))
                    : MaddubsLoopAvx2(iters);
    }));
  }
  const double macs_per_iter = amx   ? 4.0 * 16 * 16 * 64
                               : zmm ? kPeakAccs * 64.0
                                     : kYmmInt8Chains * 32.0;
  const double gop = 2.0 * static_cast<double>(iters) * macs_per_iter * threads / 1e9;
  return {gop / best.wall, gop / best.cpu};
}

Rate MeasureBf16Peak(int threads, bool amx, CpuIsa isa, int reps) {
  if (!amx) return MeasureComputePeak(threads, isa, /*dpbf16=*/true, reps);
  const int64_t iters = 2'000'000;
  std::vector<float> sink(threads);
  Timing best;
  for (int r = 0; r < reps; ++r) {
    best.KeepBest(TimeOnThreads(threads, [&](int t) { sink[t] = AmxLoop<true>(iters); }));
  }
  const double gflop = 2.0 * static_cast<double>(iters) * 4 * 16 * 16 * 32 * threads / 1e9;
  return {gflop / best.wall, gflop / best.cpu};
}

double LoadAverage() {
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  return load;
}

}  // namespace ctxpar::cli
