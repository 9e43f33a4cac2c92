#include "engine/draft_record.h"

#include <algorithm>

namespace ctxpar::engine {
namespace {

constexpr double kRowCost = 0.2;
constexpr int kProbeSteps = 8;
constexpr double kDecay = 0.9;

}  // namespace

int DraftRecord::Length(const SeqState& seq, int num_draft_tokens) const {
  const int max_tokens =
      std::max(0, std::min(num_draft_tokens - 1, seq.max_new_tokens - seq.output_len() - 1));
  const double p = accepted_ / tried_;
  // k drafts give 1 + p + ... + p^k tokens for a step of 1 + kRowCost k: the k with the most
  // tokens per step (the fewest drafts among equals).
  int best = 0;
  double best_rate = 1.0, tokens = 1.0, pk = 1.0;
  for (int k = 1; k <= max_tokens; ++k) {
    pk *= p;
    tokens += pk;
    const double rate = tokens / (1.0 + kRowCost * k);
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  if (best > 0) return best;
  return idle_ + 1 >= kProbeSteps ? std::min(1, max_tokens) : 0;
}

void DraftRecord::Verified(int accepted, int drafted) {
  accepted_ = kDecay * accepted_ + accepted;
  tried_ = kDecay * tried_ + accepted + (accepted < drafted ? 1 : 0);
}

}  // namespace ctxpar::engine
