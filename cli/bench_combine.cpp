// `ctxpar bench combine`: the DCP combine per layer (docs/dcp.md, Combine) for each backend, at
// decode shapes: time per call and the bytes each rank sends. Under mpiexec the ranks are the MPI
// processes (N = the world size); otherwise N in --ranks, one thread per rank in this process.
// Only the combine is timed (the partial attention before it is the same for every backend).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "ctxpar/combine.h"
#include "ctxpar/communicator.h"
#include "ctxpar/error_catalog.h"
#include "error_report.h"
#include "mpi_launch.h"
#include "option_checks.h"

namespace ctxpar::cli {
namespace {

struct Shape {
  const char* name;
  int group_heads;  // h * N: the widened head set
  int head_dim_v;
};
// Gemma 3 270M at tp 4: 4 query heads over a DCP group of 4, one per rank, D 256.
constexpr Shape kShapes[] = {{"dsv3", 128, 512}, {"gqa", 32, 128}, {"gemma3", 4, 256}};

struct Result {
  std::string mode, shape, backend, wire;
  int n = 0, batch = 0, heads_per_rank = 0, head_dim_v = 0;
  double us = 0;
  double bytes_sent = 0;  // per rank and call
  double calls = 0;       // collectives (or window syncs) per call
};

constexpr CombineBackend kBackends[] = {CombineBackend::kAgRs, CombineBackend::kA2a,
                                        CombineBackend::kShmA2a};

// Every backend at one shape, on this rank; every rank of `comm` calls it alike. The backends
// take turns in short rounds and each reports its median round, so that a burst of load on a
// shared machine hits all of them alike instead of one.
Status MeasureShape(Communicator& comm, const Shape& shape, int batch, DataType wire,
                    double seconds, int rounds, std::vector<Result>& out) {
  const int n = comm.size();
  const int h = shape.group_heads / n;
  const CombineShape s{batch, h, shape.head_dim_v};
  std::mt19937 rng(17 + comm.rank());
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> o_part(static_cast<size_t>(batch) * n * h * shape.head_dim_v);
  std::vector<float> lse_part(static_cast<size_t>(batch) * n * h);
  for (float& x : o_part) x = dist(rng);
  for (float& x : lse_part) x = dist(rng);
  std::vector<float> o(static_cast<size_t>(batch) * h * shape.head_dim_v), lse(batch * h);
  std::vector<std::unique_ptr<Combiner>> combiners;
  std::vector<CombineBackend> backends;
  for (CombineBackend b : kBackends) {
    CTXPAR_ASSIGN_OR_RETURN(auto c, Combiner::Create(&comm, b, wire));
    combiners.push_back(std::move(c));
    backends.push_back(b);
  }
  // Seconds per call of `iters` calls, the slowest rank's.
  auto run = [&](Combiner& c, int iters) -> Expected<double> {
    CTXPAR_RETURN_IF_ERROR(comm.Barrier());
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      CTXPAR_RETURN_IF_ERROR(c.Combine(s, o_part.data(), lse_part.data(), o.data(), lse.data()));
    }
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CTXPAR_RETURN_IF_ERROR(comm.AllReduce(&t, &t, 1, DataType::kF64, ReduceOp::kMax));
    return t / iters;
  };
  double slowest = 0;
  for (size_t b = 0; b < combiners.size();) {
    Expected<double> warm = run(*combiners[b], 3);
    // Ranks on several hosts share no memory: every rank finds so alike in its first call, and
    // shm_a2a is left out.
    if (backends[b] == CombineBackend::kShmA2a && warm.status().error_id() == "CTXPAR-DCP-007") {
      combiners.erase(combiners.begin() + static_cast<std::ptrdiff_t>(b));
      backends.erase(backends.begin() + static_cast<std::ptrdiff_t>(b));
      continue;
    }
    if (!warm.ok()) return warm.status();
    slowest = std::max(slowest, *warm);
    ++b;
  }
  const double per_round = seconds / (rounds * combiners.size());
  const int iters = std::clamp(static_cast<int>(per_round / std::max(slowest, 1e-7)), 1, 10000);
  std::vector<std::vector<double>> times(combiners.size());
  std::vector<CommCounters> counters(combiners.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t b = 0; b < combiners.size(); ++b) {
      const CommCounters before = comm.counters();
      CTXPAR_ASSIGN_OR_RETURN(const double t, run(*combiners[b], iters));
      times[b].push_back(t);
      for (int k = 0; k < kNumCollectives; ++k) {
        CollectiveCounters& acc = counters[b].per_collective[k];
        acc.calls += comm.counters().per_collective[k].calls - before.per_collective[k].calls;
        acc.bytes_sent +=
            comm.counters().per_collective[k].bytes_sent - before.per_collective[k].bytes_sent;
      }
    }
  }
  if (comm.rank() != 0) return Status::Ok();
  const double calls = static_cast<double>(rounds) * iters;
  for (size_t b = 0; b < combiners.size(); ++b) {
    std::sort(times[b].begin(), times[b].end());
    // The timing's own barrier and all-reduce are not part of the combine.
    CollectiveCounters total = counters[b].Total();
    total.calls -=
        counters[b][Collective::kBarrier].calls + counters[b][Collective::kAllReduce].calls;
    total.bytes_sent -= counters[b][Collective::kAllReduce].bytes_sent;
    Result r;
    r.shape = shape.name;
    r.backend = std::string(CombineBackendName(backends[b]));
    r.wire = backends[b] == CombineBackend::kAgRs ? "f32" : std::string(DataTypeName(wire));
    r.n = n;
    r.batch = batch;
    r.heads_per_rank = h;
    r.head_dim_v = shape.head_dim_v;
    r.us = times[b][times[b].size() / 2] * 1e6;
    r.bytes_sent = static_cast<double>(total.bytes_sent) / calls;
    r.calls = static_cast<double>(total.calls) / calls;
    out.push_back(r);
  }
  return Status::Ok();
}

// A group of n ranks measures the shapes whose heads it divides: none is an error, not an empty
// table.
Status CheckGroupSize(const char* flag, int n) {
  for (const Shape& shape : kShapes) {
    if (shape.group_heads % n == 0) return Status::Ok();
  }
  return CatalogError("CTXPAR-FLAG-008",
                      {{"value", std::to_string(n)},
                       {"flag", flag},
                       {"reason", "it divides the heads of no shape (128, 32 and 4)"},
                       {"valid", "2, 4, 8, 16, 32 or 64"}});
}

Status MeasureAll(Communicator& comm, const std::vector<int>& batches, DataType wire,
                  double seconds, int rounds, std::vector<Result>& out) {
  for (const Shape& shape : kShapes) {
    if (shape.group_heads % comm.size() != 0) continue;
    for (int batch : batches) {
      CTXPAR_RETURN_IF_ERROR(MeasureShape(comm, shape, batch, wire, seconds, rounds, out));
    }
  }
  return Status::Ok();
}

int RunCombineBench(const std::vector<std::string>& args) {
  CLI::App app{"ctxpar bench combine: DCP combine time per layer and bytes per backend"};
  std::vector<int> ranks = {2, 4};
  std::vector<int> batches = {1, 32};
  std::string wire_name = "bf16";
  double seconds = 1.0;
  int rounds = 15;
  bool json = false;
  app.add_option("--ranks", ranks, "group sizes N run as threads (ignored under mpiexec)")
      ->check(CLI::Range(2, 64));
  app.add_option("--batch", batches, "decode batch sizes (rows)")->check(CLI::Range(1, 4096));
  app.add_option("--wire", wire_name, "O element type on the a2a / shm_a2a wire")
      ->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--seconds", seconds,
                 "timed seconds per shape, all backends (approximately; 0.01 to 600)");
  app.add_option("--rounds", rounds, "rounds per shape; each backend reports its median round")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "print JSON instead of a table");
  if (const int rc = ParseBenchOptions(app, args, "combine"); rc >= 0) return rc;
  if (Status s = CheckSeconds("--seconds", seconds, 0.01, 600.0); !s.ok()) {
    return ReportError(s, "ctxpar bench combine: ");
  }
  const DataType wire = wire_name == "bf16" ? DataType::kBF16 : DataType::kF32;
  std::vector<Result> results;
  std::string mode;
  bool print = true;
  if (UnderMpi()) {
    auto world = MakeMpiWorld();
    if (!world.ok()) {
      std::fprintf(stderr, "ctxpar bench combine: %s\n", world.status().message().c_str());
      return kExitInternal;
    }
    mode = "mpi";
    print = (*world)->rank() == 0;
    if (Status s = CheckGroupSize("the MPI world size", (*world)->size()); !s.ok()) {
      return print ? ReportError(s, "ctxpar bench combine: ") : kExitInvalid;
    }
    const Status st = MeasureAll(**world, batches, wire, seconds, rounds, results);
    if (!st.ok()) {
      std::fprintf(stderr, "ctxpar bench combine: %s\n", st.ToString().c_str());
      return kExitInternal;
    }
  } else {
    mode = "threads";
    for (int n : ranks) {
      if (Status s = CheckGroupSize("--ranks", n); !s.ok()) {
        return ReportError(s, "ctxpar bench combine: ");
      }
    }
    for (int n : ranks) {
      const Status st = RunInProcess(n, [&](Communicator& comm) {
        return MeasureAll(comm, batches, wire, seconds, rounds, results);
      });
      if (!st.ok()) {
        std::fprintf(stderr, "ctxpar bench combine: %s\n", st.ToString().c_str());
        return kExitInternal;
      }
    }
  }
  if (!print) return kExitOk;
  std::map<std::string, double> ag_rs_us;
  for (Result& r : results) {
    r.mode = mode;
    if (r.backend == "ag_rs") {
      ag_rs_us[r.shape + "/" + std::to_string(r.n) + "/" + std::to_string(r.batch)] = r.us;
    }
  }
  auto ratio = [&](const Result& r) {
    return r.us / ag_rs_us[r.shape + "/" + std::to_string(r.n) + "/" + std::to_string(r.batch)];
  };
  if (json) {
    nlohmann::json out = {{"mode", mode}, {"results", nlohmann::json::array()}};
    for (const Result& r : results) {
      out["results"].push_back({{"n", r.n},
                                {"shape", r.shape},
                                {"batch", r.batch},
                                {"heads_per_rank", r.heads_per_rank},
                                {"head_dim_v", r.head_dim_v},
                                {"backend", r.backend},
                                {"o_wire", r.wire},
                                {"us_per_layer", r.us},
                                {"bytes_sent_per_rank", r.bytes_sent},
                                {"exchanges_per_layer", r.calls},
                                {"time_vs_ag_rs", ratio(r)}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "DCP combine per layer (%s; slowest rank, median of %d rounds; a2a/shm_a2a O on the "
      "wire: %s)\n",
      mode.c_str(), rounds, wire_name.c_str());
  std::printf("%3s %-5s %5s %4s %-8s %12s %14s %9s %9s\n", "N", "shape", "batch", "h", "backend",
              "us/layer", "bytes/rank", "exchanges", "vs ag_rs");
  for (const Result& r : results) {
    std::printf("%3d %-5s %5d %4d %-8s %12.1f %14.0f %9.0f %9.2f\n", r.n, r.shape.c_str(), r.batch,
                r.heads_per_rank, r.backend.c_str(), r.us, r.bytes_sent, r.calls, ratio(r));
  }
  std::printf("targets at N = 2: a2a <= 0.70 x ag_rs, shm_a2a <= a2a\n");
  return kExitOk;
}

}  // namespace

CTXPAR_REGISTER_BENCH("combine", "DCP combine per backend: time per layer and bytes per rank",
                      RunCombineBench);

}  // namespace ctxpar::cli
