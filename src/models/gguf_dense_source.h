// What the ModelSources of the dense GGUF architectures (Llama, Gemma 2 and 3) share: the file,
// its hyperparameters and tokenizer, the ModelDesc (architecture, vocabulary, context, the
// tokenizer's end-of-generation ids), the ModelInfo (head counts, the hook's name) and the KV a
// rank stores per token (its KV heads of head_dim, layers/attention_shard.h; the window groups of
// WindowKvGroups). An architecture's
// source derives from GgufDenseSource and states what differs: its hook's rules (info_.hook, or
// SetDenseLayoutHook's), its factory (CreateDenseModel); its
// hyperparameter reader starts from the keys they share (ReadDenseHparams, ReadHeadDim).
//
// Hparams: an architecture's hyperparameters, with DenseHeadLayout's fields, num_layers,
// vocab_size and context_length.
//
// Thread safety: immutable after construction.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/gguf.h"
#include "ctxpar/gguf_hparams.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/model.h"
#include "ctxpar/thread_pool.h"
#include "ctxpar/tokenizer.h"
#include "models/layers/attention_shard.h"
#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"

namespace ctxpar {

// The KV groups (kv_pool.h) of a model whose layers l with hp.IsWindowLayer(l) keep their last
// hp.window positions (Gemma 2 and 3; the pool applies each layer's window in BatchAttention):
// the global layers' group first, as the pool wants, then the window layers'; DCP shards both.
// Empty when no layer has a window, or the Hparams have no IsWindowLayer.
template <class Hparams>
std::vector<KvGroupSpec> WindowKvGroups(const Hparams& hp) {
  if constexpr (requires { hp.IsWindowLayer(0); }) {
    KvGroupSpec global{.layers = {}, .window = 0, .dcp_sharded = true};
    KvGroupSpec window{.layers = {}, .window = hp.window, .dcp_sharded = true};
    for (int l = 0; l < hp.num_layers; ++l) {
      (hp.IsWindowLayer(l) ? window : global).layers.push_back(l);
    }
    if (window.layers.empty()) return {};
    return {std::move(global), std::move(window)};
  } else {
    return {};
  }
}

template <class Hparams>
class GgufDenseSource : public ModelSource {
 public:
  const std::string& path() const override { return path_; }
  const ModelInfo& info() const override { return info_; }
  const ModelDesc& desc() const override { return desc_; }
  const ModelShape& shape() const override { return shape_; }
  const Tokenizer* tokenizer() const override { return &tokenizer_; }

  KvSpec KvSpecFor(const EngineConfig& c) const override {
    const model::HeadShard shard = model::MakeHeadShard(model::DenseHeadLayout(hp_), c, 0);
    return {.num_layers = hp_.num_layers,
            .num_kv_heads = shard.kv_heads,
            .head_dim_k = hp_.head_dim,
            .head_dim_v = hp_.head_dim,
            .v_in_k = false,
            .dtype = c.kv_cache_dtype,
            .groups = WindowKvGroups(hp_)};
  }

 protected:
  GgufDenseSource(std::string_view architecture, std::string_view hook_name, std::string path,
                  std::shared_ptr<const GgufFile> file, Hparams hp, Tokenizer tokenizer)
      : path_(std::move(path)),
        file_(std::move(file)),
        hp_(std::move(hp)),
        tokenizer_(std::move(tokenizer)) {
    desc_.architecture = std::string(architecture);
    desc_.vocab_size = hp_.vocab_size;
    desc_.context_length = hp_.context_length;
    for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id) {
      if (tokenizer_.IsEndOfGeneration(id)) desc_.eos_token_ids.push_back(id);
    }
    info_.architecture = desc_.architecture;
    info_.num_attention_heads = hp_.num_heads;
    info_.num_key_value_heads = hp_.num_kv_heads;
    info_.hook_name = std::string(hook_name);
    shape_ = {.num_layers = hp_.num_layers,
              .hidden = hp_.dim,
              .vocab = hp_.vocab_size,
              .num_heads = hp_.num_heads,
              .num_kv_heads = hp_.num_kv_heads,
              .head_dim = hp_.head_dim,
              .dense_layers = hp_.num_layers,
              .ffn = hp_.ffn_dim,
              .tied_embeddings = !file_->FindTensor("output.weight").ok()};
    if constexpr (requires { hp_.experts; }) {
      if (hp_.experts > 0) {
        shape_.experts = hp_.experts;
        shape_.experts_per_token = hp_.experts_used;
        shape_.expert_ffn = hp_.expert_ffn;
        shape_.dense_layers = 0;
      }
    }
    // Every global_every-th layer is global: the first global layer's place, where some layers
    // keep a window group (a window on every layer is kept by the full group).
    if (const std::vector<KvGroupSpec> groups = WindowKvGroups(hp_);
        hp_.window > 0 && !groups.empty() && !groups[0].layers.empty()) {
      shape_.sliding_window = hp_.window;
      shape_.global_every = groups[0].layers[0] + 1;
    }
  }

  // The hook of a dense model (the Llama family, Gemma 2, Gemma 3): CheckHeadLayout over tp and
  // dcp, int8 activations only where every weight takes them, CheckDenseFlags (with
  // `routed_experts`: Qwen3-MoE's --ep-size rule).
  void SetDenseLayoutHook(bool routed_experts = false) {
    info_.hook = [hp = hp_, arch = desc_.architecture, int8_weights = model::Int8Weights(*file_),
                  routed_experts](Resolution& r, const ResolveContext&) {
      ResolvingView cfg = r.view();
      CTXPAR_RETURN_IF_ERROR(
          model::CheckHeadLayout(model::DenseHeadLayout(hp), arch, cfg.tp_size(), cfg.dcp_size()));
      CTXPAR_RETURN_IF_ERROR(
          model::CheckInt8Activations(cfg.llama_cpp_numerics(), int8_weights, arch));
      return model::CheckDenseFlags(cfg, arch, routed_experts);
    };
  }

  std::string path_;
  std::shared_ptr<const GgufFile> file_;
  Hparams hp_;
  Tokenizer tokenizer_;
  ModelDesc desc_;
  ModelInfo info_;
  ModelShape shape_;
};

// The keys every dense architecture has, read in this order under `prefix` ("llama."), each in
// [1, 2^30]: embedding_length, block_count, attention.head_count, attention.head_count_kv,
// feed_forward_length, context_length.
template <class Hparams>
Status ReadDenseHparams(const GgufFile& f, const std::string& prefix, Hparams& hp) {
  auto positive = [&](const char* key) { return ReadIntHparam(f, prefix + key, 1, 1 << 30); };
  CTXPAR_ASSIGN_OR_RETURN(hp.dim, positive("embedding_length"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_layers, positive("block_count"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_heads, positive("attention.head_count"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_kv_heads, positive("attention.head_count_kv"));
  CTXPAR_ASSIGN_OR_RETURN(hp.ffn_dim, positive("feed_forward_length"));
  CTXPAR_ASSIGN_OR_RETURN(hp.context_length, positive("context_length"));
  return Status::Ok();
}

// hp.head_dim from <prefix>attention.key_length, even (RoPE pairs) and in [2, 512];
// attention.value_length, where the file has it, must equal it (CTXPAR-GGUF-006).
template <class Hparams>
Status ReadHeadDim(const GgufFile& f, const std::string& prefix, Hparams& hp) {
  CTXPAR_ASSIGN_OR_RETURN(hp.head_dim, ReadIntHparam(f, prefix + "attention.key_length", 2, 512));
  CTXPAR_ASSIGN_OR_RETURN(
      const int value_length,
      ReadIntHparam(f, prefix + "attention.value_length", 1, 1 << 30, hp.head_dim));
  if (value_length != hp.head_dim) {
    return HparamError(
        f, prefix + "attention.value_length", value_length,
        fmt::format("it must equal {}attention.key_length ({})", prefix, hp.head_dim));
  }
  if (hp.head_dim % 2 != 0) {
    return HparamError(f, prefix + "attention.key_length", hp.head_dim,
                       "it must be even (RoPE pairs)");
  }
  return Status::Ok();
}

// CTXPAR-GGUF-006 unless the query heads are a multiple of the KV heads.
template <class Hparams>
Status CheckKvHeads(const GgufFile& f, const std::string& prefix, const Hparams& hp) {
  if (hp.num_heads % hp.num_kv_heads == 0) return Status::Ok();
  return HparamError(f, prefix + "attention.head_count", hp.num_heads,
                     fmt::format("it must be a multiple of {}attention.head_count_kv ({})", prefix,
                                 hp.num_kv_heads));
}

// The opener of a dense GGUF architecture (registry.h's GgufOpener): its hyperparameters read
// by `read_hparams`, then the tokenizer, then Source(path, file, hparams, tokenizer).
template <class Source, auto read_hparams>
Expected<std::unique_ptr<ModelSource>> OpenGgufDenseSource(const std::string& path,
                                                           std::shared_ptr<const GgufFile> file) {
  CTXPAR_ASSIGN_OR_RETURN(auto hp, read_hparams(*file));
  CTXPAR_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(*file));
  return std::unique_ptr<ModelSource>(
      new Source(path, std::move(file), std::move(hp), std::move(tokenizer)));
}

// A dense architecture's model factory: the checks and the rank's shard (DenseModelShard), then
// M(file, hp, desc, world, compute, shard) and M::Init(config, shard).
template <class M, class Hparams>
Expected<std::unique_ptr<Model>> CreateDenseModel(std::shared_ptr<const GgufFile> file,
                                                  const Hparams& hp, ModelDesc desc,
                                                  std::string_view architecture,
                                                  const EngineConfig& config, Communicator& world,
                                                  compute::Compute& compute) {
  CTXPAR_ASSIGN_OR_RETURN(
      const model::HeadShard shard,
      model::DenseModelShard(model::DenseHeadLayout(hp), architecture, config, world));
  auto m = std::make_unique<M>(std::move(file), hp, std::move(desc), world, compute, shard);
  CTXPAR_RETURN_IF_ERROR(m->Init(config, shard));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace ctxpar
