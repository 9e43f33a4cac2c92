// Row bookkeeping every architecture's forward does: the position of each row of a Batch.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxpar/batch.h"

namespace ctxpar::model {

// positions[t] = the position of the batch's row t (its sequence's pos0 plus its index).
inline void BatchPositions(const Batch& batch, std::vector<int>& positions) {
  positions.resize(batch.tokens.size());
  for (const BatchSeq& seq : batch.seqs) {
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      positions[seq.token_offset + t] = static_cast<int>(seq.pos0 + t);
    }
  }
}

}  // namespace ctxpar::model
