// A request's record of its drafts under speculative decoding, and the draft length it sets.
//
// A verify row costs about a fifth of a decode step on the CPU (docs/engine.md measures it), and
// with per-token acceptance p the k-th draft is accepted with probability p^k: k drafts give
// 1 + p + ... + p^k tokens in a step of 1 + k / 5, and the record drafts the k with the most
// tokens per step. p is the record's accepted / tried (tried: the accepted drafts and the first
// rejected one), both decayed by 0.9 per verify step from a prior of one half. Where no draft
// pays, a request drafts one token every 8 steps, so that a text that turns repetitive is
// noticed.
//
// The engine keeps one per request; the planner's simulation keeps one per simulated request, so
// that it drafts as the engine would.
//
// Thread safety: none (one owner).
#pragma once

#include "engine/scheduler.h"

namespace ctxpar::engine {

// Whether `seq` decodes next (its KV holds every token but its last), so that it may draft.
inline bool Drafts(const SeqState& seq) {
  return seq.slot >= 0 && seq.kv_len > 0 && seq.pending() == 1;
}

class DraftRecord {
 public:
  // Tokens `seq` (Drafts) drafts next: at most num_draft_tokens - 1, and none past its
  // max_new_tokens (the verify step's last row gives one more token).
  int Length(const SeqState& seq, int num_draft_tokens) const;
  // A step drafted for the request, `any` tokens or none.
  void Drafted(bool any) { idle_ = any ? 0 : idle_ + 1; }
  // Its verify step accepted `accepted` of `drafted` (> 0) drafts.
  void Verified(int accepted, int drafted);

 private:
  double accepted_ = 1.0, tried_ = 2.0;
  int idle_ = 0;  // steps since it last drafted
};

}  // namespace ctxpar::engine
