// What every dense GGUF model's forward holds and does alike (the Llama family, OLMo 2, Gemma 2
// and 3): the file, hyperparameters and desc, the TP group's linear layers, the attention and
// gated-MLP blocks, the layers' weights, the vocab head and the activations; the embedding, the
// residual adds, the check of each layer's output and the logits. An architecture derives,
// passes its GqaOptions and activation, loads its Layers and the head in Init, and writes its
// block in Forward.
//
// Hparams: DenseHeadLayout's fields, dim, rms_eps, vocab_size. Layer: the rank's weights of one
// layer (usually DenseBlockWeights and its norms).
//
// Thread safety: one rank's thread; Forward is collective over the TP group.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/gguf.h"
#include "ctxpar/model.h"
#include "models/check_finite.h"
#include "models/layers/attention_shard.h"
#include "models/layers/compute_types.h"
#include "models/layers/gated_mlp.h"
#include "models/layers/gqa_attention.h"
#include "models/layers/rows.h"
#include "models/layers/tp_linear.h"
#include "models/layers/vocab.h"
#include "models/layers/vocab_head.h"

namespace ctxpar::model {

// The checks of a file's tensors that a dense model's loading makes, run when its source opens so
// that `ctxpar check` refuses what generate would: the names (CheckGgufTensors, `globals` and
// `per_layer` under blk.N.), then every layer loaded at one rank on the mapped file (shapes,
// types; pointers, no copy) by load_layers(file, hp, shard, ActFormat::kF32, std::vector<Layer>&),
// then the head. Hparams: DenseHeadLayout's fields, num_layers, vocab_size, tied_embeddings.
template <class Layer, class Hparams, class LoadLayers>
Status CheckDenseTensors(const GgufFile& f, const Hparams& hp, std::string_view architecture,
                         std::span<const std::string_view> globals,
                         std::span<const std::string_view> per_layer, LoadLayers load_layers) {
  CTXPAR_RETURN_IF_ERROR(CheckGgufTensors(f, architecture, hp.num_layers, globals, per_layer));
  EngineConfig one_rank;
  const HeadShard shard = MakeHeadShard(DenseHeadLayout(hp), one_rank, 0);
  std::vector<Layer> layers;
  CTXPAR_RETURN_IF_ERROR(load_layers(f, hp, shard, ActFormat::kF32, layers));
  return VocabHead::CheckGguf(f, hp.dim, hp.vocab_size, hp.tied_embeddings);
}

template <class Hparams, class Layer>
class DenseModel : public Model {
 public:
  const ModelDesc& desc() const override { return desc_; }

 protected:
  DenseModel(std::shared_ptr<const GgufFile> file, const Hparams& hp, ModelDesc desc,
             Communicator& world, compute::Compute& compute, const HeadShard& shard,
             const GqaOptions& attention, GatedActivation activation)
      : file_(std::move(file)),
        hp_(hp),
        desc_(std::move(desc)),
        compute_(compute),
        tp_(&world, &compute),
        attention_(attention, &tp_, shard),
        mlp_(activation, hp.dim, hp.rms_eps, &tp_, shard) {}

  // The vocab head (tied: token_embd's rows) and the attention's DCP group: the end of Init.
  Status InitHead(const EngineConfig& config, bool tied) {
    CTXPAR_ASSIGN_OR_RETURN(
        head_, VocabHead::FromGguf(*file_, hp_.dim, hp_.vocab_size, tied, hp_.rms_eps, tp_));
    return attention_.Init(config);
  }

  // Checks the batch's token ids, sets positions_ and x_ [T, dim] to the embeddings times
  // `scale`; returns T.
  Expected<int> Embed(const Batch& batch, float scale) {
    CTXPAR_RETURN_IF_ERROR(CheckTokenIds(batch, hp_.vocab_size));
    BatchPositions(batch, positions_);
    x_.resize(batch.num_tokens() * hp_.dim);
    head_.Embed(batch, scale, x_.data());
    return static_cast<int>(batch.num_tokens());
  }

  // x_ += y [n, dim].
  void AddResidual(const float* y) {
    const auto n = static_cast<std::int64_t>(x_.size() / hp_.dim);
    compute_.Add(compute::F32(x_.data(), n, hp_.dim), compute::F32(y, n, hp_.dim));
  }
  // x_ += y + bias, with bias [dim] added to each row of y first (a row-parallel output's bias,
  // gpt-oss's o_proj, as HF adds it before the residual).
  void AddResidual(const float* y, const float* bias) {
    const std::size_t dim = hp_.dim;
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += y[i] + bias[i % dim];
  }
  // x_ += RmsNorm(y) with `weight` (a post-norm), over n rows.
  void AddNormed(const float* y, const float* weight, int n) {
    compute_.AddRmsNorm(compute::F32(y, n, hp_.dim), weight, hp_.rms_eps,
                        compute::F32(x_.data(), n, hp_.dim));
  }
  // The output of layer l is finite (check_finite.h).
  Status CheckLayer(int l) const {
    return CheckLayerFinite(x_.data(), x_.size(), l, file_->path());
  }
  Status Logits(const Batch& batch, std::vector<float>& logits) {
    return head_.Logits(tp_, batch, x_.data(), file_->path(), logits);
  }

  std::shared_ptr<const GgufFile> file_;
  Hparams hp_;
  ModelDesc desc_;
  compute::Compute& compute_;
  TpLinear tp_;
  GqaAttention attention_;
  GatedMlp mlp_;
  std::vector<Layer> layers_;
  VocabHead head_;
  std::vector<float> x_;
  std::vector<int> positions_;  // of the batch's rows
};

}  // namespace ctxpar::model
