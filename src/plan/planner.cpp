// The candidates of a plan: enumerated, resolved by the pipeline, sized by the pool's arithmetic
// and simulated.
#include <fmt/format.h>

#include <algorithm>

#include "ctxpar/error_catalog.h"
#include "ctxpar/plan.h"

namespace ctxpar::plan {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;

void Refuse(Candidate& c, Status status) {
  c.refused_id = std::string(status.error_id());
  c.refused = std::move(status);
}

// The pipeline's handlers for the target: a GPU runs SGLang's engine, not ctxpar's CPU engine,
// so the CPU engine's handler (its defaults and what it cannot honour) is left out there.
std::vector<Handler> HandlersFor(const Hardware& hw) {
  std::vector<Handler> handlers;
  for (const Handler& h : DefaultHandlers()) {
    if (hw.cpu || h.name != "_handle_cpu_engine") handlers.push_back(h);
  }
  return handlers;
}

Status SetUnlessGiven(LaunchConfig& raw, std::string_view field, FieldValue value) {
  if (raw.given(field)) return Status::Ok();
  return raw.Set(field, std::move(value));
}

void Evaluate(const PlanModel& m, const Hardware& hw, const PlanRequest& req, Candidate& c) {
  LaunchConfig raw = req.base;
  auto set = [&](std::string_view field, FieldValue value) {
    return raw.Set(field, std::move(value));
  };
  Status st = set("tp_size", int64_t{c.tp_size});
  if (st.ok()) st = set("dcp_size", int64_t{c.dcp_size});
  if (st.ok()) st = set("dcp_comm_backend", c.backend);
  if (st.ok() && c.replicate_q) st = set("dcp_replicate_q_proj", *c.replicate_q);
  const double bpp = m.weight_bytes / m.TotalParams();
  c.weights_gib_per_rank = m.weight_bytes / c.tp_size / kGiB;
  if (c.replicate_q.value_or(false)) {
    c.weights_gib_per_rank += m.QProjParams() * bpp * (c.dcp_size - 1) / c.tp_size / kGiB;
  }
  if (st.ok() && !hw.cpu) {
    // SGLang's GPU defaults where the user gave none (docs/plan.md).
    st = SetUnlessGiven(raw, "page_size", int64_t{m.mla ? 64 : 16});
    if (st.ok()) st = SetUnlessGiven(raw, "chunked_prefill_size", int64_t{hw.chunked_prefill_size});
    if (st.ok()) st = SetUnlessGiven(raw, "max_running_requests", int64_t{1024});
    // The CPU engine's compute threads per rank mean nothing on a GPU.
    if (st.ok()) st = SetUnlessGiven(raw, "threads", int64_t{1});
    const double kv_gib = hw.memory_gib * hw.mem_fraction_static - c.weights_gib_per_rank;
    if (st.ok() && kv_gib * 1024 < 1) {
      st = CatalogError("CTXPAR-PLAN-005",
                        {{"weights", fmt::format("{:.1f}", c.weights_gib_per_rank)},
                         {"memory", fmt::format("{:.1f}", hw.memory_gib)},
                         {"fraction", fmt::format("{}", hw.mem_fraction_static)},
                         {"tp_size", std::to_string(c.tp_size)}});
    }
    if (st.ok()) st = SetUnlessGiven(raw, "kv_cache_mib", int64_t(kv_gib * 1024));
  }
  if (!st.ok()) return Refuse(c, std::move(st));
  const std::vector<Handler> handlers = HandlersFor(hw);
  ResolveOutcome outcome = RunPipeline(raw, {hw.platform, &m.info}, handlers);
  if (!outcome.status.ok()) return Refuse(c, std::move(outcome.status));
  Expected<EngineConfig> config = MakeEngineConfig(outcome.config, hw.platform);
  if (!config.ok()) return Refuse(c, config.status());
  c.config = *config;
  Expected<KvPoolOptions> pool = m.checkpoint
                                     ? KvPoolFor(c.config, *m.checkpoint, 0)
                                     : KvPoolShape(c.config, m.kv_spec(c.config), m.desc, 0);
  if (!pool.ok()) return Refuse(c, pool.status());
  c.pool = *pool;
  c.config.max_running_requests = c.pool.max_slots;
  const int64_t page_tokens = int64_t{c.pool.page_size} * c.pool.dcp_size;
  c.max_total_num_tokens = c.pool.num_pages * page_tokens;
  c.kv_gib_per_rank = double(c.pool.num_pages) * double(KvPool::PageBytes(c.pool)) / kGiB;
  const int64_t longest = req.workload.input.hi + req.workload.output.hi;
  c.fits_at_once = std::min<int64_t>(
      c.pool.max_slots, c.pool.num_pages / ((longest + page_tokens - 1) / page_tokens));
  Expected<SimResult> sim = Simulate(m, hw, c.config, c.pool, req.workload);
  if (!sim.ok()) return Refuse(c, sim.status());
  c.sim = *sim;
  if (c.config.speculative_algorithm == SpeculativeAlgorithm::kNgram) {
    EngineConfig plain = c.config;
    plain.speculative_algorithm = SpeculativeAlgorithm::kNone;
    Expected<SimResult> without = Simulate(m, hw, plain, c.pool, req.workload);
    if (!without.ok()) return Refuse(c, without.status());
    c.plain = *without;
  }
  const Workload& w = req.workload;
  c.meets_slo = (!w.ttft_slo_ms || c.sim.ttft_ms_p90 <= *w.ttft_slo_ms) &&
                (!w.itl_slo_ms || c.sim.itl_ms_p90 <= *w.itl_slo_ms);
}

// The step model prices a verify step's rows but has no draft model, and the acceptance is the
// user's to give.
Status CheckSpeculation(const PlanRequest& req) {
  const bool given = req.base.given("speculative_algorithm");
  const std::string algorithm = given ? FieldValueStr(req.base.raw("speculative_algorithm")) : "";
  auto bad = [](std::string field, std::string value, std::string rule) {
    return CatalogError("CTXPAR-PLAN-004",
                        {{"field", std::move(field)}, {"value", std::move(value)}, {"rule", rule}});
  };
  if (given && algorithm != "NGRAM") {
    return bad("--speculative-algorithm", algorithm,
               "NGRAM: the step model has no draft model's steps to price");
  }
  const std::optional<double>& rate = req.workload.spec_accept_rate;
  if (given && !rate) {
    return bad("--speculative-accept-rate", "(not given)",
               "given with --speculative-algorithm: the chance that a drafted token is accepted, "
               "which only the text can tell (SGLang's spec_accept_length measures it)");
  }
  if (!given && rate) {
    return bad("--speculative-accept-rate", fmt::format("{}", *rate),
               "given only with --speculative-algorithm NGRAM");
  }
  return Status::Ok();
}

std::string Flags(const Candidate& c) {
  std::string f = fmt::format("--tp-size {} --dcp-size {} --dcp-comm-backend {}", c.tp_size,
                              c.dcp_size, c.backend);
  if (c.replicate_q) f += " --dcp-replicate-q-proj";
  return f;
}

}  // namespace

Expected<PlanReport> MakePlan(const PlanModel& m, const Hardware& hw, const PlanRequest& req) {
  CTXPAR_RETURN_IF_ERROR(CheckWorkload(req.workload));
  if (req.devices < 1 || req.devices > 4096) {
    return CatalogError("CTXPAR-PLAN-006", {{"field", "--gpus"},
                                            {"value", std::to_string(req.devices)},
                                            {"rule", "a count from 1 to 4096"}});
  }
  // A fraction above 1 would give the KV cache memory the device does not have.
  if (!(hw.mem_fraction_static > 0 && hw.mem_fraction_static <= 1)) {
    return CatalogError("CTXPAR-PLAN-006", {{"field", "--mem-fraction-static"},
                                            {"value", fmt::format("{}", hw.mem_fraction_static)},
                                            {"rule", "a fraction in (0, 1]"}});
  }
  CTXPAR_RETURN_IF_ERROR(CheckSpeculation(req));
  const FieldSpec* backends = FindField("dcp_comm_backend");
  PlanReport report;
  report.model = m.name;
  report.hardware = hw.name;
  const bool given_dcp = req.base.given("dcp_size");
  const bool given_backend = req.base.given("dcp_comm_backend");
  const bool given_q = req.base.given("dcp_replicate_q_proj");
  for (int dcp = 1; dcp <= req.devices; ++dcp) {
    if (req.devices % dcp != 0) continue;
    if (given_dcp && FieldValue(int64_t{dcp}) != req.base.raw("dcp_size")) continue;
    for (std::string_view backend : backends->choices) {
      if (given_backend && FieldValue(std::string(backend)) != req.base.raw("dcp_comm_backend")) {
        continue;
      }
      for (std::optional<bool> q : {std::optional<bool>(), std::optional<bool>(true)}) {
        if (given_q && q) continue;
        Candidate c;
        c.tp_size = req.devices;
        c.dcp_size = dcp;
        c.backend = std::string(backend);
        c.replicate_q = q;
        c.flags = Flags(c);
        Evaluate(m, hw, req, c);
        (c.refused.ok() ? report.ranked : report.refused).push_back(std::move(c));
      }
    }
  }
  std::stable_sort(report.ranked.begin(), report.ranked.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.meets_slo != b.meets_slo) return a.meets_slo;
                     return a.sim.output_tokens_per_s > b.sim.output_tokens_per_s;
                   });
  return report;
}

}  // namespace ctxpar::plan
