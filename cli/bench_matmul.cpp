// `ctxpar bench matmul`: MatMul (src/compute/linear.h) over a model's matrix shapes and weight
// types (SmolLM2-135M's Q4_1 file or its BF16 conversion, or Gemma 3 270M's Q4_K_M one) for n
// activation rows (n = 1 is batch-1 decode, 16 is 16 sequences decoding together), beside the
// read ceiling and FMA peak of the same run (bench_ceilings.h), and with --act int8 (the matrix
// units, --dtype auto) beside the int8 peak of the path's units (AMX tiles, AVX512-VNNI, AVX-VNNI
// or AVX2), or for BF16 weights the bf16 peak (AMX-BF16 tiles or vdpbf16ps), measured in the same
// run. Each shape is timed over enough copies of its weights to pass the caches, as a decode step
// streams every layer's weights.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_ceilings.h"
#include "compute/linear.h"
#include "ctxpar/dtype.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/quant.h"
#include "ctxpar/thread_pool.h"
#include "error_report.h"
#include "option_checks.h"

namespace ctxpar::cli {
namespace {

using compute::WeightType;

struct Shape {
  const char* name;
  int rows, cols;
  WeightType type;
  int per_token;  // calls per decode token: 30 layers, or the lm_head once
};

// SmolLM2-135M: 30 layers of dim 576, 9 q heads and 3 KV heads of 64, ffn 1536; Q4_1 layers and
// the Q8_0 embedding as lm_head (vocab 49152). Each runs whole, as the model does at any tp.
const Shape kSmolLm2[] = {
    {"q 576x576", 576, 576, WeightType::kQ4_1, 30},
    {"o 576x576", 576, 576, WeightType::kQ4_1, 30},
    {"k/v 192x576", 192, 576, WeightType::kQ4_1, 60},
    {"gate/up 1536x576", 1536, 576, WeightType::kQ4_1, 60},
    {"down 576x1536", 576, 1536, WeightType::kQ4_1, 30},
    {"lm_head 49152x576", 49152, 576, WeightType::kQ8_0, 1},
};

// SmolLM2-135M in BF16 (llama.cpp's converter of the transformers checkpoint): its shapes, every
// matrix BF16 (the tied embedding too). With --act int8 they take the bf16 products.
const Shape kSmolLm2Bf16[] = {
    {"q 576x576 BF16", 576, 576, WeightType::kBF16, 30},
    {"o 576x576 BF16", 576, 576, WeightType::kBF16, 30},
    {"k/v 192x576 BF16", 192, 576, WeightType::kBF16, 60},
    {"gate/up 1536x576 BF16", 1536, 576, WeightType::kBF16, 60},
    {"down 576x1536 BF16", 576, 1536, WeightType::kBF16, 30},
    {"lm_head 49152x576 BF16", 49152, 576, WeightType::kBF16, 1},
};

// Gemma 3 270M, Q4_K_M: 18 layers of dim 640, 4 q heads and 1 KV head of 256, ffn 2048; half the
// layers hold v in Q5_0 and ffn_down in Q4_K, the other half v in Q8_0 and ffn_down in Q6_K; the
// Q8_0 embedding is the tied lm_head (vocab 262144).
const Shape kGemma3[] = {
    {"q 1024x640 Q5_0", 1024, 640, WeightType::kQ5_0, 18},
    {"k 256x640 Q5_0", 256, 640, WeightType::kQ5_0, 18},
    {"v 256x640 Q5_0", 256, 640, WeightType::kQ5_0, 9},
    {"v 256x640 Q8_0", 256, 640, WeightType::kQ8_0, 9},
    {"o 640x1024 Q4_K", 640, 1024, WeightType::kQ4_K, 18},
    {"gate/up 2048x640 Q5_0", 2048, 640, WeightType::kQ5_0, 36},
    {"down 640x2048 Q4_K", 640, 2048, WeightType::kQ4_K, 9},
    {"down 640x2048 Q6_K", 640, 2048, WeightType::kQ6_K, 9},
    {"lm_head 262144x640 Q8_0", 262144, 640, WeightType::kQ8_0, 1},
};

// Random blocks with fp16 scales of the model's size: the kernels' time does not depend on them.
// BF16 weights are normal values (random bits would hold NaN and subnormals).
std::vector<std::uint8_t> RandomWeights(std::size_t bytes, WeightType type, std::mt19937& rng) {
  std::vector<std::uint8_t> w(bytes);
  if (type == WeightType::kBF16) {
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (std::size_t i = 0; i + 2 <= bytes; i += 2) {
      const std::uint16_t b = FloatToBf16(normal(rng));
      std::memcpy(&w[i], &b, 2);
    }
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<std::uint8_t>(byte(rng));
  const std::uint16_t d = Fp32ToFp16(0.01f), m = Fp32ToFp16(-0.08f), dk = Fp32ToFp16(0.001f);
  const std::size_t block = compute::BlockBytes(type);
  for (std::size_t i = 0; i + block <= bytes; i += block) {
    switch (type) {
      case WeightType::kQ4_1:
        std::memcpy(&w[i], &d, 2);
        std::memcpy(&w[i + 2], &m, 2);
        break;
      case WeightType::kQ4_K:
      case WeightType::kQ5_K:
        std::memcpy(&w[i], &dk, 2);
        std::memcpy(&w[i + 2], &dk, 2);
        break;
      case WeightType::kQ6_K:
        std::memcpy(&w[i + offsetof(BlockQ6K, d)], &dk, 2);
        break;
      default:
        std::memcpy(&w[i], &d, 2);
    }
  }
  return w;
}

// Per call, best of the runs, by wall time and by process CPU time per thread (the pool's threads
// all work in a call; on a shared machine CPU time says what the code does while it runs).
struct Point {
  Timing time;
  Rate gbps, gflops;
};

Point TimeShape(const Shape& s, int n, compute::ActFormat act, ThreadPool& pool, int reps,
                std::size_t min_bytes, std::mt19937& rng) {
  const std::size_t row_bytes =
      std::size_t(s.cols) / compute::BlockSize(s.type) * compute::BlockBytes(s.type);
  const std::size_t bytes = row_bytes * s.rows;
  const int copies = static_cast<int>(std::max<std::size_t>(1, (min_bytes + bytes - 1) / bytes));
  const std::vector<std::uint8_t> weights = RandomWeights(bytes * copies, s.type, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(std::size_t(n) * s.cols);
  for (float& v : x) v = normal(rng);
  compute::Acts acts;
  compute::PrepareActs(act, s.type, x.data(), n, s.cols, s.cols, &acts);
  // The int8 path's weights are repacked once at load, outside the timing.
  std::vector<compute::QuantMatrix> ws;
  for (int c = 0; c < copies; ++c) {
    ws.push_back(compute::WithInt8Pack(
        compute::QuantMatrix{s.type, weights.data() + bytes * c, s.rows, s.cols, row_bytes}, act));
  }
  std::vector<float> y(std::size_t(n) * s.rows);
  Timing best;
  for (int r = 0; r <= reps; ++r) {  // run 0 warms up
    const Clock::time_point start = Clock::now();
    const double cpu0 = CpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
    for (const compute::QuantMatrix& w : ws) compute::MatMul(w, acts, y.data(), s.rows, &pool);
    const double cpu = (CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / pool.size();
    if (r > 0) best.KeepBest({Seconds(start, Clock::now()) / copies, cpu / copies});
  }
  const double gb = double(bytes) / 1e9, gflop = 2.0 * s.rows * s.cols * n / 1e9;
  return {best, {gb / best.wall, gb / best.cpu}, {gflop / best.wall, gflop / best.cpu}};
}

int RunMatMulBench(const std::vector<std::string>& args) {
  CLI::App app{"ctxpar bench matmul: MatMul on a model's shapes vs measured ceilings"};
  std::string model_name = "smollm2";
  std::string thread_list = "1,2";
  std::string row_list = "1,4,16,64";
  std::string act_name = "f32";
  int reps = 5;
  int ceiling_mib = 1024;
  int weights_mib = 64;
  bool json = false;
  app.add_option("--model", model_name,
                 "shapes and weight types: smollm2 (SmolLM2-135M Q4_1), smollm2-bf16 (its BF16 "
                 "conversion) or gemma3 (Gemma 3 270M Q4_K_M)")
      ->check(CLI::IsMember({"smollm2", "smollm2-bf16", "gemma3"}));
  app.add_option("--threads", thread_list, "thread counts");
  app.add_option("--rows", row_list, "activation rows per call (sequences decoding together)");
  app.add_option("--act", act_name,
                 "activations: f32 (the default numerics), q8 (--llama-cpp-numerics) or int8 "
                 "(--dtype auto: the matrix units)")
      ->check(CLI::IsMember({"f32", "q8", "int8"}));
  app.add_option("--reps", reps, "timed runs per point (best is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--ceiling-mib", ceiling_mib, "buffer read by the bandwidth ceiling")
      ->check(CLI::Range(64, 16384));
  app.add_option("--weights-mib", weights_mib,
                 "least weight bytes streamed per timed run (0: one copy, which caches may hold)")
      ->check(CLI::Range(0, 4096));
  app.add_flag("--json", json, "print JSON instead of a table");
  if (const int rc = ParseBenchOptions(app, args, "matmul"); rc >= 0) return rc;
  auto fail = [](const Status& s) { return ReportError(s, "ctxpar bench matmul: "); };
  Expected<std::vector<int>> threads_list =
      ParseCountList("--threads", thread_list, 1, std::numeric_limits<int>::max());
  if (!threads_list.ok()) return fail(threads_list.status());
  for (int t : *threads_list) {
    if (Status s = CheckThreads("--threads", t, /*zero_means_default=*/false); !s.ok()) {
      return fail(s);
    }
  }
  Expected<std::vector<int>> rows_list = ParseCountList("--rows", row_list, 1, 4096);
  if (!rows_list.ok()) return fail(rows_list.status());
  Expected<CpuIsa> isa = SelectCpuIsa();
  if (!isa.ok()) {
    std::fprintf(stderr, "ctxpar bench matmul: %s\n", isa.status().message().c_str());
    return kExitInvalid;
  }
  const compute::ActFormat act = act_name == "q8"     ? compute::ActFormat::kQ8
                                 : act_name == "int8" ? compute::ActFormat::kInt8
                                                      : compute::ActFormat::kF32;
  if (act == compute::ActFormat::kInt8) {
    if (Status s = compute::CheckInt8Isa(); !s.ok()) return fail(s);
  }
  // The peak column: the FMA units, or the matrix units the int8 path runs on (unit_isa: the int8
  // kernel's, or the bf16 kernel's for BF16 weights).
  const bool gemma = model_name == "gemma3", bf16 = model_name == "smollm2-bf16";
  const bool bf16_products =
      bf16 && act == compute::ActFormat::kInt8 && compute::Bf16Takes(WeightType::kBF16);
  const std::string unit_isa = bf16_products ? compute::MatMulBf16Isa() : compute::MatMulInt8Isa();
  const bool unit_peak =
      act == compute::ActFormat::kInt8 && unit_isa != "scalar" && (!bf16 || bf16_products);
  const char* peak_name = bf16_products ? "bf16" : "int8";
  const char* peak_unit = bf16_products ? "GFLOP/s" : "GOP/s";
  const std::span<const Shape> shapes = gemma  ? std::span<const Shape>(kGemma3)
                                        : bf16 ? std::span<const Shape>(kSmolLm2Bf16)
                                               : std::span<const Shape>(kSmolLm2);
  for (const Shape& s : shapes) {
    if (!compute::CheckActFormat(act, s.type).ok()) {
      return fail(CatalogError(
          "CTXPAR-FLAG-008",
          {{"value", act_name},
           {"flag", "--act"},
           {"reason", "int8 activations take Q4_1 and Q8_0 weights; " + model_name + " has " +
                          std::string(GgmlTypeName(compute::GgmlTypeOf(s.type)))},
           {"valid", "f32 (q8 with --model smollm2)"}}));
    }
  }
  nlohmann::json out = {{"isa", act == compute::ActFormat::kInt8 ? unit_isa : compute::MatMulIsa()},
                        {"model", model_name},
                        {"activations", act_name},
                        {"load_average_1min", LoadAverage()},
                        {"results", nlohmann::json::array()}};
  if (!json) {
    std::printf(
        "ctxpar bench matmul  %s  isa=%s  activations %s  load average %.2f  (best of %d)\n",
        model_name.c_str(),
        act == compute::ActFormat::kInt8 ? unit_isa.c_str() : compute::MatMulIsa(),
        act_name.c_str(), LoadAverage(), reps);
  }
  std::mt19937 rng(1);
  for (int threads : *threads_list) {
    const Rate read = MeasureReadCeiling(threads, std::size_t(ceiling_mib) << 20, 5, *isa);
    const Rate fma = MeasureComputePeak(threads, *isa, false, 3);
    const Rate peak = !unit_peak      ? fma
                      : bf16_products ? MeasureBf16Peak(threads, unit_isa == "amx_bf16", *isa, 3)
                                      : MeasureInt8Peak(threads, unit_isa, 3);
    Expected<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(threads);
    if (!pool.ok()) return fail(pool.status());
    if (!json) {
      std::printf(
          "\nthreads %d: read ceiling %.1f GB/s (%.1f by CPU time), FMA peak %.1f GFLOP/s "
          "(%.1f)%s\n%-23s %3s %9s %7s %5s %7s %5s %6s | %8s %5s %7s %5s %6s\n",
          threads, read.wall, read.cpu, fma.wall, fma.cpu,
          unit_peak ? fmt::format(", {} peak ({}) {:.1f} {} ({:.1f}); %peak is of it", peak_name,
                                  unit_isa, peak.wall, peak_unit, peak.cpu)
                          .c_str()
                    : "",
          "shape", "n", "us/call", "w GB/s", "%read", "GFLOP/s", "%peak", "x n=1", "cpu:GB/s",
          "%read", "GFLOP/s", "%peak", "x n=1");
    }
    // The matmul seconds of one decode step of n sequences, by wall and CPU time.
    std::vector<Rate> step(rows_list->size());
    for (const Shape& s : shapes) {
      Rate first;  // seconds per row at the first n
      for (std::size_t i = 0; i < rows_list->size(); ++i) {
        const int n = (*rows_list)[i];
        const Point p = TimeShape(s, n, act, **pool, reps, std::size_t(weights_mib) << 20, rng);
        if (i == 0) first = {p.time.wall / n, p.time.cpu / n};
        step[i].wall += p.time.wall * s.per_token;
        step[i].cpu += p.time.cpu * s.per_token;
        const Rate gain = {first.wall / (p.time.wall / n), first.cpu / (p.time.cpu / n)};
        out["results"].push_back(
            {{"threads", threads},
             {"shape", s.name},
             {"n", n},
             {"seconds", p.time.wall},
             {"weight_gbps", p.gbps.wall},
             {"read_ceiling_gbps", read.wall},
             {"gflops", p.gflops.wall},
             {"fma_peak_gflops", fma.wall},
             {"int8_peak_gops", unit_peak && !bf16_products ? peak.wall : 0.0},
             {"bf16_peak_gflops", bf16_products ? peak.wall : 0.0},
             {"rows_per_s_vs_first", gain.wall},
             {"cpu_time",
              {{"seconds", p.time.cpu},
               {"weight_gbps", p.gbps.cpu},
               {"read_ceiling_gbps", read.cpu},
               {"gflops", p.gflops.cpu},
               {"fma_peak_gflops", fma.cpu},
               {"int8_peak_gops", unit_peak && !bf16_products ? peak.cpu : 0.0},
               {"bf16_peak_gflops", bf16_products ? peak.cpu : 0.0},
               {"rows_per_s_vs_first", gain.cpu}}}});
        if (!json) {
          std::printf(
              "%-23s %3d %9.1f %7.2f %4.0f%% %7.1f %4.0f%% %5.2fx | %8.2f %4.0f%% %7.1f "
              "%4.0f%% %5.2fx\n",
              s.name, n, p.time.wall * 1e6, p.gbps.wall, 100 * p.gbps.wall / read.wall,
              p.gflops.wall, 100 * p.gflops.wall / peak.wall, gain.wall, p.gbps.cpu,
              100 * p.gbps.cpu / read.cpu, p.gflops.cpu, 100 * p.gflops.cpu / peak.cpu, gain.cpu);
        }
      }
    }
    for (std::size_t i = 0; i < rows_list->size(); ++i) {
      const Rate rate = {(*rows_list)[i] / step[i].wall, (*rows_list)[i] / step[i].cpu};
      const Rate first = {(*rows_list)[0] / step[0].wall, (*rows_list)[0] / step[0].cpu};
      out["decode_steps"].push_back({{"threads", threads},
                                     {"n", (*rows_list)[i]},
                                     {"matmul_tokens_per_s", rate.wall},
                                     {"cpu_time", {{"matmul_tokens_per_s", rate.cpu}}}});
      if (!json) {
        std::printf(
            "decode step, every matmul of a %s token, n %d: %.0f tokens/s (%.2fx) | "
            "cpu: %.0f (%.2fx)\n",
            gemma  ? "Gemma 3"
            : bf16 ? "SmolLM2 BF16"
                   : "SmolLM2",
            (*rows_list)[i], rate.wall, rate.wall / first.wall, rate.cpu, rate.cpu / first.cpu);
      }
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return kExitOk;
}

}  // namespace

CTXPAR_REGISTER_BENCH("matmul",
                      "MatMul on SmolLM2's or Gemma 3's shapes for n rows vs read and FMA ceilings",
                      RunMatMulBench);

}  // namespace ctxpar::cli
