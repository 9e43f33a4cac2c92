// `ctxpar bench sampling`: RequestSampler::Sample and ComputeLogprob on one row of a
// SmolLM2-sized vocabulary, one thread, beside two references timed in the same run: the floor
// any full-vocabulary softmax pays (one pass of exponentials in double) and the sort of the whole
// vocabulary that a naive top_p does.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "ctxpar/sampling.h"

namespace ctxpar::cli {
namespace {

double ThreadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU microseconds per call of fn, best of `reps` runs of `calls` calls (a shared machine's
// preemption only ever adds time).
double MicrosPerCall(int reps, int calls, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = ThreadSeconds();
    for (int i = 0; i < calls; ++i) fn();
    best = std::min(best, (ThreadSeconds() - t0) / calls);
  }
  return best * 1e6;
}

void Report(const char* name, double us, const char* note = "") {
  std::printf("  %-44s %9.1f us  %9.0f /s  %s\n", name, us, 1e6 / us, note);
}

int RunSamplingBench(const std::vector<std::string>& args) {
  CLI::App app{"RequestSampler on one row of logits, one thread.", "ctxpar bench sampling"};
  int vocab = 49152;
  int reps = 5;
  int calls = 200;
  app.add_option("--vocab", vocab, "Vocabulary size (SmolLM2: 49152).")
      ->check(CLI::Range(2, 1 << 24));
  app.add_option("--reps", reps, "Runs per measurement; the best is kept.")
      ->check(CLI::Range(1, 1000));
  app.add_option("--calls", calls, "Calls per run.")->check(CLI::Range(1, 1000000));
  if (int rc = ParseBenchOptions(app, args, "sampling"); rc >= 0) return rc;
  // Logits with a long flat tail and a few likely tokens, as a language model's.
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = normal(rng);
  for (int i = 0; i < 8; ++i) logits[rng() % vocab] += 8.0f;
  std::vector<int32_t> prompt(1000);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % vocab);

  std::printf("ctxpar bench sampling: vocab %d, one thread, CPU time per call (best of %d x %d)\n",
              vocab, reps, calls);
  std::printf("references measured in this run:\n");
  volatile double sink = 0.0;
  Report("softmax floor: V exp() in double", MicrosPerCall(reps, calls, [&] {
           const float m = *std::max_element(logits.begin(), logits.end());
           double s = 0.0;
           for (float l : logits) s += std::exp((l - m) / 0.7);
           sink = sink + s;
         }));
  std::vector<int32_t> order(vocab);
  Report("full sort of the vocabulary (naive top_p)", MicrosPerCall(reps, calls, [&] {
           std::iota(order.begin(), order.end(), 0);
           std::sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
           sink = sink + order[0];
         }));
  std::printf("RequestSampler::Sample:\n");
  struct Config {
    const char* name;
    SamplingParams params;
  };
  SamplingParams penalties{.temperature = 0.8f, .top_p = 0.95f, .top_k = 40};
  penalties.repetition_penalty = 1.1f;
  penalties.frequency_penalty = 0.3f;
  penalties.presence_penalty = 0.2f;
  const Config configs[] = {
      {"greedy (temperature 0)", {.temperature = 0.0f}},
      {"temperature 0.7, top_k 50", {.temperature = 0.7f, .top_k = 50}},
      {"temperature 0.7, top_p 0.95", {.temperature = 0.7f, .top_p = 0.95f}},
      {"temperature 1.0, top_p 0.95, min_p 0.05", {.top_p = 0.95f, .min_p = 0.05f}},
      {"temperature 1.0, no filter", {.temperature = 1.0f}},
      {"top_k 40, top_p 0.95, 3 penalties, 1000 seen", penalties},
  };
  for (const Config& c : configs) {
    RequestSampler sampler(c.params, prompt, 7);
    const std::string kept = c.params.temperature > 0.0f
                                 ? fmt::format("(keeps {})", sampler.Distribution(logits).size())
                                 : std::string();
    Report(c.name, MicrosPerCall(reps, calls, [&] { sink = sink + sampler.Sample(logits); }),
           kept.c_str());
  }
  std::printf("ComputeLogprob:\n");
  Report("logprob with the top 5",
         MicrosPerCall(reps, calls, [&] { sink = sink + ComputeLogprob(logits, 3, 5).logprob; }));
  return kExitOk;
}

CTXPAR_REGISTER_BENCH("sampling", "RequestSampler and ComputeLogprob on one vocabulary row",
                      RunSamplingBench);

}  // namespace
}  // namespace ctxpar::cli
