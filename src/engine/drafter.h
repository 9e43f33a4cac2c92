// Drafters: where the drafts of speculative decoding come from (docs/engine.md). Before each
// step the leader asks its drafter for the next tokens of every decoding request that drafts;
// the step verifies them, and the sampler keeps the ones that equal what plain decoding samples.
// So a drafter decides speed only: whatever it drafts, the output is plain decoding's.
//
//   NGRAM       the continuation of the longest earlier occurrence of the sequence's last tokens
//               (ngram.h), else of its last tokens in the finished requests (NgramStore, at most
//               config.ngram_capacity tokens).
//   STANDALONE  a smaller draft model with the target's vocabulary, on the leader only (tp 1,
//               dcp 1: a one-rank in-process group), with its own KV pool and a slot per request.
//               Per call it feeds each request the tokens its KV lacks (after truncating the KV of
//               drafts the target rejected), then decodes the drafts greedily, batched across
//               requests. A request for which the draft pool has no room (or no free slot) drafts
//               nothing that step and gives its draft slot back; it is never refused.
//
// Thread safety: used by the engine's run thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "ctxpar/engine_config.h"
#include "ctxpar/model.h"
#include "ctxpar/status.h"
#include "engine/ngram.h"
#include "engine/scheduler.h"

namespace ctxpar {
namespace compute {
class Compute;  // compute/compute.h
}  // namespace compute
}  // namespace ctxpar

namespace ctxpar::engine {

// A decoding sequence (every token but its last in the target's KV) and the most tokens it may
// draft (>= 1).
struct DraftWant {
  SeqState* seq;
  int max_tokens;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Sets each wanted sequence's draft: at most max_tokens tokens to follow its last token,
  // possibly none. Errors are the draft model's forward failures.
  virtual Status Draft(std::span<const DraftWant> wants) = 0;
  // The request ended or was retracted: whatever the drafter keeps for it goes (a no-op for an
  // unknown id).
  virtual void Forget(uint64_t id) = 0;
  // A request ended with these tokens (prompt and output), which a drafter may draft from later.
  virtual void Learn(std::span<const int32_t> tokens) { (void)tokens; }
  // Drops what Learn kept (the engine's FlushCache).
  virtual void Clear() {}
};

// `capacity`: the tokens of finished requests kept to draft from (0: none).
std::unique_ptr<Drafter> MakeNgramDrafter(const NgramOptions& options, int64_t capacity);

// Opens config.speculative_draft_model_path: CTXPAR-SPEC-006 with the reason when it cannot be
// opened, CTXPAR-SPEC-007 when its vocabulary is not the target's (another vocab_size or, where
// both carry a tokenizer, another text for some id). PrepareLaunch calls it to refuse a launch
// line at once; the engine, to load the draft.
Expected<std::unique_ptr<ModelSource>> OpenDraftModel(const EngineConfig& config,
                                                      const ModelSource& target);

// The STANDALONE drafter (leader only): opens the draft model as OpenDraftModel does and loads it
// at tp 1 / dcp 1 on `compute` (the leader's, not owned). Its KV pool takes the budget of
// one rank (config.kv_cache_mib) for the draft model's KV, at most `max_tokens` tokens (the
// target's max_total_num_tokens) and config.max_running_requests slots.
Expected<std::unique_ptr<Drafter>> MakeModelDrafter(const EngineConfig& config,
                                                    const ModelSource& target, int64_t max_tokens,
                                                    compute::Compute& compute);

}  // namespace ctxpar::engine
