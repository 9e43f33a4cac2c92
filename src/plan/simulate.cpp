// The engine's scheduler run without a model: requests, the step-time model, the simulated run.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "ctxpar/error_catalog.h"
#include "ctxpar/plan.h"
#include "engine/draft_record.h"
#include "engine/scheduler.h"

namespace ctxpar::plan {

namespace {

std::string Num(double v) { return fmt::format("{}", v); }

Status CheckRange(std::string_view field, const LengthRange& r) {
  if (r.lo >= 1 && r.lo <= r.hi && r.hi <= (int64_t{1} << 30)) return Status::Ok();
  return CatalogError("CTXPAR-PLAN-004",
                      {{"field", std::string(field)},
                       {"value", fmt::format("{}:{}", r.lo, r.hi)},
                       {"rule", "a length N or a range LO:HI with 1 <= LO <= HI <= 2^30"}});
}

// Linear between the two nearest ranks, as bench/serve/loadgen.py reports its percentiles.
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double k = q * double(v.size() - 1);
  const auto lo = static_cast<std::size_t>(k);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (k - double(lo));
}

// Bytes one rank moves per token and layer of its KV (kv_pool.h's page arithmetic per token).
double KvTokenBytes(const KvSpec& kv) {
  return double(kv.num_kv_heads) * (kv.head_dim_k + (kv.v_in_k ? 0 : kv.head_dim_v)) *
         double(DataTypeSize(kv.dtype));
}

// One collective over `ranks` ranks moving `bytes` per rank.
double Collective(const Hardware& hw, int ranks, double bytes, double latency_us) {
  const bool inside = ranks <= hw.domain_devices;
  const double gbps = inside ? hw.link_gbps : hw.net_gbps;
  const double lat = inside ? latency_us + hw.link_latency_per_rank_us * ranks : hw.net_latency_us;
  return lat * 1e-6 + bytes / (gbps * 1e9);
}

}  // namespace

Status CheckWorkload(const Workload& w) {
  CTXPAR_RETURN_IF_ERROR(CheckRange("--input-len", w.input));
  CTXPAR_RETURN_IF_ERROR(CheckRange("--output-len", w.output));
  auto bad = [](std::string_view field, std::string value, std::string_view rule) {
    return CatalogError(
        "CTXPAR-PLAN-004",
        {{"field", std::string(field)}, {"value", std::move(value)}, {"rule", std::string(rule)}});
  };
  // A NaN rate compares false both ways: only a finite positive one counts as given.
  const bool rate = w.request_rate > 0 && std::isfinite(w.request_rate);
  if (w.concurrency < 0 || (w.request_rate != 0 && !rate) || (w.concurrency > 0) == rate) {
    return bad("--concurrency / --request-rate",
               fmt::format("{} / {}", w.concurrency, Num(w.request_rate)),
               "exactly one of them: a count >= 1 (a closed loop) or a finite rate > 0 (an open "
               "loop)");
  }
  if (w.spec_accept_rate && !(*w.spec_accept_rate >= 0 && *w.spec_accept_rate <= 1)) {
    return bad("--speculative-accept-rate", Num(*w.spec_accept_rate),
               "a chance from 0 to 1 that the target accepts a drafted token");
  }
  if (w.num_requests && (*w.num_requests < 1 || *w.num_requests > 1000000)) {
    return bad("--num-requests", std::to_string(*w.num_requests), "a count from 1 to 10^6");
  }
  for (const auto& [field, slo] :
       {std::pair{"--ttft-slo-ms", w.ttft_slo_ms}, std::pair{"--itl-slo-ms", w.itl_slo_ms}}) {
    if (slo && !(*slo > 0 && std::isfinite(*slo))) {
      return bad(field, Num(*slo), "a finite time > 0 in milliseconds");
    }
  }
  return Status::Ok();
}

Expected<std::vector<SimRequest>> MakeRequests(const Workload& w) {
  CTXPAR_RETURN_IF_ERROR(CheckWorkload(w));
  const int n = w.num_requests.value_or(std::max(16, 4 * w.concurrency));
  std::mt19937_64 rng(w.seed);
  std::vector<SimRequest> out(n);
  double t = 0;
  for (SimRequest& r : out) {
    r.input_len = std::uniform_int_distribution<int64_t>(w.input.lo, w.input.hi)(rng);
    r.output_len =
        static_cast<int32_t>(std::uniform_int_distribution<int64_t>(w.output.lo, w.output.hi)(rng));
    if (w.request_rate > 0) {
      t += std::exponential_distribution<double>(w.request_rate)(rng);
      r.arrival_s = t;
    }
  }
  return out;
}

namespace {

// Linear between the points of `c`; below the first, its value; beyond the last, the last value
// (`extend` false) or the last segment continued.
double Interpolate(const std::vector<std::pair<int, double>>& c, double x, bool extend) {
  if (x <= c.front().first || c.size() == 1) return c.front().second;
  std::size_t i = 1;
  while (i + 1 < c.size() && x > c[i].first) ++i;
  if (x > c[i].first && !extend) return c[i].second;
  const double t = (x - c[i - 1].first) / (c[i].first - c[i - 1].first);
  return c[i - 1].second + t * (c[i].second - c[i - 1].second);
}

// flops_curve and flops_small are measured rates; the efficiency scales the large-step (or peak)
// rate.
double MatmulRate(const Hardware& hw, double tokens) {
  const double peak = hw.flops * Interpolate(hw.flops_efficiency, tokens, /*extend=*/false);
  if (tokens >= 64) return peak;
  if (hw.flops_curve.empty()) return hw.flops_small > 0 ? hw.flops_small : peak;
  return Interpolate(hw.flops_curve, tokens, /*extend=*/false);
}

}  // namespace

double StepSeconds(const PlanModel& m, const Hardware& hw, const EngineConfig& c, const KvSpec& kv,
                   const Batch& batch) {
  const int tp = c.tp_size, n = c.dcp_size;
  // The ranks of a CPU host share its bandwidth and cores; a GPU rank has its own.
  const double share = hw.cpu ? tp : 1;
  const double bw = hw.mem_gbps * 1e9 * hw.mem_efficiency / share;
  const double attn_bw = (hw.attn_gbps > 0 ? hw.attn_gbps * 1e9 : bw * share) / share;
  const double tokens = double(batch.num_tokens());
  const double flops = MatmulRate(hw, tokens) / share;
  const double act_bytes = hw.cpu ? 4 : 2;
  const double rows = double(batch.TotalLogitRows());
  const double bpp = m.weight_bytes / m.TotalParams();
  const double head = double(m.vocab) * m.hidden;

  // Weights and matmuls: every weight a rank holds is read once a step (routed experts: those
  // some token of the step picks), and each token multiplies by the active ones.
  const int moe_layers = m.num_layers - m.dense_layers;
  const double expert = 3.0 * m.hidden * m.expert_ffn;
  const double routed_all = double(moe_layers) * m.experts * expert;
  double touched = 0;
  if (m.experts > 0) {
    const double miss = std::pow(1.0 - double(m.experts_per_token) / m.experts, tokens);
    touched = routed_all * (1.0 - miss);
  }
  const double input_embedding = m.tied_embeddings ? 0 : head;
  const double replica_q = c.dcp_replicate_q_proj ? m.QProjParams() * (n - 1) : 0;
  const double held = m.TotalParams() - routed_all - input_embedding + touched + replica_q;
  const double active = m.ActiveParams() - input_embedding - head + replica_q;
  const double linear =
      std::max(held * bpp / tp / bw, (2 * tokens * active + 2 * rows * head) / tp / flops);

  // Attention: each sequence's KV shard is read once a step; each row attends over its causal
  // prefix with the DCP group's widened head set (h x N heads over 1/N of the keys). On a GPU a
  // prefill chunk under DCP instead all-gathers its sequence's KV shards and attends with the
  // rank's own heads (vLLM's DCP prefill: the context all-gather), so only decode rows combine;
  // ctxpar's CPU engine runs every row through the DCP combine.
  const double kv_token = KvTokenBytes(kv);
  double combine_rows = 0, kv_gather = 0;
  const double heads_w = double(m.num_heads) / tp * n;
  const int window_layers =
      m.sliding_window > 0 && m.global_every > 0 ? m.num_layers - m.num_layers / m.global_every : 0;
  const int full_layers = m.num_layers - window_layers;
  double attention = 0;
  for (const BatchSeq& s : batch.seqs) {
    const double end = double(s.pos0 + s.num_tokens);
    const double rows_ctx = s.num_tokens * (double(s.pos0) + (s.num_tokens + 1) / 2.0);
    // A verify step's rows (speculative decoding, all_logits) attend as decode rows do: SGLang's
    // target_verify runs the decode kernels, and on the CPU every row combines anyway.
    const bool decode = s.num_tokens == 1 ||
                        (c.speculative_algorithm != SpeculativeAlgorithm::kNone && s.all_logits);
    // MLA decodes absorbed (latent width) and prefills as multi-head attention.
    const double dqk = m.mla ? (decode ? m.kv_lora_rank + m.qk_rope_head_dim
                                       : m.qk_nope_head_dim + m.qk_rope_head_dim)
                             : m.head_dim;
    const double dv = m.mla ? (decode ? m.kv_lora_rank : m.head_dim) : m.head_dim;
    const bool gather = !hw.cpu && !decode && n > 1;
    combine_rows += gather ? 0 : s.num_tokens;
    if (gather) kv_gather += end * kv_token * (n - 1) / n;
    const double shards = gather ? 1 : n;
    auto layer = [&](double keys, double ctx) {
      return std::max(std::ceil(keys / shards) * kv_token / attn_bw,
                      2 * ctx / n * heads_w * (dqk + dv) / flops);
    };
    attention += full_layers * layer(end, rows_ctx);
    if (window_layers > 0) {
      const double w = m.sliding_window;
      attention += window_layers * layer(std::min(end, w), s.num_tokens * std::min(end, w));
    }
  }

  // Collectives per layer: TP's two reductions, and under DCP the Q all-gather (unless Q is
  // replicated) and the combine (ag_rs: LSE all-gather + reduce-scatter; a2a: one exchange;
  // fi_a2a / shm_a2a: the same bytes written one-sided).
  double comm = 0;
  // The leader broadcasts each step's plan (engine.h) before the forward.
  const double broadcast = tp > 1 ? Collective(hw, tp, 256, hw.link_latency_us) : 0;
  if (tp > 1) {
    comm +=
        hw.tp_collectives_per_layer *
        Collective(hw, tp, 2.0 * (tp - 1) / tp * tokens * m.hidden * act_bytes, hw.link_latency_us);
  }
  if (n > 1) {
    const double h = double(m.num_heads) / tp;
    const double dq = m.mla ? m.kv_lora_rank + m.qk_rope_head_dim : m.head_dim;
    const double dv = m.mla ? m.kv_lora_rank : m.head_dim;
    const double r = combine_rows;
    if (kv_gather > 0) comm += Collective(hw, n, kv_gather, hw.link_latency_us);
    if (!c.dcp_replicate_q_proj) {
      comm += Collective(hw, n, (n - 1) * r * h * dq * act_bytes, hw.link_latency_us);
    }
    switch (c.dcp_comm_backend) {
      case CombineBackend::kAgRs:
        comm += Collective(hw, n, (n - 1) * r * h * n * 4, hw.link_latency_us) +
                Collective(hw, n, (n - 1) * r * h * dv * 4, hw.link_latency_us);
        break;
      case CombineBackend::kA2a:
        comm += Collective(hw, n, (n - 1) * r * h * (dv * act_bytes + 4), hw.link_latency_us);
        break;
      case CombineBackend::kFiA2a:
      case CombineBackend::kShmA2a:
        comm += Collective(hw, n, (n - 1) * r * h * (dv * act_bytes + 4), hw.oneside_latency_us);
        break;
    }
  }
  const double engine =
      hw.step_cost_us.empty()
          ? 0
          : std::max(0.0, Interpolate(hw.step_cost_us, double(batch.seqs.size()), true));
  return linear + attention + comm * m.num_layers + broadcast + engine * 1e-6;
}

Expected<SimResult> Simulate(const PlanModel& m, const Hardware& hw, const EngineConfig& c,
                             KvPoolOptions options, const Workload& w,
                             const std::function<void(const StepRecord&)>& observer) {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<SimRequest> reqs, MakeRequests(w));
  options.map_storage = false;
  CTXPAR_ASSIGN_OR_RETURN(KvPool pool, KvPool::Create(options));
  const KvSpec kv = m.kv_spec(c);
  // The engine refuses a request that cannot fit the context or the whole pool (Validate).
  for (const SimRequest& r : reqs) {
    const int64_t needed = r.input_len + r.output_len;
    const std::initializer_list<CatalogArg> counts = {{"needed", std::to_string(needed)},
                                                      {"prompt", std::to_string(r.input_len)},
                                                      {"max_new", std::to_string(r.output_len)}};
    std::vector<CatalogArg> args(counts);
    if (needed > m.desc.context_length) {
      args.push_back({"context", std::to_string(m.desc.context_length)});
      return CatalogError("CTXPAR-ENGINE-005", args);
    }
    if (needed > pool.capacity_tokens()) {
      args.push_back({"capacity", std::to_string(pool.capacity_tokens())});
      return CatalogError("CTXPAR-ENGINE-006", args);
    }
  }
  // The prefix cache as the engine runs it: the prompts share nothing, but a retracted request
  // re-prefills from its own cached pages.
  engine::Scheduler scheduler(
      {options.max_slots, c.chunked_prefill_size, c.schedule_conservativeness,
       !c.disable_radix_cache, c.schedule_policy},
      &pool);
  std::vector<engine::SeqState> seqs(reqs.size());
  std::vector<double> arrival(reqs.size()), last(reqs.size(), -1.0);
  std::vector<double> ttft, itl, decode_steps;
  std::size_t submitted = 0, finished = 0;
  // Speculative decoding: each request's draft record (the engine's rule) and accept stream.
  const bool speculative =
      c.speculative_algorithm == SpeculativeAlgorithm::kNgram && w.spec_accept_rate.has_value();
  std::vector<engine::DraftRecord> records(reqs.size());
  std::mt19937_64 accept_rng(w.seed ^ 0x5bd1e9955bd1e995ull);
  std::bernoulli_distribution accepts(speculative ? *w.spec_accept_rate : 0.0);
  uint64_t verify_steps = 0, verify_tokens = 0;
  double now = 0;
  auto submit = [&](double t) {
    const std::size_t i = submitted++;
    engine::SeqState& s = seqs[i];
    s.id = i + 1;
    s.prompt_len = static_cast<int32_t>(reqs[i].input_len);
    s.max_new_tokens = reqs[i].output_len;
    // Distinct ids per request, so that no prompt shares a prefix with another.
    s.tokens.resize(reqs[i].input_len);
    for (int64_t k = 0; k < reqs[i].input_len; ++k)
      s.tokens[k] = int32_t((s.id * 7919 + k) % 32000);
    arrival[i] = t;
    scheduler.Enqueue(&s);
  };
  const bool closed = w.concurrency > 0;
  const std::size_t clients = closed ? std::min(reqs.size(), std::size_t(w.concurrency)) : 0;
  if (closed) submit(0);
  if (w.in_process) {
    while (submitted < clients) submit(0);
  }
  // A server's successors, sent at these times, reach the scheduler after its next plan.
  std::vector<double> in_flight;
  SimResult out;
  int64_t generated = 0;
  while (finished < reqs.size()) {
    if (!closed) {
      while (submitted < reqs.size() && reqs[submitted].arrival_s <= now) {
        submit(reqs[submitted].arrival_s);
      }
      if (scheduler.running() == 0 && scheduler.queued() == 0) {
        now = reqs[submitted].arrival_s;
        continue;
      }
    }
    if (scheduler.running() == 0 && scheduler.queued() == 0) {
      for (double t : std::exchange(in_flight, {})) submit(t);  // an idle engine waits for them
    }
    if (speculative) {
      // The engine's Draft: every decoding request drafts what its record says.
      for (engine::SeqState& s : seqs) {
        if (!engine::Drafts(s)) continue;
        engine::DraftRecord& record = records[s.id - 1];
        const int budget = record.Length(s, c.speculative_num_draft_tokens);
        s.draft.assign(budget, 1);
        record.Drafted(budget > 0);
      }
    }
    CTXPAR_ASSIGN_OR_RETURN(engine::StepPlan plan, scheduler.Plan());
    if (plan.batch.seqs.empty()) return Internal("the simulated scheduler planned an empty step");
    // Requests that arrive while this step runs: the other clients' first ones, the successors.
    while (submitted < clients) submit(0);
    for (double t : std::exchange(in_flight, {})) submit(t);
    if (observer) observer(engine::RecordStep(plan));
    const double dt = StepSeconds(m, hw, c, kv, plan.batch);
    now += dt;
    ++out.steps;
    CTXPAR_RETURN_IF_ERROR(scheduler.Commit(plan));
    int decoding = 0;
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      decoding += plan.batch.seqs[i].num_tokens == 1 + int64_t(plan.seqs[i]->draft.size());
    }
    out.peak_batch = std::max(out.peak_batch, decoding);
    if (decoding == int(plan.batch.seqs.size())) decode_steps.push_back(dt);
    std::vector<engine::SeqState*> done;
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      engine::SeqState* s = plan.seqs[i];
      const BatchSeq& b = plan.batch.seqs[i];
      const auto drafted = int32_t(s->draft.size());
      const bool ends = b.pos0 + b.num_tokens - drafted == int64_t(s->tokens.size());
      if (!ends || plan.batch.LogitRows(i) == 0) continue;
      // The engine's rule (engine.cpp Sample): the last row samples a token unless the request
      // has all its tokens; it finishes at max_new_tokens (ignore_eos: no stop token). A verify
      // step gives one token and the drafts accepted before the first rejected one.
      if (s->output_len() < s->max_new_tokens) {
        int32_t accepted = 0;
        while (accepted < drafted && accepts(accept_rng)) ++accepted;
        const int32_t emitted = std::min(accepted + 1, s->max_new_tokens - s->output_len());
        s->tokens.insert(s->tokens.end(), emitted, 1);
        generated += emitted;
        const std::size_t r = s->id - 1;
        if (last[r] < 0) {
          ttft.push_back(now - arrival[r]);
          itl.insert(itl.end(), emitted - 1, 0.0);
        } else {
          itl.insert(itl.end(), emitted, (now - last[r]) / emitted);
        }
        last[r] = now;
        if (speculative && i < std::size_t(plan.decode_seqs)) {
          ++verify_steps;
          verify_tokens += emitted;
        }
        if (drafted > 0 && s->output_len() < s->max_new_tokens) {
          records[r].Verified(accepted, drafted);
          CTXPAR_RETURN_IF_ERROR(scheduler.Accept(s, accepted));
        }
      }
      if (s->output_len() >= s->max_new_tokens) done.push_back(s);
    }
    for (engine::SeqState* s : done) {
      CTXPAR_RETURN_IF_ERROR(scheduler.Remove(s));
      ++finished;
      if (closed && submitted + in_flight.size() < reqs.size()) {
        if (w.in_process) {
          submit(now);
        } else {
          in_flight.push_back(now);
        }
      }
    }
  }
  out.retractions = scheduler.retractions();
  out.duration_s = now;
  out.decode_step_ms = Percentile(decode_steps, 0.5) * 1e3;
  out.ttft_ms_p50 = Percentile(ttft, 0.5) * 1e3;
  out.ttft_ms_p90 = Percentile(ttft, 0.9) * 1e3;
  out.itl_ms_p50 = Percentile(itl, 0.5) * 1e3;
  out.itl_ms_p90 = Percentile(itl, 0.9) * 1e3;
  out.accept_length = verify_steps > 0 ? double(verify_tokens) / double(verify_steps) : 0;
  out.output_tokens_per_s = now > 0 ? double(generated) / now : 0;
  out.requests_per_s = now > 0 ? double(reqs.size()) / now : 0;
  return out;
}

}  // namespace ctxpar::plan
