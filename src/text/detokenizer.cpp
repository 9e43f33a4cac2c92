// Detokenizer (detokenizer.h): complete UTF-8 from the stream decoder, stop strings found in the
// text not yet released, and the tail that could still begin one held back.
#include "ctxpar/detokenizer.h"

#include <algorithm>

namespace ctxpar {

Detokenizer::Detokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop,
                         bool render_special, bool keep_stop)
    : stream_(tokenizer, render_special), stop_(std::move(stop)), keep_stop_(keep_stop) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

// Ends the text at the stop string that completes first; among those completing at the same
// byte, the one starting first. That is the stop a byte-at-a-time stream would meet, so the
// result does not depend on how the tokens cut the text.
bool Detokenizer::FindStop() {
  size_t best_end = std::string::npos, best_pos = 0;
  for (const std::string& s : stop_) {
    const size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_pos)) {
      best_end = end;
      best_pos = pos;
      matched_ = s;
    }
  }
  if (best_end == std::string::npos) return false;
  held_.resize(keep_stop_ ? best_end : best_pos);
  stopped_ = true;
  return true;
}

// The length of the longest tail of held_ that is a proper prefix of a stop string, widened to
// start on a character so that the released text stays whole UTF-8.
size_t Detokenizer::HoldBack() const {
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  auto continuation = [&](size_t n) {
    return (static_cast<unsigned char>(held_[held_.size() - n]) & 0xC0) == 0x80;
  };
  while (keep > 0 && keep < held_.size() && continuation(keep)) ++keep;
  return keep;
}

std::string Detokenizer::Release(bool all) {
  std::string out;
  if (FindStop() || all) {
    out.swap(held_);
    return out;
  }
  const size_t keep = HoldBack();
  out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

Expected<std::string> Detokenizer::Push(int32_t token) {
  if (stopped_) return std::string();
  CTXPAR_ASSIGN_OR_RETURN(std::string text, stream_.Push(token));
  held_ += text;
  return Release(false);
}

std::string Detokenizer::Finish() {
  if (stopped_) return std::string();
  held_ += stream_.Finish();
  return Release(true);
}

}  // namespace ctxpar
