#include "models/layers/vocab_head.h"

#include "models/check_finite.h"
#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"

namespace ctxpar::model {

Status LmHead::Logits(TpLinear& tp, const Batch& batch, const float* x, const std::string& path,
                      std::vector<float>& logits) {
  WantedRows(batch, x, dim_, rows_);
  const int n = static_cast<int>(batch.TotalLogitRows());
  logits.resize(std::size_t(n) * vocab_);
  if (n == 0) return Status::Ok();
  const compute::Tensor rows = compute::F32(rows_.data(), n, dim_);
  tp.compute().RmsNorm(rows, norm_, rms_eps_, rows);
  CTXPAR_RETURN_IF_ERROR(std::visit(
      [&](const auto& w) {
        return tp.VocabLogits(w, shard_, vocab_, rows_.data(), n, logits.data());
      },
      w_));
  return CheckFinite(logits.data(), logits.size(), "the logits", path);
}

Expected<VocabHead> VocabHead::FromGguf(const GgufFile& f, int dim, int vocab, bool tied,
                                        float rms_eps, const TpLinear& tp) {
  VocabHead h;
  CTXPAR_ASSIGN_OR_RETURN(
      h.embd_, GgufMatrix(f, "token_embd.weight", dim, vocab, tp.compute().act_format()));
  QuantMatrix head = h.embd_;
  if (!tied) {
    CTXPAR_ASSIGN_OR_RETURN(head,
                            GgufMatrix(f, "output.weight", dim, vocab, tp.compute().act_format()));
  }
  CTXPAR_ASSIGN_OR_RETURN(const float* norm, GgufVector(f, "output_norm.weight", dim));
  const VocabShard shard = MakeVocabShard(vocab, tp.size(), tp.rank());
  h.head_ = LmHead(dim, vocab, rms_eps, norm,
                   WithInt8Pack(head.RowRange(shard.first, shard.count), tp.compute().act_format()),
                   shard);
  return h;
}

Status VocabHead::CheckGguf(const GgufFile& f, int dim, int vocab, bool tied) {
  CTXPAR_RETURN_IF_ERROR(GgufMatrix(f, "token_embd.weight", dim, vocab, ActFormat::kF32).status());
  if (!tied) {
    CTXPAR_RETURN_IF_ERROR(GgufMatrix(f, "output.weight", dim, vocab, ActFormat::kF32).status());
  }
  return GgufVector(f, "output_norm.weight", dim).status();
}

void VocabHead::Embed(const Batch& batch, float scale, float* x) const {
  EmbedTokens(embd_, batch, scale, x);
}

}  // namespace ctxpar::model
