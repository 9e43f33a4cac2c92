// Gemma 3 from GGUF (not public API: the engine reaches it through model.h's ModelSource, which
// the architecture registry returns for general.architecture "gemma3"). docs/gemma3.md describes
// the network.
//
// The block, as HF transformers' Gemma3DecoderLayer and llama.cpp's gemma3 graph compute it:
//   x = embedding * sqrt(hidden)
//   h = attn(RmsNorm(x)); x += RmsNorm(h) (post-attention norm)
//   h = down(gelu_tanh(gate(RmsNorm(x))) * up(RmsNorm(x))); x += RmsNorm(h) (post-FFN norm)
//   logits = RmsNorm(x) times the tied embedding
// attn: q and k through per-head RMSNorms, RoPE in the NeoX convention (pairs i, i + d/2) with
// base 1e4 on the sliding-window layers and rope.freq_base (1e6) on the global ones, query scale
// query_pre_attn_scalar^-1/2 (= head_dim^-1/2 for the released sizes: the GGUF has no key for it,
// llama.cpp uses head_dim), a window layer's token at t seeing positions (t - W, t]. Window
// layers are those with (l + 1) % 6 != 0 (llama.cpp's swa pattern 6, HF's layer_types). The
// norm weights are stored as 1 + w by llama.cpp's converter, so the norms are plain RMSNorms.
//
// Layout: layers/attention_shard.h and layers/tp_linear.h, as the Llama model; one KV head, so
// tp replicates it over every rank and DCP shards its tokens over the DCP group.
#pragma once

#include <memory>
#include <string>

#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/gguf.h"
#include "ctxpar/model.h"
#include "ctxpar/status.h"
#include "models/layers/attention_shard.h"

namespace ctxpar {

namespace compute {
class Compute;  // compute/compute.h
}  // namespace compute

struct Gemma3Hparams {
  int vocab_size = 0;
  int dim = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // attention.key_length (not dim / heads: 256 against 640 / 4)
  int ffn_dim = 0;
  int context_length = 0;
  float rope_base = 1e6f;         // global layers
  float rope_base_window = 1e4f;  // sliding-window layers (llama.cpp's fixed value)
  float rms_eps = 1e-6f;
  float query_scale = 0.0f;
  int window = 0;  // attention.sliding_window; 0: every layer global
  int window_pattern = 6;

  bool IsWindowLayer(int l) const { return window > 0 && (l + 1) % window_pattern != 0; }
};

// The KV groups of Gemma 3's layers (kv_pool.h): the global layers keep every position, the window
// layers their last `window`; DCP shards both. Empty when every layer is global. The model and the
// planner's Gemma 3 presets declare these.
std::vector<KvGroupSpec> Gemma3KvGroups(const Gemma3Hparams& hp);

Expected<Gemma3Hparams> ReadGemma3Hparams(const GgufFile& file);

// Collective over `world` (tp_size ranks).
Expected<std::unique_ptr<Model>> CreateGemma3Model(std::shared_ptr<const GgufFile> file,
                                                   const Gemma3Hparams& hp, ModelDesc desc,
                                                   const EngineConfig& config, Communicator& world,
                                                   compute::Compute& compute);

}  // namespace ctxpar
