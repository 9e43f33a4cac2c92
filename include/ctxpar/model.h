// Model and ModelSource: the seam between the engine and every model architecture.
//
// A ModelSource is a checkpoint opened for reading (memory-mapped, nothing loaded yet): what the
// launch configuration needs to know (its architecture, its head counts, and its own rules as a
// hook of the resolution pipeline), its tokenizer when it has one, the KV each rank will store
// for a configuration, and the factory of the Model. OpenModelSource picks the source from the
// architecture registry (src/models/registry.h) by what the path holds: a GGUF file by its
// general.architecture (llama, gemma3), a directory by its HF config.json's architectures
// (DeepSeek-V3). `ctxpar check --model-path`, `generate` and `serve` all go through it, so they
// accept and refuse the same configurations.
//
// A Model holds one rank's share of the weights (tensor parallel over the TP group, with the DCP
// groups inside it) and runs one forward over a Batch (batch.h) against the KV pool (kv_pool.h).
// The engine knows nothing else of it: no architecture name is tested outside the model code.
//
// Thread safety: a ModelSource is immutable after opening (any thread); a Model belongs to the
// thread that drives its rank, and CreateModel and Forward are collective over the TP group.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/communicator.h"
#include "ctxpar/config.h"
#include "ctxpar/dtype.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/status.h"

namespace ctxpar {

class Tokenizer;
namespace compute {
class Compute;  // the compute seam (docs/compute.md)
}  // namespace compute

struct ModelDesc {
  std::string architecture;  // HF architecture string: "LlamaForCausalLM", "DeepseekV3ForCausalLM"
  int vocab_size = 0;
  int context_length = 0;              // positions the model can attend over
  std::vector<int32_t> eos_token_ids;  // generation ends on these unless ignore_eos
};

// The KV one rank stores per token and layer for a configuration (kv_pool.h's options).
//
// Layer groups: a model whose layers do not all keep every position declares its groups, each
// with its layers, its retention (window 0: every position; W: the token at position t sees
// t - W < p <= t) and whether DCP shards it; groups[0] must be a full-attention group (its
// tokens are max_total_num_tokens). The engine gives each group its own pages out of the same
// --kv-cache-mib, and BatchAttention (src/models) applies a layer's window from its group: the
// model only says which group each layer is in. Every group has the head shape above. A model
// that declares no group gets one full-attention group of every layer, sharded by DCP.
// Gemma 3 270M: groups = {{{5, 11, 17}, 0, true}, {{0, 1, 2, 3, 4, 6, ...}, 512, true}}.
struct KvSpec {
  int num_layers = 0;
  int num_kv_heads = 0;  // per rank, after TP and DCP
  int head_dim_k = 0;
  int head_dim_v = 0;
  bool v_in_k = false;
  DataType dtype = DataType::kF32;
  std::vector<KvGroupSpec> groups = {};  // empty: one full-attention group of every layer
};

// The dimensions that size a model's weights, KV and compute: what `ctxpar plan` reads of a
// checkpoint, stated by the model source that knows its architecture.
struct ModelShape {
  int num_layers = 0;
  int hidden = 0;
  int vocab = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // GQA; MLA stores one latent head
  int head_dim = 0;      // GQA: Q, K and V head width; MLA: v_head_dim
  bool mla = false;
  int q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0;
  int dense_layers = 0;  // layers with a dense MLP of width ffn; the others route to experts
  int ffn = 0;
  int experts = 0, experts_per_token = 0, shared_experts = 0, expert_ffn = 0;
  int sliding_window = 0;  // window layers attend over the last W positions ...
  int global_every = 0;    // ... and every global_every-th layer over all of them
  bool tied_embeddings = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelDesc& desc() const = 0;
  // Collective over the TP group: every rank calls it with the same batch, after the engine made
  // every sequence's slot hold positions [0, pos0 + num_tokens) (KvPool::Reserve; in a window
  // group of W, those from pos0 - W + 1 on: KvPool::Slide). Appends the
  // new tokens' K/V to `kv` and writes `logits` [batch.TotalLogitRows(), vocab_size] (fp32,
  // resized; the same on every rank). Token ids outside [0, vocab_size) are InvalidArgument.
  // Logits that are not finite are an error naming the layer where it can.
  virtual Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) = 0;
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  virtual const std::string& path() const = 0;
  // For the resolution pipeline: architecture, head counts and the model's hook (config.h).
  virtual const ModelInfo& info() const = 0;
  virtual const ModelDesc& desc() const = 0;
  virtual const ModelShape& shape() const = 0;
  // Null when the checkpoint has no tokenizer: such a model takes and returns token ids only.
  virtual const Tokenizer* tokenizer() const = 0;
  // What each rank stores per token for `config` (a configuration the hook accepted).
  virtual KvSpec KvSpecFor(const EngineConfig& config) const = 0;
  // Collective over `world` (tp_size ranks; rank = TP rank): loads this rank's weights. The
  // model's layers run on `compute` (not owned, outlives the model; one per rank thread).
  virtual Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config,
                                                       Communicator& world,
                                                       compute::Compute& compute) const = 0;
};

// Opens a GGUF file or a HF checkpoint directory; errors name the path and what is wrong (an
// architecture outside the registry: CTXPAR-MODEL-010 for GGUF, CTXPAR-HF-002 for HF).
Expected<std::unique_ptr<ModelSource>> OpenModelSource(const std::string& path);

}  // namespace ctxpar
