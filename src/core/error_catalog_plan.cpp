// The catalog entries of `ctxpar plan` (error_catalog.h): its models, machines and workloads.
#include "core/error_catalog_internal.h"

namespace ctxpar::core_internal {

std::vector<CatalogEntry> PlanCatalogEntries() {
  constexpr StatusCode kConfig = StatusCode::kInvalidArgument;
  return {
      {"CTXPAR-PLAN-001",
       "An unknown model preset",
       "--model {name} is not a preset of ctxpar plan; the presets are: {choices}.",
       kConfig,
       "`ctxpar plan --model` names one of the built-in public configurations (their dimensions "
       "come from each model's published config.json, docs/plan.md). Any other model is read "
       "from its checkpoint with --model-path.",
       "A misspelt preset, or a model that has no preset.",
       {"Use one of the listed presets.",
        "Pass the checkpoint instead: --model-path FILE.gguf or --model-path HF_DIR."},
       "ctxpar plan --model deepseek-v4 --hardware h200 --gpus 8",
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8",
       {"CTXPAR-PLAN-002"}},
      {"CTXPAR-PLAN-002",
       "An unknown machine",
       "--hardware {name} is not a machine of ctxpar plan; the machines are: {choices}.",
       kConfig,
       "`ctxpar plan --hardware` names a built-in GPU (memory, HBM bandwidth, dense bf16 FLOP/s "
       "and interconnect from the vendor's datasheet, docs/plan.md). This machine is described "
       "by the JSON that bench/plan/this_machine.py measures, given with --hardware-json.",
       "A misspelt machine, or a GPU without a table row.",
       {"Use one of the listed machines.",
        "Describe the machine in a JSON file (docs/plan.md lists the fields) and pass "
        "--hardware-json FILE."},
       "ctxpar plan --model deepseek-v3 --hardware h300 --gpus 8",
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8",
       {"CTXPAR-PLAN-001", "CTXPAR-PLAN-003"}},
      {"CTXPAR-PLAN-003",
       "A machine description that cannot be read",
       "ctxpar plan cannot read the machine description {origin}: field {field}: {problem}.",
       kConfig,
       "--hardware-json describes this machine by its measured rates: memory_gib, mem_gbps and "
       "flops are required, the rest (attention rate, collective latencies, step overhead) "
       "default to 0. Each must be a number >= 0.",
       "A file that is not JSON, a missing field, or a negative or non-numeric rate.",
       {"Regenerate the file with bench/plan/this_machine.py.",
        "Fix the named field (docs/plan.md lists them)."},
       "ctxpar plan --model-path M.gguf --hardware-json broken.json",
       "ctxpar plan --model-path M.gguf --hardware-json this_machine.json",
       {"CTXPAR-PLAN-002"}},
      {"CTXPAR-PLAN-004",
       "A workload that cannot run",
       "ctxpar plan cannot simulate the workload: {field} = {value}, but it must be {rule}.",
       kConfig,
       "The planner simulates a workload: input and output lengths (fixed, or uniform over "
       "LO:HI), and either a number of requests kept in flight (--concurrency, a closed loop) or "
       "a Poisson arrival rate (--request-rate, an open loop).",
       "A zero or reversed length range, both or neither of --concurrency and --request-rate, "
       "a count below 1 (--concurrency 0, --num-requests 0), an SLO that is not a positive time "
       "(--ttft-slo-ms 0 would mark every candidate as meeting it), NaN, or speculative "
       "decoding without the chance that a draft is accepted (or that chance without "
       "--speculative-algorithm NGRAM, the one algorithm the step model prices).",
       {"Give lengths as N or LO:HI with 1 <= LO <= HI.",
        "Give exactly one of --concurrency and --request-rate.",
        "Leave out an SLO you do not want checked rather than giving it 0.",
        "With --speculative-algorithm NGRAM give --speculative-accept-rate P (0 to 1): a served "
        "model's sglang:spec_accept_length L over k drafts gives P from L = (1 - P^(k+1)) / "
        "(1 - P)."},
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8 --input-len 0",
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8 --input-len 32768 "
       "--concurrency 64",
       {"CTXPAR-PLAN-001"}},
      {"CTXPAR-PLAN-005",
       "Weights that leave no KV memory",
       "The weights take {weights} GiB per device at tp_size {tp_size}, more than the {fraction} "
       "of the device's {memory} GiB that weights and the KV cache share (mem_fraction_static).",
       kConfig,
       "A GPU's memory holds the rank's weights, its KV cache and the activations; SGLang gives "
       "weights and KV the mem_fraction_static share. When the weights alone exceed it, the "
       "candidate has no KV cache and cannot serve.",
       "A large model on few devices (DeepSeek-V3 on fewer than 8 H100s), or replicated Q "
       "projections that no longer fit.",
       {"Use more devices (--gpus), or a device with more memory.",
        "Raise --mem-fraction-static if the activations need less."},
       "ctxpar plan --model deepseek-v3 --hardware h100 --gpus 4",
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8",
       {"CTXPAR-KV-002"}},
      {"CTXPAR-PLAN-006",
       "A machine input out of range",
       "ctxpar plan cannot plan for {field} = {value}: it must be {rule}.",
       kConfig,
       "The devices to plan for and the share of a device's memory that weights and the KV "
       "cache may take are the machine's side of a plan; they are checked before any candidate "
       "is simulated.",
       "--gpus 0 or a negative count, --mem-fraction-static above 1 (more memory than the "
       "device has), 0, negative or NaN.",
       {"Give --gpus as the number of devices, 1 to 4096.",
        "Give --mem-fraction-static as a fraction in (0, 1] (SGLang's default is 0.85), or leave "
        "it out."},
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8 --mem-fraction-static 5",
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8 --mem-fraction-static 0.9",
       {"CTXPAR-PLAN-004", "CTXPAR-PLAN-005"}},
      {"CTXPAR-PLAN-007",
       "No candidate can serve the workload",
       "No launch configuration can serve this workload on {devices} x {hardware}: all "
       "{refused} candidates were refused (the first by {first}).",
       kConfig,
       "ctxpar plan enumerates every (dcp size, combine backend, Q path) for the devices, "
       "resolves each through the launch pipeline and sizes its KV pool; a candidate that fails "
       "a rule is listed with the rule's ID. When every one fails, nothing can be recommended "
       "and the plan ends with this error (exit status 2).",
       "Requests longer than the model's context or the pool's capacity, weights that leave no "
       "KV memory, or launch flags (a fixed --dcp-size, backend or Q path) that no layout of "
       "these devices accepts.",
       {"Read the refusals above: each names its catalog ID (ctxpar explain ID).",
        "Shorten --input-len / --output-len, give more devices (--gpus) or drop the fixed "
        "launch flags."},
       "ctxpar plan --model deepseek-v3 --hardware h100 --gpus 4",
       "ctxpar plan --model deepseek-v3 --hardware h200 --gpus 8",
       {"CTXPAR-PLAN-005", "CTXPAR-ENGINE-006"}},
  };
}

}  // namespace ctxpar::core_internal
