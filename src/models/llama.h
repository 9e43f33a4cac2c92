// The Llama family from GGUF (not public API: the engine reaches it through model.h's
// ModelSource, which OpenModelSource returns for a GGUF file).
//
// Layout: layers/attention_shard.h (heads, KV heads, MLP features over tp and dcp) and
// layers/tp_linear.h (column-parallel q/k/v and gate/up; o_proj and ffn_down row-parallel as
// all-gather + output-row shards, so a (tp, dcp = 1) run equals the tp = 1 run bit for bit;
// vocab-parallel lm_head). Numerics: quantized weights times fp32 activations (or int8 ones with
// quantize_activations), RMSNorm and RoPE in ggml's normal mode as llama.cpp runs the llama
// architecture, fp32 KV.
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
#include "models/layers/attention_shard.h"

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

// Collective over `world` (tp_size ranks). config.llama_cpp_numerics quantizes activations to
// int8 per 32-block before each matmul, as llama.cpp's CPU backend does; off, fp32 activations,
// whose rounding differences do not grow, keep greedy output identical across DCP sizes and
// backends.
Expected<std::unique_ptr<Model>> CreateLlamaModel(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  ThreadPool* pool);

}  // namespace ctxpar
