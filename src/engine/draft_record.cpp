#include "engine/draft_record.h"

#include <algorithm>
#include <cmath>

namespace ctxpar::engine {
namespace {

constexpr double kRowCost = 0.2;
constexpr int kProbeSteps = 8;
constexpr double kDecay = 0.9;

}  // namespace

int DraftRecord::Length(int max_tokens) const {
  const double p = accepted_ / tried_;
  const double k = p >= 0.999 ? max_tokens : std::floor(std::log(kRowCost) / std::log(p));
  if (k >= 1) return static_cast<int>(std::min<double>(k, max_tokens));
  return idle_ + 1 >= kProbeSteps ? std::min(1, max_tokens) : 0;
}

void DraftRecord::Verified(int accepted, int drafted) {
  accepted_ = kDecay * accepted_ + accepted;
  tried_ = kDecay * tried_ + accepted + (accepted < drafted ? 1 : 0);
}

}  // namespace ctxpar::engine
