// `ctxpar bench attention`: CPU partial decode attention (one sequence, batch 1) against two
// ceilings measured in the same run with the same thread count: a STREAM-like read of a buffer
// far larger than the caches (GB/s) and a register-blocked FMA loop (GFLOP/s; for bf16 KV on a
// CPU with avx512_bf16, a vdpbf16ps loop, or on the amx path tile multiplies, and for fp8 KV in
// tiles16 pages there (with AVX512_VBMI) a vdpbf16ps loop: the units the kernel's products use).
// With
// --prefill N the query rows are instead the last N tokens of the context, each seeing the keys
// up to itself (a causal prefill chunk, split-KV as the engine runs it): that work reads its keys
// from the caches and is bounded by the FMA peak. With --engine-chunks a decode row is run as the
// engine runs it: its keys in kSplitKvKeys chunks, one task each, on a thread pool that lives for
// the whole benchmark (the automatic split instead cuts a row into 4 chunks a thread).
#include <immintrin.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bench.h"
#include "bench_ceilings.h"
#include "ctxpar/attention.h"
#include "ctxpar/cpu_features.h"
#include "ctxpar/dtype.h"
#include "ctxpar/host_buffer.h"
#include "ctxpar/thread_pool.h"
#include "error_report.h"
#include "models/batch_attention.h"
#include "option_checks.h"

namespace ctxpar::cli {
namespace {

// ---- attention -------------------------------------------------------------------------------

struct Kind {
  std::string name;  // gqa or mla
  DataType dtype;
  int num_q_heads, num_kv_heads, head_dim_qk, head_dim_v;
  bool mla;
};

struct Result {
  std::string kind, dtype, format;
  int threads;
  int context;
  Timing time;
  Rate gbps, gflops, read_ceiling, compute_peak;
  bool bf16;  // compute_peak is the bf16 unit's (vdpbf16ps or AMX)
};

// The KV type as the kinds name it.
std::string KvName(DataType dtype) {
  switch (dtype) {
    case DataType::kBF16:
      return "bf16";
    case DataType::kF8E4M3:
      return "fp8e4m3";
    case DataType::kF8E5M2:
      return "fp8e5m2";
    default:
      return "fp32";
  }
}

// One sequence of `context` tokens in pages of 64 slots, pages shuffled over the pool, in the
// given page format (MLA: always kRows); one decode row, or the last `prefill` tokens as rows.
// Threads are started per call rather than taken from a pool, so that every thread works for the
// whole call and the process CPU time per thread is each thread's (a pool's idle worker would
// inflate the CPU-time rates); the start costs about 30 us, under 1 % of a call at 32k. `pool`
// (--engine-chunks) runs the call on the pool instead, in the engine's chunks; its idle worker
// spins, so that the CPU-time rates there are the wall ones.
Result RunOne(const Kind& kind, KvPageFormat format, int context, int prefill, int threads,
              int reps, Rate read_ceiling, Rate fp32_peak, Rate bf16_peak, Rate dpbf16_peak,
              CpuIsa isa, ThreadPool* pool) {
  constexpr int kPage = 64;
  const int pages = (context + kPage - 1) / kPage;
  const size_t elem = DataTypeSize(kind.dtype);
  const size_t k_elems = static_cast<size_t>(pages) * kPage * kind.num_kv_heads * kind.head_dim_qk;
  const size_t v_elems =
      kind.mla ? 0 : static_cast<size_t>(pages) * kPage * kind.num_kv_heads * kind.head_dim_v;
  auto alloc = [](size_t bytes) {
    Expected<HostBuffer> b = HostBuffer::Allocate(bytes);
    if (!b.ok()) {
      std::fprintf(stderr, "ctxpar bench attention: %s\n", b.status().ToString().c_str());
      std::exit(kExitInternal);
    }
    return std::move(*b);
  };
  HostBuffer k = alloc(k_elems * elem);
  HostBuffer v = alloc(std::max<size_t>(v_elems, 1) * elem);
  auto fill = [&](char* p, size_t n) {
    uint32_t x = 12345;
    for (size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      const float f = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
      if (kind.dtype == DataType::kF32) {
        reinterpret_cast<float*>(p)[i] = f;
      } else if (kind.dtype == DataType::kBF16) {
        reinterpret_cast<uint16_t*>(p)[i] = FloatToBf16(f);
      } else {
        reinterpret_cast<uint8_t*>(p)[i] =
            kind.dtype == DataType::kF8E4M3 ? FloatToFp8E4M3(f) : FloatToFp8E5M2(f);
      }
    }
  };
  fill(k.as<char>(), k_elems);
  fill(v.as<char>(), v_elems);
  std::vector<int32_t> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  const int rows = prefill > 0 ? std::min(prefill, context) : 1;
  std::vector<int32_t> row_len(rows), row_seq(rows, 0);
  double keys = 0;
  for (int i = 0; i < rows; ++i) {
    row_len[i] = context - rows + 1 + i;
    keys += row_len[i];
  }
  std::vector<float> q(static_cast<size_t>(rows) * kind.num_q_heads * kind.head_dim_qk);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(rng);
  std::vector<float> o(static_cast<size_t>(rows) * kind.num_q_heads * kind.head_dim_v);
  std::vector<float> lse(static_cast<size_t>(rows) * kind.num_q_heads);
  PartialAttentionParams p;
  p.q = q.data();
  p.o = o.data();
  p.lse = lse.data();
  p.num_rows = rows;
  p.num_q_heads = kind.num_q_heads;
  p.row_seq = row_seq.data();
  p.num_seqs = 1;
  p.row_kv_len = row_len.data();
  // The engine's split-KV chunk (models/batch_attention.h), which prefill rows need to be
  // batch-invariant; a decode row keeps the automatic split that spreads it over the threads,
  // unless it runs as the engine's (`pool`).
  if (prefill > 0 || pool != nullptr) p.split_kv_keys = model::kSplitKvKeys;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kind.head_dim_qk));
  p.kv.k = k.data();
  p.kv.v = kind.mla ? nullptr : v.data();
  p.kv.format = kind.mla ? KvPageFormat::kRows : format;
  p.kv.dtype = kind.dtype;
  p.kv.page_size = kPage;
  p.kv.num_kv_heads = kind.num_kv_heads;
  p.kv.head_dim_qk = kind.head_dim_qk;
  p.kv.head_dim_v = kind.head_dim_v;
  p.kv.block_table = table.data();
  p.kv.max_pages_per_seq = pages;
  p.kv.num_pages = pages;
  p.num_threads = threads;
  p.pool = pool;
  Timing best;
  for (int r = 0; r < reps + 1; ++r) {
    const double c0 = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
    const auto t0 = Clock::now();
    const Status st = PartialAttentionCpu(p);
    const Timing t{Seconds(t0, Clock::now()),
                   (CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - c0) / threads};
    if (!st.ok()) {
      std::fprintf(stderr, "ctxpar bench attention: %s\n", st.ToString().c_str());
      std::exit(kExitInternal);
    }
    if (r > 0) best.KeepBest(t);  // the first run warms the pages and caches
  }
  const double gb = static_cast<double>(context) * kind.num_kv_heads *
                    (kind.head_dim_qk + (kind.mla ? 0 : kind.head_dim_v)) * elem / 1e9;
  const double gflop = 2.0 * keys * kind.num_q_heads * (kind.head_dim_qk + kind.head_dim_v) / 1e9;
  const bool bf16 = kind.dtype == DataType::kBF16 && isa >= CpuIsa::kAvx512Bf16;
  // fp8 in tiles16 pages on the bf16 paths: vdpbf16ps, on the amx path too (attention.h).
  const bool fp8_dp = (kind.dtype == DataType::kF8E4M3 || kind.dtype == DataType::kF8E5M2) &&
                      p.kv.format == KvPageFormat::kTiles16 && isa >= CpuIsa::kAvx512Bf16 &&
                      DetectCpuFeatures().avx512_vbmi;
  return {kind.name,
          KvName(kind.dtype),
          p.kv.format == KvPageFormat::kRows ? "rows" : "tiles16",
          threads,
          context,
          best,
          {gb / best.wall, gb / best.cpu},
          {gflop / best.wall, gflop / best.cpu},
          read_ceiling,
          bf16     ? bf16_peak
          : fp8_dp ? dpbf16_peak
                   : fp32_peak,
          bf16 || fp8_dp};
}

// Keeps every thread of a pool of two or more busy for 100 ms. Right after the ceilings' threads
// exit, Linux placed the pool's worker on the caller's core for tens of milliseconds, where the two
// took turns: 0.11-0.13 ms a call that takes 0.005-0.014 (SmolLM2's shape, 256-768 keys, Zen 4).
// Threads that all stay busy are spread over the cores.
void WarmPool(ThreadPool& pool) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < end) {
    pool.ParallelFor(pool.size(), [](int64_t, int64_t) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
  }
}

int RunAttentionBench(const std::vector<std::string>& args) {
  CLI::App app{"ctxpar bench attention: CPU partial decode attention vs measured ceilings"};
  std::string contexts = "4k,16k,32k,64k,128k,256k";
  std::string thread_list = "1,2";
  std::vector<std::string> kinds = {"gqa-bf16", "gqa-fp32", "mla-fp32", "mla-bf16"};
  const std::vector<std::string> known = {
      "gqa-bf16",        "gqa-fp32",        "mla-fp32",       "mla-bf16",
      "smollm2-fp32",    "smollm2-bf16",    "gemma3-fp32",    "gemma3-bf16",
      "gemma3h1-fp32",   "gemma3h1-bf16",   "gqa-fp8e4m3",    "gqa-fp8e5m2",
      "smollm2-fp8e4m3", "smollm2-fp8e5m2", "gemma3-fp8e4m3", "gemma3-fp8e5m2"};
  int reps = 3;
  int ceiling_mib = 1024;
  bool json = false;
  std::string format_name = "tiles16";
  int prefill = 0;
  bool engine_chunks = false;
  app.add_option("--contexts", contexts, "context lengths in tokens (k = 1024)");
  app.add_option("--format", format_name,
                 "GQA page format: tiles16 (the KV cache's) or rows (MLA is always rows)")
      ->check(CLI::IsMember({"tiles16", "rows"}));
  app.add_option("--threads", thread_list,
                 "thread counts, each at most the machine's hardware threads (default 1,2)");
  app.add_option("--kinds", kinds,
                 "gqa-bf16 gqa-fp32 (32 q heads, 8 KV heads, D 128) mla-fp32 "
                 "mla-bf16 (128 heads, 576/512) smollm2-fp32 smollm2-bf16 (9 q heads, 3 KV "
                 "heads, D 64: the served model's) gemma3-fp32 gemma3-bf16 (Gemma 3 270M: 4 q "
                 "heads, 1 KV head, D 256) gemma3h1-fp32 gemma3h1-bf16 (one of its q heads: a "
                 "rank's at tp 4); gqa, smollm2 and gemma3 also with -fp8e4m3 and -fp8e5m2 KV")
      ->check(CLI::IsMember(known));
  app.add_option("--prefill", prefill,
                 "query rows: 0 one decode row; N the last N tokens of each context, causally "
                 "(a prefill chunk; compare with the FMA peak)")
      ->check(CLI::Range(0, 1 << 16));
  app.add_flag("--engine-chunks", engine_chunks,
               "run each call as the engine does: keys in chunks of " +
                   std::to_string(model::kSplitKvKeys) +
                   " (one task each), on a pool of the thread count kept across calls");
  app.add_option("--reps", reps, "timed runs per point (best is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--ceiling-mib", ceiling_mib, "buffer read by the bandwidth ceiling")
      ->check(CLI::Range(64, 16384));
  app.add_flag("--json", json, "print JSON instead of a table");
  if (const int rc = ParseBenchOptions(app, args, "attention"); rc >= 0) return rc;
  auto fail = [](const Status& s) { return ReportError(s, "ctxpar bench attention: "); };
  // Up to 16M tokens: 64 GiB of bf16 GQA cache, more than this benchmark is meant to allocate.
  Expected<std::vector<int>> ctx_list = ParseCountList("--contexts", contexts, 1, 1 << 24);
  if (!ctx_list.ok()) return fail(ctx_list.status());
  Expected<std::vector<int>> threads_list =
      ParseCountList("--threads", thread_list, 0, std::numeric_limits<int>::max());
  if (!threads_list.ok()) return fail(threads_list.status());
  if (app.count("--threads") == 0) {  // the default list, on a machine with one thread: 1
    std::erase_if(*threads_list, [](int t) { return t > HardwareThreads(); });
  }
  for (int t : *threads_list) {
    if (Status s = CheckThreads("--threads", t, /*zero_means_default=*/false); !s.ok()) {
      return fail(s);
    }
  }
  const KvPageFormat format = format_name == "rows" ? KvPageFormat::kRows : KvPageFormat::kTiles16;
  Expected<CpuIsa> isa = SelectCpuIsa();
  if (!isa.ok()) {
    std::fprintf(stderr, "ctxpar bench attention: %s\n", isa.status().message().c_str());
    return kExitInvalid;
  }
  const std::vector<Kind> all = {
      {"gqa", DataType::kBF16, 32, 8, 128, 128, false},
      {"gqa", DataType::kF32, 32, 8, 128, 128, false},
      {"mla", DataType::kF32, 128, 1, 576, 512, true},
      {"mla", DataType::kBF16, 128, 1, 576, 512, true},
      {"smollm2", DataType::kF32, 9, 3, 64, 64, false},
      {"smollm2", DataType::kBF16, 9, 3, 64, 64, false},
      {"gemma3", DataType::kF32, 4, 1, 256, 256, false},
      {"gemma3", DataType::kBF16, 4, 1, 256, 256, false},
      {"gemma3h1", DataType::kF32, 1, 1, 256, 256, false},
      {"gemma3h1", DataType::kBF16, 1, 1, 256, 256, false},
      {"gqa", DataType::kF8E4M3, 32, 8, 128, 128, false},
      {"gqa", DataType::kF8E5M2, 32, 8, 128, 128, false},
      {"smollm2", DataType::kF8E4M3, 9, 3, 64, 64, false},
      {"smollm2", DataType::kF8E5M2, 9, 3, 64, 64, false},
      {"gemma3", DataType::kF8E4M3, 4, 1, 256, 256, false},
      {"gemma3", DataType::kF8E5M2, 4, 1, 256, 256, false},
  };
  nlohmann::json out = {{"isa", std::string(CpuIsaName(*isa))},
                        {"gqa_page_format", format_name},
                        {"prefill_rows", prefill},
                        {"engine_chunks", engine_chunks},
                        {"hardware_threads", std::thread::hardware_concurrency()},
                        {"load_average_1min", LoadAverage()},
                        {"ceilings", nlohmann::json::array()},
                        {"results", nlohmann::json::array()}};
  if (!json) {
    const std::string rows =
        prefill > 0     ? "causal prefill of the last " + std::to_string(prefill) + " tokens"
        : engine_chunks ? "batch 1, the engine's " + std::to_string(model::kSplitKvKeys) +
                              "-key chunks on a pool"
                        : "batch 1";
    std::printf(
        "ctxpar bench attention  isa=%s  load average %.2f  (best of %d runs; GQA: 32 q heads, "
        "8 KV heads, D 128, %s pages; MLA: 128 heads, 576/512, rows; %s)\n",
        std::string(CpuIsaName(*isa)).c_str(), LoadAverage(), reps, format_name.c_str(),
        rows.c_str());
  }
  for (int threads : *threads_list) {
    std::unique_ptr<ThreadPool> pool;
    if (engine_chunks) {
      Expected<std::unique_ptr<ThreadPool>> created = ThreadPool::Create(threads);
      if (!created.ok()) return fail(created.status());
      pool = std::move(*created);
    }
    const Rate read = MeasureReadCeiling(threads, static_cast<size_t>(ceiling_mib) << 20, 5, *isa);
    const Rate fma = MeasureComputePeak(threads, *isa, false, 3);
    // bf16 KV's products: AMX tile multiplies on the amx path, else vdpbf16ps.
    const Rate dp = *isa >= CpuIsa::kAvx512Bf16
                        ? MeasureBf16Peak(threads, *isa == CpuIsa::kAmx, *isa, 3)
                        : Rate{};
    const char* bf16_unit = *isa == CpuIsa::kAmx ? "amx" : "dpbf16";
    // fp8's products on the amx path are vdpbf16ps, not tiles.
    const Rate dp_vec = *isa == CpuIsa::kAmx ? MeasureBf16Peak(threads, false, *isa, 3) : dp;
    out["ceilings"].push_back({{"threads", threads},
                               {"read_gbps", read.wall},
                               {"fma_gflops", fma.wall},
                               {"bf16_unit", bf16_unit},
                               {"bf16_gflops", dp.wall},
                               {"dpbf16_gflops", dp_vec.wall},
                               {"cpu_time",
                                {{"read_gbps", read.cpu},
                                 {"fma_gflops", fma.cpu},
                                 {"bf16_gflops", dp.cpu},
                                 {"dpbf16_gflops", dp_vec.cpu}}}});
    if (!json) {
      std::printf(
          "\nthreads %d: read ceiling %.1f GB/s (%.1f by CPU time), FMA peak %.1f GFLOP/s "
          "(%.1f)",
          threads, read.wall, read.cpu, fma.wall, fma.cpu);
      if (dp.wall > 0) {
        std::printf(", %s bf16 peak %.1f GFLOP/s (%.1f)", bf16_unit, dp.wall, dp.cpu);
      }
      if (*isa == CpuIsa::kAmx) {
        std::printf(", dpbf16 peak (fp8 KV) %.1f GFLOP/s (%.1f)", dp_vec.wall, dp_vec.cpu);
      }
      std::printf("\n%-4s %-7s %7s %9s %7s %6s %8s %6s | %7s %6s %8s %6s\n", "kind", "kv",
                  "context", "time ms", "GB/s", "%read", "GFLOP/s", "%peak", "cpu:GB/s", "%read",
                  "GFLOP/s", "%peak");
    }
    if (pool != nullptr && pool->size() > 1) WarmPool(*pool);
    for (const Kind& kind : all) {
      const std::string name = kind.name + "-" + KvName(kind.dtype);
      if (std::find(kinds.begin(), kinds.end(), name) == kinds.end()) continue;
      for (int ctx : *ctx_list) {
        const Result r = RunOne(kind, format, ctx, prefill, threads, reps, read, fma, dp, dp_vec,
                                *isa, pool.get());
        out["results"].push_back({{"kind", r.kind},
                                  {"kv_dtype", r.dtype},
                                  {"page_format", r.format},
                                  {"threads", r.threads},
                                  {"context", r.context},
                                  {"seconds", r.time.wall},
                                  {"kv_read_gbps", r.gbps.wall},
                                  {"gflops", r.gflops.wall},
                                  {"read_ceiling_gbps", r.read_ceiling.wall},
                                  {"compute_peak_gflops", r.compute_peak.wall},
                                  {"compute_peak_is_bf16", r.bf16},
                                  {"cpu_time",
                                   {{"seconds_per_thread", r.time.cpu},
                                    {"kv_read_gbps", r.gbps.cpu},
                                    {"gflops", r.gflops.cpu},
                                    {"read_ceiling_gbps", r.read_ceiling.cpu},
                                    {"compute_peak_gflops", r.compute_peak.cpu}}}});
        if (!json) {
          std::printf(
              "%-4s %-7s %7d %9.3f %7.1f %5.0f%% %8.1f %5.0f%% | %8.1f %5.0f%% %8.1f %5.0f%%\n",
              r.kind.c_str(), r.dtype.c_str(), r.context, r.time.wall * 1e3, r.gbps.wall,
              100 * r.gbps.wall / r.read_ceiling.wall, r.gflops.wall,
              100 * r.gflops.wall / r.compute_peak.wall, r.gbps.cpu,
              100 * r.gbps.cpu / r.read_ceiling.cpu, r.gflops.cpu,
              100 * r.gflops.cpu / r.compute_peak.cpu);
          std::fflush(stdout);
        }
      }
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return kExitOk;
}

}  // namespace

CTXPAR_REGISTER_BENCH("attention", "CPU partial decode attention vs read and FMA ceilings",
                      RunAttentionBench);

}  // namespace ctxpar::cli
