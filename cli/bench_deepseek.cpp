// `ctxpar bench deepseek --model-path DIR`: the DeepSeek-V3 model's collectives per layer for
// each combination of the DCP combine backend, the Q path and the MoE backend at N ranks (a
// decode step of --batch sequences of --context tokens: time and bytes per collective of the TP,
// DCP and CP groups, and the step's time), then the time to first token of a --prompt-token
// prompt with prefill CP over 2 ranks against none. Under mpiexec the ranks are the MPI
// processes (N = the world size); otherwise N in --ranks, one thread per rank in this process.
// Every rank wraps its communicators in a timer; the figures are the slowest rank's.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/model.h"
#include "ctxpar/thread_pool.h"
#include "error_report.h"
#include "models/deepseek.h"
#include "models/layers/compute_types.h"
#include "mpi_launch.h"
#include "option_checks.h"

namespace ctxpar::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A Communicator that times every collective of the one it wraps (and of the groups split from
// it, and the Sync of its shared windows) and counts their bytes as the wrapped one does.
class TimedCommunicator final : public Communicator {
 public:
  // `inner` (not owned unless `owned` holds it) must outlive the wrapper.
  explicit TimedCommunicator(Communicator* inner, std::unique_ptr<Communicator> owned = nullptr)
      : inner_(inner), owned_(std::move(owned)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::array<double, kNumCollectives>& seconds() const { return seconds_; }
  void Reset() {
    ResetCounters();
    seconds_.fill(0.0);
  }

  Status AllGather(const void* s, void* r, std::size_t n, DataType t) override {
    return Timed(Collective::kAllGather, [&] { return inner_->AllGather(s, r, n, t); });
  }
  Status ReduceScatter(const void* s, void* r, std::size_t n, DataType t) override {
    return Timed(Collective::kReduceScatter, [&] { return inner_->ReduceScatter(s, r, n, t); });
  }
  Status AllToAll(const void* s, void* r, std::size_t n, DataType t) override {
    return Timed(Collective::kAllToAll, [&] { return inner_->AllToAll(s, r, n, t); });
  }
  Status AllToAllV(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd,
                   void* r, std::span<const std::size_t> rc, std::span<const std::size_t> rd,
                   DataType t) override {
    return Timed(Collective::kAllToAllV,
                 [&] { return inner_->AllToAllV(s, sc, sd, r, rc, rd, t); });
  }
  Status AllReduce(const void* s, void* r, std::size_t n, DataType t, ReduceOp op) override {
    return Timed(Collective::kAllReduce, [&] { return inner_->AllReduce(s, r, n, t, op); });
  }
  Status Broadcast(void* b, std::size_t n, DataType t, int root) override {
    return Timed(Collective::kBroadcast, [&] { return inner_->Broadcast(b, n, t, root); });
  }
  Status Barrier() override {
    return Timed(Collective::kBarrier, [&] { return inner_->Barrier(); });
  }
  Expected<std::unique_ptr<Communicator>> Split(int color, int key) override {
    CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c, inner_->Split(color, key));
    Communicator* raw = c.get();
    return std::unique_ptr<Communicator>(new TimedCommunicator(raw, std::move(c)));
  }
  Expected<std::unique_ptr<SharedWindow>> AllocateSharedWindow(std::size_t bytes) override {
    CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<SharedWindow> w, inner_->AllocateSharedWindow(bytes));
    return std::unique_ptr<SharedWindow>(new Window(std::move(w), this));
  }

 private:
  class Window final : public SharedWindow {
   public:
    Window(std::unique_ptr<SharedWindow> inner, TimedCommunicator* comm)
        : SharedWindow(inner->bytes(), &comm->counters_), inner_(std::move(inner)), comm_(comm) {}
    void* Segment(int rank) override { return inner_->Segment(rank); }
    Status Sync() override {
      CountSync();
      const auto start = Clock::now();
      Status s = inner_->Sync();
      comm_->seconds_[static_cast<int>(Collective::kSharedWindow)] +=
          std::chrono::duration<double>(Clock::now() - start).count();
      return s;
    }

   private:
    std::unique_ptr<SharedWindow> inner_;
    TimedCommunicator* comm_;
  };

  // The wrapped communicator's counters move by this call's bytes alone: `before` is read just
  // before it (other wrappers of the same communicator may have called since).
  template <typename F>
  Status Timed(Collective c, F call) {
    const CollectiveCounters before = inner_->counters()[c];
    const auto start = Clock::now();
    Status s = call();
    seconds_[static_cast<int>(c)] += std::chrono::duration<double>(Clock::now() - start).count();
    const CollectiveCounters& after = inner_->counters()[c];
    CollectiveCounters& mine = counters_[c];
    mine.calls += after.calls - before.calls;
    mine.bytes_sent += after.bytes_sent - before.bytes_sent;
    mine.bytes_received += after.bytes_received - before.bytes_received;
    return s;
  }

  Communicator* inner_;
  std::unique_ptr<Communicator> owned_;
  std::array<double, kNumCollectives> seconds_{};
};

struct Combination {
  std::string name;
  int dcp;
  CombineBackend backend;
  bool replicate_q;
  MoeA2aBackend moe;
};

std::vector<Combination> Combinations(int n) {
  std::vector<Combination> out;
  for (MoeA2aBackend moe : {MoeA2aBackend::kNone, MoeA2aBackend::kDeepep}) {
    const std::string m = moe == MoeA2aBackend::kNone ? "+none" : "+deepep";
    out.push_back({"dcp1" + m, 1, CombineBackend::kAgRs, false, moe});
    out.push_back({"ag_rs" + m, n, CombineBackend::kAgRs, false, moe});
    out.push_back({"a2a" + m, n, CombineBackend::kA2a, false, moe});
    out.push_back({"a2a_repq" + m, n, CombineBackend::kA2a, true, moe});
    out.push_back({"shm_a2a" + m, n, CombineBackend::kShmA2a, false, moe});
    out.push_back({"shm_a2a_repq" + m, n, CombineBackend::kShmA2a, true, moe});
  }
  return out;
}

struct Row {
  std::string what;   // the combination, or the TTFT case
  std::string group;  // tp, dcp, cp; "step" for the whole step
  std::string collective;
  int n = 0;
  double us = 0;     // per layer (or per step / prefill)
  double bytes = 0;  // sent per rank per layer
  double calls = 0;  // per layer
};

struct Options {
  std::string model_path;
  int batch = 4;
  int context = 512;
  int steps = 10;
  int prompt = 4000;
  int threads = 1;
  int rounds = 5;
};

EngineConfig Config(const ModelSource& source, int n, const Combination& c, int threads) {
  EngineConfig e;
  e.model_arch = source.desc().architecture;
  e.tp_size = n;
  e.dcp_size = c.dcp;
  e.dcp_comm_backend = c.backend;
  e.dcp_replicate_q_proj = c.replicate_q;
  e.moe_a2a_backend = c.moe;
  e.ep_size = c.moe == MoeA2aBackend::kDeepep ? n : 1;
  e.page_size = 16;
  e.max_running_requests = 8;
  e.kv_cache_mib = 64;
  // Pages for the batch or the TTFT prompt only: mapping and zeroing more would be timed too.
  e.max_total_tokens = int64_t{8} * 4096;
  e.threads = threads;
  return e;
}

// The slowest rank's value.
Expected<double> Slowest(Communicator& world, double v) {
  CTXPAR_RETURN_IF_ERROR(world.AllReduce(&v, &v, 1, DataType::kF64, ReduceOp::kMax));
  return v;
}

// Prefills `prompts` (one forward each) into fresh slots; returns the slowest rank's seconds.
// `base` (not the model's timed world) synchronises the clocks.
Expected<double> Prefill(Communicator& base, Model& model, KvPool& kv,
                         const std::vector<std::vector<int32_t>>& prompts,
                         std::vector<int32_t>& slots) {
  std::vector<float> logits;
  CTXPAR_RETURN_IF_ERROR(base.Barrier());
  const auto start = Clock::now();
  for (const auto& p : prompts) {
    CTXPAR_ASSIGN_OR_RETURN(int32_t slot, kv.AcquireSlot());
    CTXPAR_RETURN_IF_ERROR(kv.Reserve(slot, static_cast<int64_t>(p.size())));
    Batch b;
    b.Add(slot, 0, p.data(), static_cast<int32_t>(p.size()));
    CTXPAR_RETURN_IF_ERROR(model.Forward(b, kv, logits));
    slots.push_back(slot);
  }
  return Slowest(base, std::chrono::duration<double>(Clock::now() - start).count());
}

std::vector<std::vector<int32_t>> RandomPrompts(int count, int length, int vocab) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> id(2, vocab - 1);
  std::vector<std::vector<int32_t>> out(count, std::vector<int32_t>(length));
  for (auto& p : out) {
    for (int32_t& t : p) t = id(rng);
  }
  return out;
}

void AddRows(Communicator& world, const std::string& what, const char* group,
             TimedCommunicator& comm, double per, std::vector<Row>& rows) {
  for (int k = 0; k < kNumCollectives; ++k) {
    const CollectiveCounters& c = comm.counters().per_collective[k];
    if (c.calls == 0 || static_cast<Collective>(k) == Collective::kSplit) continue;
    auto us = Slowest(world, comm.seconds()[k] * 1e6 / per);
    rows.push_back({what, group, std::string(CollectiveName(static_cast<Collective>(k))),
                    world.size(), us.ok() ? *us : 0.0, double(c.bytes_sent) / per,
                    double(c.calls) / per});
  }
}

// One combination's model on this rank, its KV pool holding the prefilled batch, and the timed
// communicators.
struct Live {
  Combination comb;
  std::unique_ptr<TimedCommunicator> world;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<compute::Compute> compute;
  std::unique_ptr<Model> model;
  std::optional<KvPool> kv;
  std::vector<int32_t> slots;
  TimedCommunicator* dcp = nullptr;
  std::vector<double> step_seconds;  // one per round
};

Expected<Live> Start(Communicator& base, const ModelSource& source, const Options& o,
                     const Combination& comb) {
  Live l;
  l.comb = comb;
  l.world = std::make_unique<TimedCommunicator>(&base);
  const EngineConfig config = Config(source, base.size(), comb, o.threads);
  CTXPAR_ASSIGN_OR_RETURN(l.pool, ThreadPool::Create(o.threads));
  l.compute = model::ComputeFor(config, l.pool.get());
  CTXPAR_ASSIGN_OR_RETURN(l.model, source.CreateModel(config, *l.world, *l.compute));
  CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions kvo, KvPoolFor(config, source, base.rank() % comb.dcp));
  CTXPAR_ASSIGN_OR_RETURN(KvPool kv, KvPool::Create(kvo));
  l.kv.emplace(std::move(kv));
  const auto prompts = RandomPrompts(o.batch, o.context, source.desc().vocab_size);
  CTXPAR_RETURN_IF_ERROR(Prefill(base, *l.model, *l.kv, prompts, l.slots).status());
  l.dcp = dynamic_cast<TimedCommunicator*>(GroupsOf(*l.model).dcp);
  l.world->Reset();
  l.dcp->Reset();
  return l;
}

// --steps decode steps of the whole batch, the slowest rank's seconds per step.
Status Round(Communicator& base, const Options& o, int round, Live& l) {
  std::vector<float> logits;
  std::vector<int32_t> last(o.batch, 7);
  CTXPAR_RETURN_IF_ERROR(base.Barrier());
  const auto start = Clock::now();
  for (int step = 0; step < o.steps; ++step) {
    Batch b;
    for (int i = 0; i < o.batch; ++i) {
      const int64_t pos = o.context + int64_t{round} * o.steps + step;
      CTXPAR_RETURN_IF_ERROR(l.kv->Reserve(l.slots[i], pos + 1));
      b.Add(l.slots[i], pos, &last[i], 1);
    }
    CTXPAR_RETURN_IF_ERROR(l.model->Forward(b, *l.kv, logits));
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count() / o.steps;
  CTXPAR_ASSIGN_OR_RETURN(const double slowest, Slowest(base, s));
  l.step_seconds.push_back(slowest);
  return Status::Ok();
}

// Every combination at this N, in turns of short rounds so that a burst of load on a shared
// machine hits all of them alike; the step time is the median round's, the collectives' the mean.
Status MeasureDecode(Communicator& base, const ModelSource& source, const Options& o,
                     std::vector<Row>& rows) {
  std::vector<Live> live;
  for (const Combination& c : Combinations(base.size())) {
    CTXPAR_ASSIGN_OR_RETURN(Live l, Start(base, source, o, c));
    live.push_back(std::move(l));
  }
  for (int round = 0; round < o.rounds; ++round) {
    for (Live& l : live) CTXPAR_RETURN_IF_ERROR(Round(base, o, round, l));
  }
  for (Live& l : live) {
    std::sort(l.step_seconds.begin(), l.step_seconds.end());
    rows.push_back({l.comb.name, "step", "forward", base.size(),
                    l.step_seconds[l.step_seconds.size() / 2] * 1e6, 0, 0});
    // Per layer: the step's collectives (the logits' gather included) over its layers.
    const double per = double(o.rounds) * o.steps * l.kv->options().num_layers;
    AddRows(base, l.comb.name, "tp", *l.world, per, rows);
    AddRows(base, l.comb.name, "dcp", *l.dcp, per, rows);
  }
  return Status::Ok();
}

// Time to first token: one forward of the whole prompt on 2 ranks, with and without prefill CP;
// the median of --rounds prefills.
Status MeasureTtft(Communicator& base, const ModelSource& source, const Options& o,
                   std::vector<Row>& rows) {
  if (base.size() != 2) return Status::Ok();
  struct Case {
    const char* name;
    bool cp;
    CpStrategy strategy;
  };
  const auto prompt = RandomPrompts(1, o.prompt, source.desc().vocab_size);
  for (const Case& c : {Case{"ttft_no_cp", false, CpStrategy::kNone},
                        Case{"ttft_cp2_interleave", true, CpStrategy::kInterleave},
                        Case{"ttft_cp2_zigzag", true, CpStrategy::kZigzag}}) {
    TimedCommunicator world(&base);
    EngineConfig config = Config(
        source, 2, {c.name, 1, CombineBackend::kAgRs, false, MoeA2aBackend::kNone}, o.threads);
    config.enable_prefill_cp = c.cp;
    config.attn_cp_size = c.cp ? 2 : 1;
    config.cp_strategy = c.strategy;
    CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(o.threads));
    const std::unique_ptr<compute::Compute> compute = model::ComputeFor(config, pool.get());
    CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                            source.CreateModel(config, world, *compute));
    CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions kvo, KvPoolFor(config, source, 0));
    CTXPAR_ASSIGN_OR_RETURN(KvPool kv, KvPool::Create(kvo));
    auto* cp = dynamic_cast<TimedCommunicator*>(GroupsOf(*model).cp);
    world.Reset();
    cp->Reset();
    std::vector<double> seconds;
    for (int round = 0; round < o.rounds; ++round) {
      std::vector<int32_t> slots;
      CTXPAR_ASSIGN_OR_RETURN(const double s, Prefill(base, *model, kv, prompt, slots));
      CTXPAR_RETURN_IF_ERROR(kv.ReleaseSlot(slots[0]));
      seconds.push_back(s);
    }
    std::sort(seconds.begin(), seconds.end());
    rows.push_back({c.name, "step", "prefill", 2, seconds[seconds.size() / 2] * 1e6, 0, 0});
    const double per = double(o.rounds) * kv.options().num_layers;
    AddRows(base, c.name, "tp", world, per, rows);
    AddRows(base, c.name, "cp", *cp, per, rows);
  }
  return Status::Ok();
}

Status MeasureAll(Communicator& world, const ModelSource& source, const Options& o,
                  std::vector<Row>& rows) {
  CTXPAR_RETURN_IF_ERROR(MeasureDecode(world, source, o, rows));
  return MeasureTtft(world, source, o, rows);
}

int RunDeepseekBench(const std::vector<std::string>& args) {
  CLI::App app{"ctxpar bench deepseek: the DeepSeek model's collectives per layer and its TTFT"};
  Options o;
  std::vector<int> ranks = {2, 4};
  bool json = false;
  app.add_option("--model-path", o.model_path, "a DeepSeek-V3 HF checkpoint directory")->required();
  app.add_option("--ranks", ranks, "rank counts N run as threads (ignored under mpiexec)")
      ->check(CLI::Range(2, 64));
  app.add_option("--batch", o.batch, "decode sequences")->check(CLI::Range(1, 8));
  app.add_option("--context", o.context, "tokens of each decoding sequence")
      ->check(CLI::Range(1, 4000));
  app.add_option("--steps", o.steps, "decode steps per round")->check(CLI::Range(1, 100));
  app.add_option("--prompt", o.prompt, "tokens of the TTFT prompt")->check(CLI::Range(1, 4095));
  app.add_option("--threads", o.threads, "compute threads per rank");
  app.add_option("--rounds", o.rounds, "rounds: the median round's time is reported")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "print JSON instead of a table");
  if (const int rc = ParseBenchOptions(app, args, "deepseek"); rc >= 0) return rc;
  auto fail = [](const Status& s) { return ReportError(s, "ctxpar bench deepseek: "); };
  if (Status s = CheckThreads("--threads", o.threads, /*zero_means_default=*/false); !s.ok()) {
    return fail(s);
  }
  auto source = OpenModelSource(o.model_path);
  if (!source.ok()) return fail(source.status());
  if (const std::string& arch = (*source)->desc().architecture; !arch.starts_with("Deepseek")) {
    return fail(CatalogError("CTXPAR-FLAG-008",
                             {{"value", PyRepr(o.model_path)},
                              {"flag", "--model-path"},
                              {"reason", "its model is a " + arch + ", not a DeepSeek one"},
                              {"valid", "a DeepSeek-V3 or V4 HF checkpoint directory"}}));
  }
  std::vector<Row> rows;
  std::string mode = "threads";
  bool print = true;
  Status st;
  if (UnderMpi()) {
    auto world = MakeMpiWorld();
    if (!world.ok()) return fail(world.status());
    mode = "mpi";
    print = (*world)->rank() == 0;
    std::vector<Row> mine;
    st = MeasureAll(**world, **source, o, mine);
    if (print) rows = std::move(mine);
  } else {
    for (int n : ranks) {
      std::vector<std::vector<Row>> per_rank(n);
      st = RunInProcess(n, [&](Communicator& comm) {
        return MeasureAll(comm, **source, o, per_rank[comm.rank()]);
      });
      if (!st.ok()) break;
      rows.insert(rows.end(), per_rank[0].begin(), per_rank[0].end());
    }
  }
  if (!st.ok()) return fail(st);
  if (!print) return kExitOk;
  if (json) {
    nlohmann::json out = {{"mode", mode},
                          {"batch", o.batch},
                          {"context", o.context},
                          {"steps", o.steps},
                          {"prompt", o.prompt},
                          {"threads", o.threads},
                          {"rows", nlohmann::json::array()}};
    for (const Row& r : rows) {
      out["rows"].push_back({{"n", r.n},
                             {"what", r.what},
                             {"group", r.group},
                             {"collective", r.collective},
                             {"us", r.us},
                             {"bytes_sent_per_rank", r.bytes},
                             {"calls", r.calls}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "DeepSeek model (%s, %d thread(s) per rank; slowest rank): decode of %d sequences of %d "
      "tokens, per layer; TTFT of a %d-token prompt\n",
      mode.c_str(), o.threads, o.batch, o.context, o.prompt);
  std::printf("%3s %-22s %-5s %-14s %12s %14s %7s\n", "N", "combination", "group", "collective",
              "us", "bytes/rank", "calls");
  for (const Row& r : rows) {
    std::printf("%3d %-22s %-5s %-14s %12.1f %14.0f %7.2f\n", r.n, r.what.c_str(), r.group.c_str(),
                r.collective.c_str(), r.us, r.bytes, r.calls);
  }
  std::printf(
      "step rows: us per decode step (forward) or per prompt (prefill); others per layer\n");
  return kExitOk;
}

}  // namespace

CTXPAR_REGISTER_BENCH("deepseek",
                      "DeepSeek model: per-layer collectives per backend combination, and TTFT "
                      "with prefill CP",
                      RunDeepseekBench);

}  // namespace ctxpar::cli
