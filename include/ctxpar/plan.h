// The planner (`ctxpar plan`): which launch configuration to use for a model, a machine and a
// workload, and what it will give, found by simulating the engine rather than launching it.
//
// 1. Candidates: every (dcp_size, --dcp-comm-backend, --dcp-replicate-q-proj) over tp_size =
//    the devices, each run through the resolution pipeline (config.h) for the target's platform
//    with the model's own rules. A refused candidate keeps the catalog error of the rule that
//    refused it. GPU targets skip `_handle_cpu_engine` (ctxpar's CPU engine is not what runs
//    there) and take SGLang's GPU defaults instead (docs/plan.md).
// 2. Capacity: the KV pool a rank gets (engine.h's KvPoolFor for a checkpoint, KvPoolShape for a
//    preset on a GPU, whose budget is memory x mem_fraction_static - the rank's weights), so
//    max_total_num_tokens is the engine's own number.
// 3. Prediction: the engine's scheduler (src/engine/scheduler.h) runs over a KvPool that keeps
//    only its accounts (KvPoolOptions::map_storage = false), with the engine's finish rule, and a
//    step-time model (a roofline of weights, KV reads, FLOPs and collectives per layer, fitted to
//    the target's measured rates) advances the clock by each planned batch. TTFT, inter-token
//    latency and throughput are read off the simulated clock.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctxpar/config.h"
#include "ctxpar/engine.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/model.h"
#include "ctxpar/platform.h"
#include "ctxpar/status.h"

namespace ctxpar::plan {

// A model as the planner sees it: what the resolution pipeline needs, its KV per token, and
// the dimensions the step-time model counts bytes and FLOPs with.
// A model as the planner sees it: its shape (model.h), from a preset's config.json figures or
// from the checkpoint's own source.
struct PlanModel : ModelShape {
  std::string name;
  std::string source;  // where the dimensions come from (a config.json's address, or a path)
  ModelInfo info;      // architecture, heads, the model's layout rules (hook)
  ModelDesc desc;
  std::function<KvSpec(const EngineConfig&)> kv_spec;
  // A checkpoint: the engine's own ModelSource (capacity through KvPoolFor); null for presets.
  std::shared_ptr<const ModelSource> checkpoint;
  double weight_bytes = 0;  // the checkpoint's weights in bytes (all ranks together)

  double TotalParams() const;
  // Parameters a token multiplies by in one forward (routed experts: experts_per_token).
  double ActiveParams() const;
  // The query projection's parameters (replicated over the DCP group with
  // --dcp-replicate-q-proj).
  double QProjParams() const;
};

// The built-in presets: deepseek-v3, deepseek-r1, kimi-k2, glm-4.5, llama-3.1-70b,
// llama-3.1-405b, qwen3-235b-a22b, gemma-3-27b (docs/plan.md cites each config.json).
std::vector<std::string> PresetModelNames();
// CTXPAR-PLAN-001 for an unknown name.
Expected<PlanModel> PresetModel(std::string_view name);
// A GGUF file or a HF checkpoint directory through OpenModelSource.
Expected<PlanModel> CheckpointModel(const std::string& path);

// A machine: per device (a GPU, or for a CPU the whole host shared by its ranks).
struct Hardware {
  std::string name;
  std::string source;  // where the figures come from
  Platform platform;   // the target of the resolution pipeline
  bool cpu = false;    // ctxpar's CPU engine: ranks share the host's rates and memory
  double memory_gib = 0;
  double mem_gbps = 0;     // HBM (or DRAM) bandwidth, GB/s
  double flops = 0;        // dense bf16 FLOP/s (CPU: the matmul rate measured at 512 rows)
  double flops_small = 0;  // under 64 tokens a step (CPU: measured at 16 rows); 0: flops
  // CPU: the matmul rate measured at a few row counts under 64, ascending (rows, FLOP/s); a step
  // of fewer than 64 tokens interpolates it linearly in rows (the last rate beyond its last
  // point). Empty: flops_small.
  std::vector<std::pair<int, double>> flops_curve;
  double attn_gbps = 0;  // KV read rate of decode attention; 0: mem_gbps x mem_efficiency
  // Achieved / peak of the kernels: mem_gbps x mem_efficiency; flops x flops_efficiency at the
  // step's tokens (not flops_small and flops_curve, measured rates): (tokens, efficiency)
  // ascending, linear between points, constant outside them.
  double mem_efficiency = 1;
  std::vector<std::pair<int, double>> flops_efficiency = {{64, 1.0}};
  double link_gbps = 0;        // per device and direction inside the scale-up domain
  double link_latency_us = 0;  // one collective inside it, plus per rank:
  double link_latency_per_rank_us = 0;
  double oneside_latency_us = 0;            // a one-sided exchange (fi_a2a over MNNVL, shm_a2a)
  int domain_devices = 0;                   // devices one NVLink (MNNVL) domain holds
  double net_gbps = 0, net_latency_us = 0;  // InfiniBand between domains
  // TP collectives per layer: SGLang's two all-reduces on GPUs; ctxpar's CPU engine gathers the
  // inputs and the output rows of o_proj and ffn_down (four all-gathers).
  int tp_collectives_per_layer = 2;
  // The engine's cost of a step beyond the kernels and collectives (scheduling, launches,
  // sampling, detokenizing, the stream; on a CPU host with more ranks than cores, the ranks'
  // waits for one another), by the sequences of the step: (sequences, us) ascending, linear
  // between points, the first value below the first point and the last segment's slope beyond
  // the last. Empty: none.
  std::vector<std::pair<int, double>> step_cost_us;
  double mem_fraction_static = 0.85;  // GPUs: weights + KV share of the memory
  int chunked_prefill_size = 0;       // GPUs: SGLang's default for this memory size
};

// h100, h200, b200, gb200-nvl72, mi300x (docs/plan.md gives the source of every figure).
std::vector<std::string> PresetHardwareNames();
// CTXPAR-PLAN-002 for an unknown name.
Expected<Hardware> PresetHardware(std::string_view name);
// This machine, as bench/plan/this_machine.py measures it (docs/plan.md: the fields);
// CTXPAR-PLAN-003 names the field that is missing or out of range.
Expected<Hardware> HardwareFromJson(std::string_view json_text, const std::string& origin);

// Lengths drawn uniformly from [lo, hi] (lo == hi: fixed).
struct LengthRange {
  int64_t lo = 0, hi = 0;
};

struct Workload {
  LengthRange input{1024, 1024};
  LengthRange output{128, 128};
  int concurrency = 0;  // closed loop: this many requests in flight (0: use request_rate)
  // Closed loop. false, a server's clients: the first step runs the first request alone (the
  // others arrive while it runs), and a finished request's successor, sent when its last token
  // is streamed, arrives while the step after it runs (the HTTP round trip outlasts the engine's
  // turn from one step to the next). true, clients in the engine's process (Engine::Submit,
  // again from the finish callback): every first request is in the first step and a successor
  // in the next step.
  bool in_process = false;
  double request_rate = 0;            // open loop: Poisson arrivals per second
  std::optional<int> num_requests;    // unset: 4 x concurrency (at least 16)
  std::optional<double> ttft_slo_ms;  // p90 objectives; unset: none
  std::optional<double> itl_slo_ms;
  // With --speculative-algorithm NGRAM: the chance that the target accepts a drafted token given
  // the drafts before it were accepted (0 to 1; SGLang's accept length over a verify step of k
  // drafts is (1 - p^(k+1)) / (1 - p)). Each simulated request drafts as the engine's adaptive
  // rule says and accepts each draft with this chance, from its own seeded stream; the n-gram
  // lookup is assumed to find a draft whenever the rule asks for one. Required with speculation,
  // refused without it.
  std::optional<double> spec_accept_rate;
  uint64_t seed = 0;
};

// One request of the simulated run, in submission order (its id is its index + 1, as the
// engine numbers requests).
struct SimRequest {
  int64_t input_len = 0;
  int32_t output_len = 0;
  double arrival_s = 0;  // open loop; closed loop submits as earlier requests finish
};
// CTXPAR-PLAN-004 naming the first field of `workload` out of its range: lengths 1 <= LO <= HI
// <= 2^30; exactly one of concurrency (>= 1) and request_rate (> 0, finite); num_requests 1 to
// 10^6; each SLO > 0 and finite; spec_accept_rate in [0, 1]. MakeRequests and MakePlan check it
// before anything else.
Status CheckWorkload(const Workload& workload);
// The workload's requests (CheckWorkload first).
Expected<std::vector<SimRequest>> MakeRequests(const Workload& workload);

struct SimResult {
  int64_t steps = 0;
  int peak_batch = 0;  // most requests decoding in one step
  uint64_t retractions = 0;
  double decode_step_ms = 0;  // median step time of steps that only decode
  double duration_s = 0;
  double ttft_ms_p50 = 0, ttft_ms_p90 = 0;
  // A verify step that gives n tokens counts n gaps, each 1/n of the time since the request's
  // previous tokens.
  double itl_ms_p50 = 0, itl_ms_p90 = 0;
  double accept_length = 0;  // speculative: tokens per verify step (SGLang's spec_accept_length)
  double output_tokens_per_s = 0;
  double requests_per_s = 0;
};

// The step time of one planned batch on one rank (seconds), for a resolved configuration.
double StepSeconds(const PlanModel& model, const Hardware& hw, const EngineConfig& config,
                   const KvSpec& kv, const Batch& batch);

// Runs the engine's scheduler over an accounting-only pool of `pool` options and the step-time
// model. `observer` (may be null) sees every step as the engine's does.
Expected<SimResult> Simulate(const PlanModel& model, const Hardware& hw, const EngineConfig& config,
                             KvPoolOptions pool, const Workload& workload,
                             const std::function<void(const StepRecord&)>& observer = {});

struct PlanRequest {
  LaunchConfig base;  // the user's launch flags; the planner varies dcp, backend and Q path
  int devices = 1;    // tp_size
  Workload workload;
};

struct Candidate {
  int tp_size = 1, dcp_size = 1;
  std::string backend;
  std::optional<bool> replicate_q;  // unset: the model decides
  std::string flags;                // the launch flags that select it
  Status refused;                   // ok when the pipeline accepted it
  std::string refused_id;           // the catalog ID of the rule that refused it
  // Accepted:
  EngineConfig config;
  KvPoolOptions pool;
  int64_t max_total_num_tokens = 0;
  double weights_gib_per_rank = 0;
  double kv_gib_per_rank = 0;
  int64_t fits_at_once = 0;  // requests of the longest input + output the pool holds at once
  SimResult sim;
  // Under speculative decoding: the same candidate simulated without it, to say whether it pays.
  std::optional<SimResult> plain;
  bool meets_slo = true;
};

struct PlanReport {
  std::string model, hardware;
  std::vector<Candidate> ranked;   // accepted, best first: SLO met, then output tokens/s
  std::vector<Candidate> refused;  // in enumeration order
};

// Enumerates, resolves, sizes and simulates every candidate. CTXPAR-PLAN-004 first when the
// workload is out of range, when speculation (--speculative-algorithm) and
// workload.spec_accept_rate are not given together, or for STANDALONE (the step model has no
// draft model).
Expected<PlanReport> MakePlan(const PlanModel& model, const Hardware& hw, const PlanRequest& req);

}  // namespace ctxpar::plan
