#include "models/layers/vocab.h"

#include <fmt/format.h>

#include <algorithm>

namespace ctxpar::model {

VocabShard MakeVocabShard(int vocab, int tp, int rank) {
  VocabShard s;
  s.rows = (vocab + tp - 1) / tp;
  s.first = std::min(vocab, rank * s.rows);
  s.count = std::min(vocab - s.first, s.rows);
  return s;
}

Status CheckTokenIds(const Batch& batch, int vocab) {
  if (batch.num_tokens() < 1) return InvalidArgument("Forward: the batch has no token");
  for (std::size_t t = 0; t < batch.tokens.size(); ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= vocab) {
      return InvalidArgument(fmt::format(
          "token id {} at index {} is outside the vocabulary [0, {})", batch.tokens[t], t, vocab));
    }
  }
  return Status::Ok();
}

void EmbedTokens(const QuantMatrix& w, const Batch& batch, float scale, float* x) {
  const std::size_t dim = w.cols;
  for (std::size_t t = 0; t < batch.tokens.size(); ++t) {
    float* row = x + t * dim;
    DequantizeRow(w, batch.tokens[t], row);
    if (scale != 1.0f) {
      for (std::size_t i = 0; i < dim; ++i) row[i] *= scale;
    }
  }
}

void WantedRows(const Batch& batch, const float* x, int dim, std::vector<float>& rows) {
  rows.resize(std::size_t(batch.TotalLogitRows()) * dim);
  std::size_t r = 0;
  for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
    const BatchSeq& s = batch.seqs[i];
    const int32_t count = batch.LogitRows(i);
    const int32_t first = s.token_offset + s.num_tokens - count;
    std::copy_n(x + std::size_t(first) * dim, std::size_t(count) * dim, rows.data() + r * dim);
    r += count;
  }
}

Status GatherVocabShards(Communicator& comm, const float* shard_logits, int n, int shard, int vocab,
                         std::vector<float>& scratch, float* logits) {
  const int ranks = comm.size();
  scratch.resize(std::size_t(n) * shard * ranks);
  CTXPAR_RETURN_IF_ERROR(
      comm.AllGather(shard_logits, scratch.data(), std::size_t(n) * shard, DataType::kF32));
  for (int rank = 0; rank < ranks; ++rank) {
    const int first = rank * shard;
    const int count = std::max(0, std::min(shard, vocab - first));
    for (int t = 0; t < n; ++t) {
      std::copy_n(scratch.data() + (std::size_t(rank) * n + t) * shard, count,
                  logits + std::size_t(t) * vocab + first);
    }
  }
  return Status::Ok();
}

}  // namespace ctxpar::model
