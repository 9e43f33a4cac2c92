// The catalog entries of the DeepSeek-V3 architecture: its safetensors files (CTXPAR-ST-*), its
// config.json reader (CTXPAR-HF-*) and its layout rules (CTXPAR-DSV3-*) (error_catalog.h).
#include "core/error_catalog_internal.h"

namespace ctxpar::core_internal {

namespace {
constexpr StatusCode kConfig = StatusCode::kInvalidArgument;
constexpr StatusCode kCorrupt = StatusCode::kDataLoss;
constexpr StatusCode kUnsupported = StatusCode::kUnimplemented;
}  // namespace

std::vector<CatalogEntry> DeepseekCatalogEntries() {
  return {
      {"CTXPAR-DSV3-001",
       "The expert-parallel size does not divide the routed experts",
       "n_routed_experts ({experts}) must be divisible by ep_size ({ep_size})",
       kConfig,
       "Expert parallelism gives each of the ep_size expert groups the same number of routed "
       "experts (EP rank e holds experts [e*E/ep, (e+1)*E/ep)), so n_routed_experts must be a "
       "multiple of ep_size.",
       "When a DeepSeek-V3-architecture checkpoint is opened with an --ep-size (or, with "
       "--moe-a2a-backend deepep, a --tp-size, which sets the EP size) that does not divide its "
       "n_routed_experts.",
       {"Choose --ep-size among the divisors of n_routed_experts (config.json).",
        "With --moe-a2a-backend deepep the EP size is the TP size: choose --tp-size so."},
       "ctxpar generate --model-path moe_6_experts --tp-size 4 --ep-size 4 --input-ids 1,2  "
       "# n_routed_experts: 6",
       "ctxpar generate --model-path moe_6_experts --tp-size 4 --ep-size 2 --input-ids 1,2  "
       "# n_routed_experts: 6",
       {"CTXPAR-DSV3-002", "CTXPAR-MODEL-005"}},
      {"CTXPAR-DSV3-002",
       "The expert-parallel size does not divide the tensor-parallel size",
       "tp_size ({tp_size}) must be divisible by ep_size ({ep_size})",
       kConfig,
       "As in SGLang, the EP groups are carved out of the TP group: the tp_size ranks form "
       "ep_size groups of tp_size / ep_size ranks, and each group splits its experts' "
       "intermediate dimension over its ranks. That needs ep_size to divide tp_size.",
       "--ep-size is larger than --tp-size or not one of its divisors.",
       {"Choose --ep-size among the divisors of --tp-size.",
        "Or raise --tp-size to a multiple of --ep-size."},
       "ctxpar generate --model-path deepseek_v3_tiny --tp-size 2 --ep-size 4 --input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --tp-size 4 --ep-size 4 --input-ids 1,2",
       {"CTXPAR-DSV3-001", "CTXPAR-MODEL-006"}},
      {"CTXPAR-DSV3-003",
       "An unsupported dense-MLP TP size",
       "moe_dense_tp_size only support 1 and None currently",
       kConfig,
       "--moe-dense-tp-size sets the TP size of the dense MLP layers of a MoE model (DeepSeek's "
       "first_k_dense_replace layers). As in SGLang, only 1 (each rank runs the whole dense MLP, "
       "no all-reduce) and unset (the dense MLPs are sharded over the TP group) are supported.",
       "--moe-dense-tp-size is given a value other than 1.",
       {"Use --moe-dense-tp-size 1, or leave it out."},
       "ctxpar generate --model-path deepseek_v3_tiny --tp-size 4 --moe-dense-tp-size 2 "
       "--input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --tp-size 4 --moe-dense-tp-size 1 "
       "--input-ids 1,2",
       {"CTXPAR-MODEL-006", "CTXPAR-DSV4-001"}},
      {"CTXPAR-DSV3-004",
       "An attention CP size without prefill context parallelism",
       "--attn-cp-size {attn_cp_size} splits prefill attention over ranks and needs "
       "--enable-prefill-cp",
       kConfig,
       "attn_cp_size is the number of prefill context-parallel ranks: each takes a share of "
       "the prompt's tokens for attention. Without --enable-prefill-cp nothing is split, and "
       "ctxpar refuses a flag it would otherwise ignore.",
       "--attn-cp-size greater than 1 without --enable-prefill-cp (DeepSeek-V4's rule sets "
       "attn_cp_size itself only when prefill CP is on).",
       {"Add --enable-prefill-cp --cp-strategy interleave (or zigzag).", "Or drop --attn-cp-size."},
       "ctxpar generate --model-path deepseek_v3_tiny --tp-size 4 --attn-cp-size 2 "
       "--input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --tp-size 4 --attn-cp-size 2 "
       "--enable-prefill-cp --cp-strategy zigzag --input-ids 1,2",
       {"CTXPAR-CP-001", "CTXPAR-CP-002"}},
      {"CTXPAR-HF-001",
       "config.json cannot be read",
       "{path} is not a config.json ctxpar can read: {problem}",
       kConfig,
       "A HF checkpoint directory is described by its config.json. ctxpar reads the keys the "
       "network depends on and needs each one present with the right JSON type; the message "
       "names the key.",
       "The file is not a JSON object, or a key such as hidden_size, kv_lora_rank or "
       "norm_topk_prob is missing or holds a string where a number belongs.",
       {"Regenerate config.json with transformers (model.config.save_pretrained(DIR)).",
        "Or fix the named key by hand, following the model card."},
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2  # no kv_lora_rank",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2  # kv_lora_rank: 64",
       {"CTXPAR-HF-002", "CTXPAR-HF-003", "CTXPAR-HF-004"}},
      {"CTXPAR-HF-002",
       "A HF checkpoint of an architecture ctxpar does not run",
       "{path}: architecture {architecture} is not one ctxpar runs from a HF checkpoint; it runs "
       "DeepseekV3ForCausalLM and DeepseekV4ForCausalLM",
       kConfig,
       "From a directory with config.json ctxpar runs the DeepSeek-V3 network (MLA attention and "
       "a routed MoE), under its V3 and V4 architecture names. Llama-family models are run from "
       "GGUF files.",
       "--model-path names a HF directory whose config.json lists another architecture "
       "(LlamaForCausalLM, Qwen2ForCausalLM, ...).",
       {"Convert a Llama-family model to GGUF and pass the .gguf file.",
        "Or use a DeepSeek-V3-architecture checkpoint."},
       "ctxpar generate --model-path Qwen2.5-0.5B --input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2",
       {"CTXPAR-HF-001"}},
      {"CTXPAR-HF-003",
       "A config.json value ctxpar does not support",
       "{path}: {key}={value} is not supported: {reason}",
       kConfig,
       "The value is valid for transformers but selects a variant of the network that ctxpar "
       "does not implement (YaRN RoPE, non-interleaved RoPE, a softmax router, quantized "
       "weights, MLA without the q LoRA, ...). ctxpar refuses it rather than compute something "
       "else.",
       "A DeepSeek-V2 or a quantized DeepSeek-V3 checkpoint, or a config edited by hand.",
       {"Use a checkpoint of the supported variant (bf16 weights, default RoPE, sigmoid router "
        "with noaux_tc).",
        "The reason in the message says what ctxpar runs instead."},
       "ctxpar generate --model-path DeepSeek-V3-fp8 --input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2",
       {"CTXPAR-HF-001", "CTXPAR-HF-004"}},
      {"CTXPAR-HF-004",
       "config.json values that contradict each other",
       "{path}: {key}={value} contradicts the configuration: {rule}",
       kConfig,
       "The named value breaks a rule of the architecture: n_group must divide the routed "
       "experts, top-k must be reachable in topk_group groups, the rope part must be even, "
       "head_dim must agree with the MLA widths, sizes must be at least 1.",
       "A config edited by hand or produced by a script with a slip.",
       {"Fix the named key so that the rule in the message holds.",
        "Regenerate config.json with transformers, which checks several of these rules."},
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2  # n_group: 3, 8 experts",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2  # n_group: 4, 8 experts",
       {"CTXPAR-HF-001", "CTXPAR-HF-003"}},
      {"CTXPAR-ST-001",
       "A safetensors file cannot be opened",
       "Cannot open the safetensors file {file}: {reason}.",
       kConfig,
       "ctxpar memory-maps each safetensors file of a HF checkpoint read-only: model.safetensors, "
       "or the files model.safetensors.index.json names. The operating system refused: the file "
       "does not exist, is not a regular file, is not readable by this user, or cannot be "
       "mapped.",
       "A checkpoint directory without its weights (a config.json alone, a download that "
       "fetched only the metadata), a shard the index names but that is missing, or a file "
       "without read permission. Under MPI every rank opens the files.",
       {"Download the checkpoint's weights into the directory (every shard the index names).",
        "Check the directory --model-path names; across nodes, the same path on every node."},
       "ctxpar generate --model-path config_only_dir --input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2",
       {"CTXPAR-ST-002", "CTXPAR-ST-004"}},
      {"CTXPAR-ST-002",
       "A safetensors file is malformed",
       "The safetensors file {file} is not a valid safetensors file: {detail}.",
       kCorrupt,
       "The file opened, but its header does not describe its bytes: the reader checks the "
       "header length, that the header is one JSON object without repeated keys, each entry's "
       "dtype, shape and data_offsets, that each byte range matches its shape, and that the "
       "tensors neither overlap nor leave gaps and cover the data section exactly. The detail "
       "names the tensor and the rule it breaks.",
       "A download that stopped part way, a file that is not safetensors, or one written by a "
       "broken tool or edited by hand.",
       {"Compare the file's size and checksum with the source's; download it again if they "
        "differ.",
        "Write it again with the safetensors library (save_file / save_pretrained)."},
       "ctxpar generate --model-path truncated_checkpoint --input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2",
       {"CTXPAR-ST-001", "CTXPAR-ST-003"}},
      {"CTXPAR-ST-003",
       "A safetensors dtype ctxpar does not read",
       "The safetensors file {file} holds a tensor ctxpar cannot read: {detail}.",
       kUnsupported,
       "ctxpar reads F32, BF16, F16 and F64 tensors and widens them to fp32. The file holds a "
       "valid safetensors dtype that it does not convert (integers, FP8, FP4, ...).",
       "A quantized checkpoint (FP8 DeepSeek-V3 weights with their scale tensors) or a file with "
       "integer buffers.",
       {"Use the bf16 (or fp16/fp32) release of the checkpoint, or convert the FP8 weights to "
        "bf16 with the model's own conversion script."},
       "ctxpar generate --model-path DeepSeek-V3-fp8 --input-ids 1,2",
       "ctxpar generate --model-path DeepSeek-V3-bf16 --input-ids 1,2",
       {"CTXPAR-ST-002", "CTXPAR-HF-003"}},
      {"CTXPAR-ST-004",
       "A sharded checkpoint whose index and files disagree",
       "The checkpoint {dir} is inconsistent: {detail}.",
       kCorrupt,
       "A sharded HF checkpoint lists in model.safetensors.index.json the file of every tensor. "
       "ctxpar opens every file the index names and holds the index to it: each tensor must be "
       "in the file the index names, no tensor may appear twice, and the index must be a JSON "
       "object with a weight_map of plain file names inside the directory.",
       "A shard replaced by one from another revision, an index edited by hand, or a download "
       "that mixed two revisions.",
       {"Download the checkpoint again at one revision.",
        "Regenerate the index with save_pretrained."},
       "ctxpar generate --model-path mixed_revisions --input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2",
       {"CTXPAR-ST-001", "CTXPAR-ST-005"}},
      {"CTXPAR-ST-005",
       "A checkpoint that does not hold the network its config.json describes",
       "The checkpoint {dir} does not match its config.json: {detail}.",
       kConfig,
       "ctxpar checks, when it opens a DeepSeek-V3 checkpoint, that every tensor the network "
       "reads exists with the shape config.json implies (hub naming: "
       "model.layers.N.self_attn.kv_b_proj.weight, model.layers.N.mlp.experts.E.gate_proj.weight, "
       "...). The detail names the tensor and the shape it has or lacks.",
       "A config.json from another model size than the weights, weights saved under another "
       "naming (a training framework's), or a checkpoint that lost a shard.",
       {"Use the config.json that came with the weights.",
        "Convert the weights to the HF hub naming with save_pretrained."},
       "ctxpar generate --model-path weights_with_wrong_config --input-ids 1,2",
       "ctxpar generate --model-path deepseek_v3_tiny --input-ids 1,2",
       {"CTXPAR-ST-004", "CTXPAR-HF-004"}},
  };
}

}  // namespace ctxpar::core_internal
