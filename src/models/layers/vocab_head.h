// The two vocabulary ends of a dense GGUF model, on one rank: the token embedding
// (token_embd.weight, whole on every rank) and the head that turns the hidden rows whose logits a
// batch wants into logits: RmsNorm with output_norm.weight, then the vocab-parallel product with
// the rank's shard of output.weight, or of token_embd.weight when the embeddings are tied
// (vocab.h's shards, tp_linear.h's VocabLogits), checked finite.
//
// Shapes (fp32, row-major): x [T, dim] in batch order; logits [batch.TotalLogitRows(), vocab].
//
// Thread safety: Embed is const; Logits uses the head's scratch rows and is collective over the
// TP group.
#pragma once

#include <string>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/gguf.h"
#include "ctxpar/status.h"
#include "models/layers/tp_linear.h"
#include "models/layers/vocab.h"
#include "models/linear.h"

namespace ctxpar::model {

class VocabHead {
 public:
  // The weights of `f` for rank tp.rank() of tp.size(), in tp's activation format.
  static Expected<VocabHead> FromGguf(const GgufFile& f, int dim, int vocab, bool tied,
                                      float rms_eps, const TpLinear& tp);

  // x [T, dim]: the embeddings of batch.tokens times `scale` (vocab.h's EmbedTokens).
  void Embed(const Batch& batch, float scale, float* x) const;

  // logits of the rows of x the batch wants (collective); CTXPAR-MODEL-009 naming `path` when
  // one is not finite.
  Status Logits(TpLinear& tp, const Batch& batch, const float* x, const std::string& path,
                std::vector<float>& logits);

 private:
  int dim_ = 0;
  int vocab_ = 0;
  float rms_eps_ = 0.0f;
  QuantMatrix embd_, lm_head_;
  VocabShard shard_;
  const float* out_norm_ = nullptr;
  std::vector<float> rows_;
};

}  // namespace ctxpar::model
