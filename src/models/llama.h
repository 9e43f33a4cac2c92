// The Llama family from GGUF (not public API: the engine reaches it through model.h's
// ModelSource, which OpenModelSource returns for a GGUF file).
//
// Layout over the tp ranks of the TP group, with DCP groups of dcp contiguous ranks inside it
// (H query heads, Hkv KV heads, h = H / tp heads per rank):
// - Query heads are split evenly (tp divides H). KV heads: with tp <= Hkv each rank holds
//   Hkv / tp of them; with tp a multiple of Hkv each KV head is replicated over tp / Hkv ranks
//   (SGLang and vLLM do the same), and DCP (dcp dividing tp / Hkv) shards the tokens of that one
//   head over the group instead of replicating them.
// - A rank attends for the widened head set of its DCP group (h * dcp heads) over its shard of
//   the KV pool; DcpAttention merges the partial states. With replicated Q the rank projects Q
//   for the whole group.
// - o_proj and ffn_down run as all-gather + output-row shards: the ranks all-gather the
//   attention output (their heads) and the SwiGLU activations (their gate / up rows, ffn_bounds:
//   whole 32-blocks, floor(r * B / tp)), each computes its rows (dim_bounds) over all the input
//   columns, and the rows are all-gathered into the residual. Every output is then one dot
//   product over the whole row in the kernel's fixed order, so a (tp, dcp = 1) run equals the
//   tp = 1 run bit for bit, with either activation format. lm_head is vocab-sharded (uneven
//   shards padded) and all-gathered.
// - Numerics: Q4_1 / Q8_0 weights times fp32 activations (or int8 ones with
//   quantize_activations), RMSNorm and RoPE in ggml's normal mode as llama.cpp runs the llama
//   architecture, fp32 KV.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/gguf.h"
#include "ctxpar/model.h"
#include "ctxpar/status.h"

namespace ctxpar {

class ThreadPool;

struct LlamaHparams {
  std::string architecture;  // general.architecture ("llama")
  int vocab_size = 0;
  int dim = 0;  // embedding_length
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int rope_dims = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  int context_length = 0;
  bool tied_embeddings = false;  // no output.weight: lm_head is token_embd
};

// Reads `<arch>.*` metadata, naming the key of anything missing or out of range.
Expected<LlamaHparams> ReadLlamaHparams(const GgufFile& file);

// Which heads, KV heads and rows one rank owns.
struct LlamaShard {
  int tp_rank = 0;
  int dcp_rank = 0;
  int group = 0;     // DCP group (tp_rank / dcp)
  int heads = 0;     // h: query heads of the rank (o_proj)
  int q_heads = 0;   // heads it projects Q for (h, or h * dcp with replicated Q)
  int q_first = 0;   // first of them
  int kv_heads = 0;  // KV heads of the DCP group (the rank's pool stores its shard of them)
  int kv_first = 0;
  std::vector<int> ffn_bounds;  // tp + 1 MLP features: rank r's gate / up rows, whole 32-blocks
  std::vector<int> dim_bounds;  // tp + 1 hidden features: rank r's o_proj / ffn_down rows
};
LlamaShard MakeLlamaShard(const LlamaHparams& hp, const EngineConfig& config, int tp_rank);

// KV heads one rank of a GQA model stores (those its DCP group's query heads read; with
// tp > Hkv they all read one).
int GqaKvHeadsPerRank(int num_heads, int num_kv_heads, int tp_size, int dcp_size);
// The GQA layout rules, whatever the kernels: heads and KV heads against tp
// (CTXPAR-MODEL-002/003), dcp against the KV-head replicas (CTXPAR-MODEL-004).
Status CheckGqaLayout(int num_heads, int num_kv_heads, int tp_size, int dcp_size);

// The model's rules for a configuration (ModelInfo::hook): heads and KV heads against tp
// (CTXPAR-MODEL-002/003), dcp against the KV-head replicas (CTXPAR-MODEL-004), flags a dense
// Llama cannot honour (CTXPAR-MODEL-005), shapes the block-sharded kernels cannot cut
// (CTXPAR-MODEL-006).
Status CheckLlamaLayout(const LlamaHparams& hp, int tp_size, int dcp_size);

// Collective over `world` (tp_size ranks). config.llama_cpp_numerics quantizes activations to
// int8 per 32-block before each matmul, as llama.cpp's CPU backend does; off, fp32 activations,
// whose rounding differences do not grow, keep greedy output identical across DCP sizes and
// backends.
Expected<std::unique_ptr<Model>> CreateLlamaModel(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  ThreadPool* pool);

}  // namespace ctxpar
