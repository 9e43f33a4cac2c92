// The error catalog: the one table of every error ctxpar raises, and its rendering and matching.
#include "ctxpar/error_catalog.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "core/error_catalog_internal.h"

namespace ctxpar {
namespace {

constexpr StatusCode kConfig = StatusCode::kInvalidArgument;
constexpr StatusCode kRuntime = StatusCode::kFailedPrecondition;
constexpr StatusCode kBug = StatusCode::kInternal;

// The configuration entries; the runtime ones (files, processes, the CLI) are in
// error_catalog_runtime.cpp.
std::vector<CatalogEntry> ConfigEntries() {
  return {
      {"CTXPAR-CONFIG-001",
       "A resolution step declared a field that does not exist",
       "{source} declared {field}, which is not a configuration field.",
       kBug,
       "A handler of the resolution pipeline (or code that fills a LaunchConfig) named a field "
       "that ctxpar does not have. Every value must belong to a known field so that its source "
       "can be shown; the declaration is refused as a whole and nothing of it is kept.",
       "A model hook or a handler calls Resolution::Declare, or code calls LaunchConfig::Set, "
       "with a misspelled or removed field name. Command-line flags cannot cause it.",
       {"If you did not write the named source, report it with the full command line: it is a "
        "ctxpar bug.",
        "If you wrote it, use a field name from ConfigFields() (the snake_case form of a flag "
        "listed by `ctxpar check --help`)."},
       "ctxpar check --model-arch MyModelForCausalLM --tp-size 2 --dcp-size 2  # its hook declares "
       "dcp_sise",
       "ctxpar check --model-arch MyModelForCausalLM --tp-size 2 --dcp-size 2  # its hook declares "
       "dcp_size",
       {"CTXPAR-CONFIG-002"}},
      {"CTXPAR-CONFIG-002",
       "A resolution step declared a value of the wrong type",
       "{source} declared {field}={value}, but {field} holds {type}.",
       kBug,
       "Fields have fixed types (integer, boolean, string; some may also be unset). A handler "
       "tried to store a value of another type, which would make every later reader misbehave, "
       "so the declaration is refused.",
       "A model hook or handler declares, say, a string for tp_size or None for a field that "
       "cannot be unset. Command-line flags cannot cause it.",
       {"If you did not write the named source, report it with the full command line: it is a "
        "ctxpar bug.",
        "If you wrote it, declare a value of the field's type (see FieldSpec::type)."},
       "ctxpar check --model-arch MyModelForCausalLM --tp-size 2  # its hook declares tp_size='2'",
       "ctxpar check --model-arch MyModelForCausalLM --tp-size 2  # its hook declares tp_size=2",
       {"CTXPAR-CONFIG-001"}},
      {"CTXPAR-CP-001",
       "Prefill context parallelism without a split strategy",
       "--cp-strategy must be set when --enable-prefill-cp is enabled.",
       kConfig,
       "Prefill context parallelism splits each prompt over the CP ranks, and there are two ways "
       "to do it: interleave (token i goes to rank i % cp) and zigzag (rank r gets blocks r and "
       "2cp-1-r). ctxpar does not pick one for you.",
       "--enable-prefill-cp (or the legacy --enable-nsa-prefill-context-parallel) is given "
       "without --cp-strategy (or the legacy --nsa-prefill-cp-mode).",
       {"Add --cp-strategy interleave (required by DeepSeek-V4) or --cp-strategy zigzag "
        "(balanced causal work).",
        "Or drop --enable-prefill-cp."},
       "ctxpar check --tp-size 4 --enable-prefill-cp",
       "ctxpar check --tp-size 4 --enable-prefill-cp --cp-strategy interleave",
       {"CTXPAR-CP-002", "CTXPAR-DSV4-001"}},
      {"CTXPAR-CP-002",
       "The attention CP size does not divide the TP size",
       "tp_size must be divisible by attn_cp_size",
       kConfig,
       "Attention context parallelism splits the tensor-parallel ranks into attn_cp_size groups "
       "of equal size, which needs tp_size to be a multiple of attn_cp_size.",
       "--attn-cp-size is given with a value that does not divide --tp-size.",
       {"Choose --attn-cp-size among the divisors of --tp-size.",
        "Or change --tp-size to a multiple of --attn-cp-size."},
       "ctxpar check --tp-size 6 --attn-cp-size 4",
       "ctxpar check --tp-size 8 --attn-cp-size 4",
       {"CTXPAR-LAYOUT-002", "CTXPAR-CP-001"}},
      {"CTXPAR-DCP-001",
       "The decode context parallel size is below 1",
       "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be >= 1, "
       "but got dcp_size={dcp_size}.",
       kConfig,
       "dcp_size is the number of ranks that share the KV cache of a sequence. 1 means no decode "
       "context parallelism; zero or a negative number has no meaning.",
       "--dcp-size (or --decode-context-parallel-size) is 0 or negative, often from a launch "
       "script that computed it from an empty variable.",
       {"Use --dcp-size 1 to turn DCP off, or a divisor of --tp-size greater than 1 to turn it "
        "on.",
        "Or leave the flag out: the default is 1."},
       "ctxpar check --tp-size 4 --dcp-size 0",
       "ctxpar check --tp-size 4 --dcp-size 4",
       {"CTXPAR-DCP-002", "CTXPAR-LAYOUT-001"}},
      {"CTXPAR-DCP-002",
       "An all-to-all DCP backend without DCP",
       "--dcp-comm-backend {backend} only affects the decode context-parallel attention "
       "reduction and therefore requires --dcp-size / --decode-context-parallel-size > 1, but "
       "got dcp_size={dcp_size}.",
       kConfig,
       "--dcp-comm-backend chooses how DCP ranks merge their partial attention results. With "
       "dcp_size 1 there is nothing to merge, so asking for an all-to-all backend (a2a, fi_a2a, "
       "shm_a2a) is a sign that the DCP size was forgotten.",
       "--dcp-comm-backend a2a, fi_a2a or shm_a2a with --dcp-size 1 or without --dcp-size.",
       {"Add --dcp-size N with N > 1 dividing --tp-size.",
        "Or drop --dcp-comm-backend (the default ag_rs is accepted without DCP)."},
       "ctxpar check --tp-size 4 --dcp-comm-backend a2a",
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend a2a",
       {"CTXPAR-DCP-001", "CTXPAR-DCP-004"}},
      {"CTXPAR-DCP-003",
       "fi_a2a on a platform that is not CUDA",
       "--dcp-comm-backend fi_a2a delegates the exchange to FlashInfer's MNNVL All-to-All kernel, "
       "which requires an NVIDIA CUDA platform with SM90+ and MNNVL fabric memory (e.g. GB200 "
       "NVL72). The authoritative fabric probe runs at model-runner init; use 'a2a' or 'ag_rs' "
       "on clusters without MNNVL.",
       kConfig,
       "fi_a2a hands the DCP exchange to FlashInfer's MNNVL all-to-all kernel, which exists only "
       "on NVIDIA SM90+ GPUs with MNNVL fabric memory (GB200 NVL72 class). On a CPU or ROCm "
       "platform it cannot run at all, so the configuration is refused up front.",
       "--dcp-comm-backend fi_a2a (with --dcp-size > 1) where the platform is not CUDA: a CPU "
       "machine, a ROCm machine, --platform cpu or rocm, or CTXPAR_PLATFORM set to one of them. "
       "Typical when a GB200 launch script is reused on another cluster or in CI.",
       {"Use --dcp-comm-backend a2a (one all-to-all per layer, portable) or ag_rs (the default).",
        "Use --dcp-comm-backend shm_a2a when every rank of a DCP group is on one node.",
        "Keep fi_a2a only for SM90+ machines with MNNVL fabric; `ctxpar check` prints what the "
        "probe found."},
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend fi_a2a --platform cpu",
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend a2a --platform cpu",
       {"CTXPAR-DCP-006", "CTXPAR-DCP-002", "CTXPAR-DCP-005"}},
      {"CTXPAR-DCP-004",
       "Replicated Q projection without DCP",
       "--dcp-replicate-q-proj requires --dcp-size > 1.",
       kConfig,
       "--dcp-replicate-q-proj makes every rank of a DCP group hold the Q projection of the "
       "whole group so that the Q all-gather disappears. Without DCP there is no group and no "
       "all-gather to remove.",
       "--dcp-replicate-q-proj with --dcp-size 1 or without --dcp-size.",
       {"Add --dcp-size N (N > 1) and an all-to-all backend (--dcp-comm-backend a2a).",
        "Or drop --dcp-replicate-q-proj."},
       "ctxpar check --tp-size 4 --dcp-replicate-q-proj",
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend a2a --dcp-replicate-q-proj",
       {"CTXPAR-DCP-005", "CTXPAR-DCP-002"}},
      {"CTXPAR-DCP-005",
       "Replicated Q projection with a backend that is not all-to-all",
       "--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication backend (it "
       "removes the head-dim Q all-gather); got --dcp-comm-backend={backend}.",
       kConfig,
       "Replicating the Q projection removes the head-dim Q all-gather, which only the "
       "all-to-all backends (a2a, fi_a2a and ctxpar's shm_a2a) perform; ag_rs gathers "
       "differently and gains nothing from it.",
       "--dcp-replicate-q-proj together with --dcp-comm-backend ag_rs (or no backend, since "
       "ag_rs is the default).",
       {"Use --dcp-comm-backend a2a (portable), shm_a2a (one node) or fi_a2a (SM90+ with MNNVL).",
        "Or drop --dcp-replicate-q-proj to keep ag_rs."},
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend ag_rs --dcp-replicate-q-proj",
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend a2a --dcp-replicate-q-proj",
       {"CTXPAR-DCP-004", "CTXPAR-DCP-003"}},
      {"CTXPAR-DCP-006",
       "fi_a2a on a machine without MNNVL fabric",
       "--dcp-comm-backend fi_a2a needs MNNVL fabric memory on an SM90+ GPU, but the runtime "
       "probe found {found}; use --dcp-comm-backend a2a (or ag_rs, or shm_a2a within one node) "
       "on machines without MNNVL fabric.",
       kRuntime,
       "The authoritative check for fi_a2a: at init the probe asks the CUDA driver for the "
       "compute capability and for fabric handle support "
       "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, then a trial allocation exported as a "
       "fabric handle, which fails where the node has no IMEX channel). Without both, the "
       "one-sided fabric exchange cannot be set up.",
       "At generate/serve init with --dcp-comm-backend fi_a2a on a GPU older than SM90 or "
       "without MNNVL fabric (an H100/H200 box outside an NVL72 rack), or in `ctxpar check` "
       "with --platform cuda:smXY without +mnnvl.",
       {"Use --dcp-comm-backend a2a, or ag_rs.",
        "Within one node, --dcp-comm-backend shm_a2a gives a one-sided exchange without fabric.",
        "Check what the probe sees with `ctxpar check` (the platform line)."},
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend fi_a2a --platform cuda:sm90",
       "ctxpar check --tp-size 4 --dcp-size 4 --dcp-comm-backend a2a --platform cuda:sm90",
       {"CTXPAR-DCP-003", "CTXPAR-DCP-007"}},
      {"CTXPAR-DCP-007",
       "shm_a2a across nodes",
       "--dcp-comm-backend shm_a2a exchanges partial attention states through MPI-3 "
       "shared-memory windows and needs every rank of a DCP group on one node, but rank {rank} "
       "is on {host} and rank {peer} is on {peer_host}; use --dcp-comm-backend a2a or ag_rs "
       "across nodes.",
       kRuntime,
       "shm_a2a is ctxpar's one-sided exchange: ranks write their partial outputs into an MPI-3 "
       "shared-memory window and read their peers' from it. Shared memory exists only within a "
       "node, so a DCP group that spans nodes cannot use it.",
       "At generate/serve init with --dcp-comm-backend shm_a2a when the MPI ranks of one DCP "
       "group (dcp_size consecutive ranks) are placed on different hosts.",
       {"Use --dcp-comm-backend a2a or ag_rs across nodes.",
        "Or place each DCP group on one node (e.g. mpiexec --map-by node with dcp_size ranks "
        "per node)."},
       "mpiexec -n 4 --host a:2,b:2 ctxpar generate --tp-size 4 --dcp-size 4 --dcp-comm-backend "
       "shm_a2a 'Hello'",
       "mpiexec -n 4 --host a:2,b:2 ctxpar generate --tp-size 4 --dcp-size 4 --dcp-comm-backend "
       "a2a 'Hello'",
       {"CTXPAR-DCP-006", "CTXPAR-DCP-002"}},
      {"CTXPAR-DCP-008",
       "Attention logit softcapping on the CUDA attention kernels",
       "The CUDA attention kernels do not apply attention logit softcapping (softcap = "
       "{softcap}); the CPU kernels do.",
       kConfig,
       "Gemma 2 caps every attention score as softcap * tanh(score / softcap) before the "
       "softmax. The CPU partial-attention kernels apply it on every path; the CUDA kernels "
       "(sm_90a, GQA and MLA) compute plain scores, so a layer with a softcap is refused there "
       "rather than run with uncapped scores, which would change every output.",
       "A program calling PlanPartialAttentionCuda or PartialAttentionCuda (cuda_attention.h: "
       "the GPU benchmark, a port of a model's attention to the GPU) with "
       "PartialAttentionParams.softcap > 0. ctxpar generate and serve run every model's "
       "attention, gemma2's included, on the CPU kernels, which apply the softcap.",
       {"Run the attention on the CPU kernels (PartialAttentionCpu, DcpAttention).",
        "Pass softcap = 0 only for models without attention softcapping (llama, gemma3, qwen2, "
        "qwen3, phi3)."},
       "ctxpar generate --model-path gemma-2-2b-it-q8_0.gguf 'Hello'  # attention ported to "
       "PartialAttentionCuda",
       "ctxpar generate --model-path gemma-2-2b-it-q8_0.gguf 'Hello'  # attention on the CPU "
       "kernels",
       {"CTXPAR-DCP-003", "CTXPAR-MODEL-010"}},
      {"CTXPAR-DCP-009",
       "Deterministic inference with DCP blocks smaller than its chunks",
       "--enable-deterministic-inference with --dcp-size > 1 needs "
       "--dcp-kv-cache-interleave-size to be a multiple of {chunk}, got {interleave_size}: each "
       "chunk of {chunk} keys must lie on one DCP rank.",
       kConfig,
       "Deterministic inference merges the attention of fixed chunks of {chunk} consecutive "
       "positions exactly (fixed-point sums, docs/dcp.md), so that the result is the same bits "
       "for every DCP size, combine backend and replicated Q. A chunk is the same keys on every "
       "layout only when the DCP interleave blocks are whole chunks; with smaller blocks a chunk "
       "spans ranks and its partial would depend on the layout.",
       "An explicit --dcp-kv-cache-interleave-size that is not a multiple of 64 with "
       "--enable-deterministic-inference and --dcp-size above 1 (left at its default of 1, it "
       "becomes 64, and an unset --page-size follows).",
       {"Leave --dcp-kv-cache-interleave-size at its default, or set a multiple of 64 that "
        "divides --page-size.",
        "Or leave --enable-deterministic-inference off: the tokens then stay the same across "
        "layouts in float32, without the bitwise promise."},
       "ctxpar check --tp-size 3 --dcp-size 3 --enable-deterministic-inference "
       "--dcp-kv-cache-interleave-size 16",
       "ctxpar check --tp-size 3 --dcp-size 3 --enable-deterministic-inference",
       {"CTXPAR-KV-001", "CTXPAR-DCP-001"}},
      {"CTXPAR-DSV4-001",
       "DeepSeek-V4 prefill CP with a strategy other than interleave",
       "DeepSeekV4 only supports interleave CP strategy, got {strategy}",
       kConfig,
       "DeepSeek-V4's prefill context parallelism is implemented for the round-robin "
       "(interleave) split only; zigzag is not supported for this model.",
       "--model-arch DeepseekV4ForCausalLM (or a DeepSeek-V4 model) with --enable-prefill-cp and "
       "--cp-strategy zigzag (or the legacy --nsa-prefill-cp-mode in-seq-split).",
       {"Use --cp-strategy interleave.", "Or drop --enable-prefill-cp for this model."},
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 8 --enable-prefill-cp "
       "--cp-strategy zigzag",
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 8 --enable-prefill-cp "
       "--cp-strategy interleave",
       {"CTXPAR-CP-001", "CTXPAR-DSV4-004"}},
      {"CTXPAR-DSV4-002",
       "DeepSeek-V4 prefill CP with data parallelism",
       "For round-robin split mode, dp attention is not supported.",
       kConfig,
       "With prefill CP, DeepSeek-V4 turns DP attention on itself and uses all TP ranks as "
       "attention CP ranks (attn_cp_size = tp_size // dp_size); a dp_size other than 1 would "
       "split the same ranks twice.",
       "--model-arch DeepseekV4ForCausalLM with --enable-prefill-cp and --dp-size greater than "
       "1.",
       {"Use --dp-size 1 with prefill CP.",
        "Or drop --enable-prefill-cp to keep data parallelism."},
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 8 --dp-size 2 "
       "--enable-prefill-cp --cp-strategy interleave",
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 8 --enable-prefill-cp "
       "--cp-strategy interleave",
       {"CTXPAR-DSV4-003", "CTXPAR-DSV4-001"}},
      {"CTXPAR-DSV4-003",
       "DeepSeek-V4 prefill CP across machines",
       "Context parallel only supports single machine (tp_size <= 8). Cross-machine CP has "
       "precision issues.",
       kConfig,
       "DeepSeek-V4's prefill CP is validated on one machine of up to 8 GPUs; across machines "
       "its collectives show precision problems, so larger TP sizes are refused.",
       "--model-arch DeepseekV4ForCausalLM with --enable-prefill-cp and --tp-size above 8.",
       {"Use --tp-size 8 or less with prefill CP.",
        "Or drop --enable-prefill-cp for multi-machine runs."},
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 16 --enable-prefill-cp "
       "--cp-strategy interleave",
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 8 --enable-prefill-cp "
       "--cp-strategy interleave",
       {"CTXPAR-DSV4-002"}},
      {"CTXPAR-DSV4-004",
       "DeepSeek-V4 prefill CP with an unsupported MoE all-to-all backend",
       "DeepSeekV4 CP supports moe_a2a_backend in {supported_a2a_backends}, got "
       "{moe_a2a_backend}.",
       kConfig,
       "Under prefill CP, DeepSeek-V4's MoE layers behave correctly only with the all-to-all "
       "backends none, deepep, megamoe and mori; the others lack the collective or precision "
       "behaviour CP needs for this model.",
       "--model-arch DeepseekV4ForCausalLM with --enable-prefill-cp and --moe-a2a-backend "
       "mooncake, nixl, ascend_fuseep or flashinfer.",
       {"Set --moe-a2a-backend to none, deepep, megamoe or mori.",
        "Or leave --moe-a2a-backend out (the default is none).",
        "If you need that backend, drop --enable-prefill-cp."},
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 8 --enable-prefill-cp "
       "--cp-strategy interleave --moe-a2a-backend flashinfer",
       "ctxpar check --model-arch DeepseekV4ForCausalLM --tp-size 8 --enable-prefill-cp "
       "--cp-strategy interleave --moe-a2a-backend deepep",
       {"CTXPAR-DSV4-001", "CTXPAR-MOE-001"}},
      {"CTXPAR-FLAG-001",
       "A flag got a value that is not one of its choices",
       "Invalid value {value} for {flag}; valid values: {valid}.",
       kConfig,
       "The flag takes one of a fixed set of values (SGLang's choices) and the given value is "
       "not among them. Values are case-sensitive.",
       "A typo, a value from another tool (e.g. --dcp-comm-backend nccl) or a choice that "
       "SGLang spells differently.",
       {"Use one of the values the message lists.",
        "`ctxpar check --help` lists every flag with its choices."},
       "ctxpar check --tp-size 2 --dcp-size 2 --dcp-comm-backend nccl",
       "ctxpar check --tp-size 2 --dcp-size 2 --dcp-comm-backend a2a",
       {"CTXPAR-FLAG-002", "CTXPAR-FLAG-004"}},
      {"CTXPAR-FLAG-002",
       "A numeric flag got text that is not an integer",
       "Invalid value {value} for {flag}: not an integer; valid values: {valid}.",
       kConfig,
       "The flag takes a whole number written in decimal digits (an optional sign and blanks "
       "around it are accepted, as Python's int() does).",
       "A word, a fraction, an empty string or a unit suffix given to a size flag, e.g. "
       "--tp-size four or --page-size 1.5.",
       {"Give the number in digits, e.g. --tp-size 4."},
       "ctxpar check --tp-size four",
       "ctxpar check --tp-size 4",
       {"CTXPAR-FLAG-003"}},
      {"CTXPAR-FLAG-003",
       "A numeric flag got a number out of its range",
       "Invalid value {value} for {flag}: out of range; valid values: {valid}.",
       kConfig,
       "Sizes such as --tp-size, --page-size or --attn-cp-size count ranks or tokens and must be "
       "at least 1; every integer flag must also fit in 32 bits.",
       "Zero or a negative number for a size, or an absurdly large number.",
       {"Give a value within the range the message states."},
       "ctxpar check --page-size -16",
       "ctxpar check --page-size 16",
       {"CTXPAR-FLAG-002", "CTXPAR-DCP-001"}},
      {"CTXPAR-FLAG-004",
       "An argument that ctxpar does not know",
       "Unknown argument {argument} for ctxpar {command}; run: ctxpar {command} --help to list "
       "the accepted flags.",
       kConfig,
       "The command line holds a flag that the command does not define, or a stray word. ctxpar "
       "speaks SGLang's spellings of the launch flags it supports; other SGLang flags are not "
       "accepted silently.",
       "A misspelled flag (--dcp 4), a flag of sglang.launch_server that ctxpar does not "
       "implement, or an argument left over from a shell line break.",
       {"Fix the spelling; `ctxpar check --help` lists the flags.",
        "Remove flags that ctxpar does not implement."},
       "ctxpar check --tp-size 4 --dcp 4",
       "ctxpar check --tp-size 4 --dcp-size 4",
       {"CTXPAR-FLAG-005", "CTXPAR-FLAG-001"}},
      {"CTXPAR-FLAG-005",
       "The command line cannot be parsed",
       "Cannot parse the command line of ctxpar {command}: {detail}",
       kConfig,
       "The arguments do not fit the command's grammar: a flag that needs a value has none, a "
       "switch got a value, or a flag was given too often.",
       "A flag at the end of the line without its value (--tp-size), or --flag=value for a "
       "switch that takes no value.",
       {"Give every valued flag its value: --tp-size 4.",
        "`ctxpar check --help` shows which flags take values."},
       "ctxpar check --tp-size",
       "ctxpar check --tp-size 4",
       {"CTXPAR-FLAG-004"}},
      {"CTXPAR-FLAG-006",
       "An invalid platform name",
       "Invalid platform {value} from {origin}; valid values: cpu, rocm, cuda:smXY, "
       "cuda:smXY+mnnvl (e.g. cuda:sm90, cuda:sm100+mnnvl).",
       kConfig,
       "--platform (or the environment variable CTXPAR_PLATFORM) replaces the hardware probe "
       "for tests and dry runs; it must name a platform in ctxpar's spelling: the compute "
       "capability as smXY and +mnnvl when the GPUs have MNNVL fabric memory.",
       "A GPU model name (h100), a missing sm prefix (cuda:90) or a stray CTXPAR_PLATFORM in "
       "the environment.",
       {"Use cpu, rocm, cuda:sm90, cuda:sm100+mnnvl and so on.",
        "Unset CTXPAR_PLATFORM to let the probe decide."},
       "ctxpar check --platform h100",
       "ctxpar check --platform cuda:sm90",
       {"CTXPAR-DCP-003", "CTXPAR-MOE-001"}},
      {"CTXPAR-LAYOUT-001",
       "The DCP size does not divide the TP size",
       "tp_size ({tp_size}) must be divisible by dcp_size ({dcp_size}).",
       kConfig,
       "DCP groups are contiguous blocks of dcp_size ranks inside the tensor-parallel group, so "
       "tp_size must be a multiple of dcp_size.",
       "--dcp-size that does not divide --tp-size, e.g. --tp-size 6 --dcp-size 4.",
       {"Choose --dcp-size among the divisors of --tp-size.",
        "Or change --tp-size to a multiple of --dcp-size."},
       "ctxpar check --tp-size 6 --dcp-size 4",
       "ctxpar check --tp-size 8 --dcp-size 4",
       {"CTXPAR-LAYOUT-002", "CTXPAR-LAYOUT-003"}},
      {"CTXPAR-LAYOUT-002",
       "The attention TP size is not a multiple of the DCP size",
       "attention tp size ({attn_tp_size} = tp_size // attn_dp_size // attn_cp_size) must be a "
       "multiple of dcp_size ({dcp_size}).",
       kConfig,
       "DCP groups live inside the attention tensor-parallel group, which is what remains of TP "
       "after attention data parallelism (--dp-size with --enable-dp-attention) and attention "
       "CP (--attn-cp-size) have taken their share.",
       "--dcp-size combined with --attn-cp-size or with DP attention so that fewer attention TP "
       "ranks remain than a DCP group needs.",
       {"Lower --dcp-size to a divisor of the attention TP size.",
        "Or lower --attn-cp-size / --dp-size, or raise --tp-size."},
       "ctxpar check --tp-size 8 --attn-cp-size 4 --dcp-size 4",
       "ctxpar check --tp-size 8 --attn-cp-size 2 --dcp-size 4",
       {"CTXPAR-LAYOUT-001", "CTXPAR-CP-002"}},
      {"CTXPAR-LAYOUT-003",
       "The DCP size does not divide the model's query heads",
       "num_heads ({num_heads}) must be divisible by dcp_size ({dcp_size})",
       kConfig,
       "The DCP combine hands each rank of a group the final output of an equal share of the "
       "query heads, so the model's head count must be a multiple of dcp_size.",
       "When the model is known (loaded by generate or serve) and its num_attention_heads is not "
       "a multiple of --dcp-size; SmolLM2-135M has 9 heads, so DCP sizes 1, 3 and 9 work.",
       {"Choose --dcp-size among the divisors of the head count (and of --tp-size)."},
       "ctxpar generate --model-path SmolLM2-135M-Instruct-Q4_1.gguf --tp-size 2 --dcp-size 2 "
       "'Hello'",
       "ctxpar generate --model-path SmolLM2-135M-Instruct-Q4_1.gguf --tp-size 3 --dcp-size 3 "
       "'Hello'",
       {"CTXPAR-LAYOUT-001"}},
      {"CTXPAR-MOE-001",
       "A MoE all-to-all backend that cannot run on this platform",
       "--moe-a2a-backend {backend} needs {requirement}, but the platform is {platform}; use "
       "--moe-a2a-backend {alternatives} instead.",
       kRuntime,
       "Each MoE all-to-all backend is tied to hardware: deepep to NVIDIA CUDA or ctxpar's CPU "
       "engine (which runs DeepEP's dispatch and combine as all-to-all-v over MPI), mooncake "
       "and nixl to NVIDIA CUDA, megamoe to CUDA SM90+, flashinfer to CUDA SM90+ with MNNVL "
       "fabric, mori to AMD ROCm, ascend_fuseep to Ascend NPUs. `none` (experts reached through "
       "all-reduce and all-gather) runs everywhere.",
       "At generate/serve init on a machine that lacks what the backend needs, or in `ctxpar "
       "check` when --platform / CTXPAR_PLATFORM names such a platform. `ctxpar check` on a "
       "probed platform does not apply it, so a launch line can be checked on a laptop.",
       {"Use a backend the message lists for this platform.",
        "Or run on the hardware the backend needs."},
       "ctxpar check --moe-a2a-backend mori --platform cuda:sm90",
       "ctxpar check --moe-a2a-backend deepep --platform cuda:sm90",
       {"CTXPAR-DSV4-004", "CTXPAR-FLAG-006"}},
      {"CTXPAR-SAMPLING-001",
       "A sampling parameter outside its valid range",
       "{field} must be {rule}, got {value}.",
       kConfig,
       "Each sampling parameter of a request means something only within a range: temperature "
       "divides the logits (0 is greedy), top_p and min_p are probabilities, top_k counts "
       "tokens (-1 or 0 keeps them all), repetition_penalty divides or multiplies logits, "
       "frequency_penalty and presence_penalty are OpenAI's [-2, 2], max_new_tokens and "
       "top_logprobs_num count tokens. The ranges are SGLang's. A value outside its range, or "
       "NaN, is refused before the request is queued; the message names the field as the "
       "request spells it.",
       "When a request reaches the engine with such a value: the sampling flags of `ctxpar "
       "generate`, or the JSON body of /generate, /v1/completions or /v1/chat/completions on "
       "`ctxpar serve` (for example temperature -1, top_p 0 or 1.5, top_k -2, min_p 2, "
       "repetition_penalty 0 or 3, frequency_penalty 2.5).",
       {"Use a value inside the range the message gives.",
        "To turn a filter or penalty off, use its neutral value: top_p 1, top_k -1, min_p 0, "
        "repetition_penalty 1, frequency_penalty and presence_penalty 0.",
        "For deterministic output use temperature 0 (greedy), not a negative temperature."},
       "ctxpar generate --temperature 0.7 --top-p 1.5 \"Hello\"",
       "ctxpar generate --temperature 0.7 --top-p 0.9 \"Hello\"",
       {"CTXPAR-SAMPLING-002"}},
      {"CTXPAR-SAMPLING-002",
       "A stop token id outside the vocabulary",
       "stop_token_ids must be token ids in [0, {max_id}], got {token_id}.",
       kConfig,
       "Generation ends when the model samples one of the request's stop_token_ids, so each must "
       "be a token of the model's vocabulary, [0, vocab_size). An id outside it can never be "
       "sampled; it is nearly always an id from another model's tokenizer, so the request is "
       "refused rather than left to run to max_new_tokens.",
       "A request's stop_token_ids holds a negative id or one at or past the model's vocabulary "
       "size (49152 for SmolLM2-135M, whose end of turn <|im_end|> is 2).",
       {"Take the ids from this model's tokenizer: POST /tokenize on `ctxpar serve` gives the ids "
        "of a text.",
        "To stop on a text rather than on a token, use stop (stop strings)."},
       "ctxpar serve --model-path SmolLM2-135M-Instruct.Q4_1.gguf  # a request with "
       "\"stop_token_ids\": [128009]",
       "ctxpar serve --model-path SmolLM2-135M-Instruct.Q4_1.gguf  # a request with "
       "\"stop_token_ids\": [2]",
       {"CTXPAR-SAMPLING-001"}},
  };
}

// Every entry, ordered by ID.
const std::vector<CatalogEntry>& Table() {
  static const std::vector<CatalogEntry> entries = [] {
    std::vector<CatalogEntry> all = ConfigEntries();
    for (auto area : {&core_internal::RuntimeCatalogEntries, &core_internal::EngineCatalogEntries,
                      &core_internal::HttpCatalogEntries, &core_internal::DeepseekCatalogEntries,
                      &core_internal::PlanCatalogEntries}) {
      std::vector<CatalogEntry> entries = area();
      all.insert(all.end(), entries.begin(), entries.end());
    }
    std::sort(all.begin(), all.end(),
              [](const CatalogEntry& a, const CatalogEntry& b) { return a.id < b.id; });
    return all;
  }();
  return entries;
}

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

// A template split at its placeholders `{name}` (name: [a-z_][a-z0-9_]*; any other brace is
// text): literals[0] {names[0]} literals[1] ... {names[k-1]} literals[k].
struct TemplatePieces {
  std::vector<std::string_view> literals;
  std::vector<std::string_view> names;
};

TemplatePieces SplitTemplate(std::string_view text) {
  TemplatePieces pieces;
  size_t literal_start = 0;
  size_t pos = 0;
  while ((pos = text.find('{', pos)) != std::string_view::npos) {
    size_t end = pos + 1;
    if (end < text.size() && IsNameStart(text[end])) {
      while (end < text.size() && IsNameChar(text[end])) ++end;
    }
    if (end == pos + 1 || end >= text.size() || text[end] != '}') {
      ++pos;
      continue;
    }
    pieces.literals.push_back(text.substr(literal_start, pos - literal_start));
    pieces.names.push_back(text.substr(pos + 1, end - pos - 1));
    literal_start = pos = end + 1;
  }
  pieces.literals.push_back(text.substr(literal_start));
  return pieces;
}

// A literal piece with its Knuth-Morris-Pratt failure table, so that finding it costs time linear
// in the text searched whatever the text holds (a backtracking regex took seconds for 16 KB).
class Literal {
 public:
  explicit Literal(std::string_view text) : text_(text), fail_(text.size() + 1, 0) {
    for (size_t i = 1, k = 0; i < text_.size(); ++i) {
      while (k > 0 && text_[i] != text_[k]) k = fail_[k];
      if (text_[i] == text_[k]) ++k;
      fail_[i + 1] = k;
    }
  }
  size_t size() const { return text_.size(); }
  std::string_view text() const { return text_; }

  // The first position >= from where the literal starts and ends by `end`, else npos.
  size_t Find(std::string_view hay, size_t from, size_t end) const {
    if (text_.empty()) return from <= end ? from : std::string_view::npos;
    for (size_t i = from, k = 0; i < end; ++i) {
      if (k == 0) {  // no partial match: jump to the next candidate first byte
        const void* next = std::memchr(hay.data() + i, text_[0], end - i);
        if (next == nullptr) return std::string_view::npos;
        i = static_cast<size_t>(static_cast<const char*>(next) - hay.data());
      }
      while (k > 0 && hay[i] != text_[k]) k = fail_[k];
      if (hay[i] == text_[k]) ++k;
      if (k == text_.size()) return i + 1 - k;
    }
    return std::string_view::npos;
  }

 private:
  std::string_view text_;
  std::vector<size_t> fail_;
};

struct CompiledTemplate {
  std::vector<Literal> literals;   // one more than names
  std::vector<std::string> names;  // one per placeholder, repeats included
  size_t literal_chars = 0;
};

const std::vector<CompiledTemplate>& Compiled() {
  static const std::vector<CompiledTemplate> compiled = [] {
    std::vector<CompiledTemplate> out;
    for (const CatalogEntry& e : Table()) {
      TemplatePieces pieces = SplitTemplate(e.message_template);
      CompiledTemplate t;
      for (std::string_view literal : pieces.literals) {
        t.literals.emplace_back(literal);
        t.literal_chars += literal.size();
      }
      for (std::string_view name : pieces.names) t.names.emplace_back(name);
      out.push_back(std::move(t));
    }
    return out;
  }();
  return compiled;
}

// The text each placeholder of `t` matched in `text`, as [begin, end) offsets, or nullopt. With
// `whole` the template must span the text; else it starts at the first occurrence of its leading
// literal. Every placeholder takes the shortest text that works: each literal piece is found at
// its first occurrence, which leaves the most room for the pieces after it, so no choice is ever
// revisited.
std::optional<std::vector<std::pair<size_t, size_t>>> MatchTemplate(const CompiledTemplate& t,
                                                                    std::string_view text,
                                                                    bool whole) {
  const Literal& first = t.literals.front();
  const Literal& last = t.literals.back();
  const size_t k = t.names.size();
  size_t pos = 0;
  size_t end = text.size();
  if (whole) {
    if (k == 0) {
      if (text != first.text()) return std::nullopt;
      return std::vector<std::pair<size_t, size_t>>{};
    }
    if (first.size() + last.size() > text.size() || !text.starts_with(first.text()) ||
        !text.ends_with(last.text())) {
      return std::nullopt;
    }
    pos = first.size();
    end = text.size() - last.size();
  } else {
    const size_t at = first.Find(text, 0, text.size());
    if (at == std::string_view::npos) return std::nullopt;
    pos = at + first.size();
  }
  std::vector<std::pair<size_t, size_t>> spans;
  // With `whole` the last literal is pinned to the end, so only the inner ones are searched.
  const size_t searched = whole ? k - 1 : k;
  for (size_t i = 1; i <= searched; ++i) {
    const size_t at = t.literals[i].Find(text, pos, end);
    if (at == std::string_view::npos) return std::nullopt;
    spans.emplace_back(pos, at);
    pos = at + t.literals[i].size();
  }
  if (whole) spans.emplace_back(pos, end);
  return spans;
}

// Pasted text is often re-wrapped by a terminal: compare with every run of blanks as one space.
std::string NormalizeSpace(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::span<const CatalogEntry> ErrorCatalog() { return Table(); }

const CatalogEntry* FindCatalogEntry(std::string_view id) {
  for (const CatalogEntry& e : Table()) {
    if (e.id.size() == id.size() &&
        std::equal(id.begin(), id.end(), e.id.begin(), [](char a, char b) {
          return std::toupper(static_cast<unsigned char>(a)) == b;
        })) {
      return &e;
    }
  }
  return nullptr;
}

std::vector<std::string> TemplatePlaceholders(std::string_view message_template) {
  std::vector<std::string> names;
  for (std::string_view name : SplitTemplate(message_template).names) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.emplace_back(name);
  }
  return names;
}

Status CatalogError(std::string_view id, std::span<const CatalogArg> args) {
  const CatalogEntry* entry = FindCatalogEntry(id);
  if (entry == nullptr) {
    return Internal("CatalogError: no catalog entry " + std::string(id));
  }
  std::vector<std::string> names = TemplatePlaceholders(entry->message_template);
  for (const CatalogArg& a : args) {
    if (std::find(names.begin(), names.end(), a.name) == names.end()) {
      return Internal("CatalogError: " + std::string(id) + " has no placeholder {" +
                      std::string(a.name) + "}");
    }
  }
  const TemplatePieces pieces = SplitTemplate(entry->message_template);
  std::string out(pieces.literals[0]);
  for (size_t i = 0; i < pieces.names.size(); ++i) {
    const std::string_view name = pieces.names[i];
    const CatalogArg* arg = nullptr;
    for (const CatalogArg& a : args) {
      if (a.name == name) arg = &a;
    }
    if (arg == nullptr) {
      return Internal("CatalogError: " + std::string(id) + " needs a value for {" +
                      std::string(name) + "}");
    }
    out += arg->value;
    out += pieces.literals[i + 1];
  }
  return Status(entry->code, std::move(out), std::string(entry->id));
}

std::optional<CatalogMatch> MatchCatalogMessage(std::string_view message) {
  if (message.size() > kMaxCatalogMessageBytes) return std::nullopt;
  const std::string text = NormalizeSpace(message);
  const auto& compiled = Compiled();
  std::optional<CatalogMatch> best;
  bool best_whole = false;
  size_t best_literal = 0;
  for (size_t i = 0; i < compiled.size(); ++i) {
    const CompiledTemplate& t = compiled[i];
    bool whole = true;
    auto spans = MatchTemplate(t, text, true);
    if (!spans) {
      whole = false;
      spans = MatchTemplate(t, text, false);
    }
    if (!spans) continue;
    if (best && (best_whole > whole || (best_whole == whole && best_literal >= t.literal_chars))) {
      continue;
    }
    CatalogMatch match{&Table()[i], {}};
    for (size_t g = 0; g < t.names.size(); ++g) {
      // A placeholder used several times ({command} in FLAG-009) is one value, its first.
      const bool seen = std::any_of(match.values.begin(), match.values.end(),
                                    [&](const auto& v) { return v.first == t.names[g]; });
      if (seen) continue;
      const auto [begin, end] = (*spans)[g];
      match.values.emplace_back(t.names[g], text.substr(begin, end - begin));
    }
    best = std::move(match);
    best_whole = whole;
    best_literal = t.literal_chars;
  }
  return best;
}

std::string PyRepr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

std::string PyTuple(std::span<const std::string_view> items) {
  std::string out = "(";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += PyRepr(items[i]);
  }
  if (items.size() == 1) out += ",";
  return out + ")";
}

}  // namespace ctxpar
