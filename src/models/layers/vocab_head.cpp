#include "models/layers/vocab_head.h"

#include "models/check_finite.h"
#include "models/layers/elementwise.h"
#include "models/layers/gguf_weights.h"

namespace ctxpar::model {

Expected<VocabHead> VocabHead::FromGguf(const GgufFile& f, int dim, int vocab, bool tied,
                                        float rms_eps, const TpLinear& tp) {
  VocabHead h;
  h.dim_ = dim;
  h.vocab_ = vocab;
  h.rms_eps_ = rms_eps;
  CTXPAR_ASSIGN_OR_RETURN(h.embd_, GgufMatrix(f, "token_embd.weight", dim, vocab, tp.format()));
  QuantMatrix head = h.embd_;
  if (!tied) {
    CTXPAR_ASSIGN_OR_RETURN(head, GgufMatrix(f, "output.weight", dim, vocab, tp.format()));
  }
  h.shard_ = MakeVocabShard(vocab, tp.size(), tp.rank());
  h.lm_head_ = head.RowRange(h.shard_.first, h.shard_.count);
  CTXPAR_ASSIGN_OR_RETURN(h.out_norm_, GgufVector(f, "output_norm.weight", dim));
  return h;
}

void VocabHead::Embed(const Batch& batch, float scale, float* x) const {
  EmbedTokens(embd_, batch, scale, x);
}

Status VocabHead::Logits(TpLinear& tp, const Batch& batch, const float* x, const std::string& path,
                         std::vector<float>& logits) {
  WantedRows(batch, x, dim_, rows_);
  const int n = static_cast<int>(batch.TotalLogitRows());
  logits.resize(std::size_t(n) * vocab_);
  if (n == 0) return Status::Ok();
  RmsNorm(rows_.data(), out_norm_, n, dim_, rms_eps_, rows_.data());
  CTXPAR_RETURN_IF_ERROR(tp.VocabLogits(lm_head_, shard_, vocab_, rows_.data(), n, logits.data()));
  return CheckFinite(logits.data(), logits.size(), "the logits", path);
}

}  // namespace ctxpar::model
