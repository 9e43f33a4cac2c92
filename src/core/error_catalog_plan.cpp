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
       "or a negative count.",
       {"Give lengths as N or LO:HI with 1 <= LO <= HI.",
        "Give exactly one of --concurrency and --request-rate."},
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
  };
}

}  // namespace ctxpar::core_internal
