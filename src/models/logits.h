// The last step of a forward, shared by the model architectures: the hidden-state rows whose
// logits a Batch wants (batch.h), and the vocab-sharded lm_head's shards gathered into logits.
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

namespace ctxpar::model {

void WantedRows(const Batch& batch, const float* x, int dim, std::vector<float>& rows);

// logits [n, vocab] from every rank's shard_logits.
Status GatherVocabShards(Communicator& comm, const float* shard_logits, int n, int shard, int vocab,
                         std::vector<float>& scratch, float* logits);

}  // namespace ctxpar::model
