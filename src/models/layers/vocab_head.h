// The vocabulary ends of a model on one rank.
// - LmHead, every architecture's output end: the hidden rows whose logits a batch wants, through
//   the final RmsNorm and the vocab-parallel product with the rank's shard of the head (vocab.h's
//   shards, tp_linear.h's VocabLogits), checked finite. Either weight kind: GGUF blocks or fp32
//   rows (DeepSeek's lm_head from safetensors).
// - VocabHead, a dense GGUF model's two ends: the token embedding (token_embd.weight, whole on
//   every rank) and the LmHead of output_norm.weight and output.weight, or token_embd.weight when
//   the embeddings are tied.
//
// Shapes (fp32, row-major): x [T, dim] in batch order; logits [batch.TotalLogitRows(), vocab].
//
// Thread safety: Embed is const; Logits uses the head's scratch rows and is collective over the
// TP group.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/gguf.h"
#include "ctxpar/status.h"
#include "models/layers/compute_types.h"
#include "models/layers/tp_linear.h"
#include "models/layers/vocab.h"

namespace ctxpar::model {

class LmHead {
 public:
  using Weight = std::variant<QuantMatrix, F32Matrix>;

  LmHead() = default;
  // `norm` [dim] and the weights of `w`, the rows `shard` of the head [vocab, dim], are not owned
  // and outlive the head.
  LmHead(int dim, int vocab, float rms_eps, const float* norm, Weight w, VocabShard shard)
      : dim_(dim), vocab_(vocab), rms_eps_(rms_eps), norm_(norm), w_(w), shard_(shard) {}

  // logits of the rows of x the batch wants (collective); CTXPAR-MODEL-009 naming `path` when
  // one is not finite.
  Status Logits(TpLinear& tp, const Batch& batch, const float* x, const std::string& path,
                std::vector<float>& logits);

 private:
  int dim_ = 0;
  int vocab_ = 0;
  float rms_eps_ = 0.0f;
  const float* norm_ = nullptr;
  Weight w_;
  VocabShard shard_;
  std::vector<float> rows_;
};

class VocabHead {
 public:
  // The weights of `f` for rank tp.rank() of tp.size(), in tp's activation format.
  static Expected<VocabHead> FromGguf(const GgufFile& f, int dim, int vocab, bool tied,
                                      float rms_eps, const TpLinear& tp);
  // The checks of the tensors FromGguf reads (names, shapes, types with a kernel), loading nothing.
  static Status CheckGguf(const GgufFile& f, int dim, int vocab, bool tied);

  // x [T, dim]: the embeddings of batch.tokens times `scale` (vocab.h's EmbedTokens).
  void Embed(const Batch& batch, float scale, float* x) const;

  Status Logits(TpLinear& tp, const Batch& batch, const float* x, const std::string& path,
                std::vector<float>& logits) {
    return head_.Logits(tp, batch, x, path, logits);
  }

 private:
  QuantMatrix embd_;
  LmHead head_;
};

}  // namespace ctxpar::model
