// The vocabulary ends of a forward, shared by the model architectures: the token-id check, the
// embedding lookup, the hidden-state rows whose logits a Batch wants (batch.h), and the
// vocab-parallel head's shards gathered into logits.
//
// Shapes (fp32, row-major): x [T, dim] in batch order; rows [batch.TotalLogitRows(), dim].
// Shards: rank r of tp holds vocab rows [r * shard, min(vocab, (r + 1) * shard)), the last
// padded to `shard`; shard_logits [n, shard].
//
// Thread safety: pure functions; GatherVocabShards is collective over `comm`.
#pragma once

#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/communicator.h"
#include "ctxpar/status.h"
#include "models/layers/compute_types.h"

namespace ctxpar::model {

// Rank `rank`'s rows of a vocab-parallel head: [first, first + count), padded to `rows`.
struct VocabShard {
  int rows = 0;
  int first = 0;
  int count = 0;
};
VocabShard MakeVocabShard(int vocab, int tp, int rank);

// InvalidArgument naming the first token id outside [0, vocab), and an empty batch.
Status CheckTokenIds(const Batch& batch, int vocab);

// x [T, w.cols]: row t is the embedding of batch.tokens[t] (dequantized as the fp32 kernels see
// it), times `scale` when it is not 1 (Gemma's sqrt(hidden)).
void EmbedTokens(const QuantMatrix& w, const Batch& batch, float scale, float* x);

void WantedRows(const Batch& batch, const float* x, int dim, std::vector<float>& rows);

// logits [n, vocab] from every rank's shard_logits.
Status GatherVocabShards(Communicator& comm, const float* shard_logits, int n, int shard, int vocab,
                         std::vector<float>& scratch, float* logits);

}  // namespace ctxpar::model
