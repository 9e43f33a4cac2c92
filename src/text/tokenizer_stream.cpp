// Utf8StreamDecoder: the bytes of streamed tokens as text that never stops inside a character.
#include "ctxpar/tokenizer.h"

namespace ctxpar {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed sequence a lead byte starts (Unicode table 3-7), 0 when the
// byte cannot start one.
int SequenceLength(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow the lead byte `lead` as its first continuation byte; the narrower
// ranges exclude overlong forms, surrogates and codepoints past U+10FFFF.
bool ValidSecondByte(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

std::string Utf8StreamDecoder::PushBytes(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const auto lead = static_cast<uint8_t>(pending_[i]);
    const int len = SequenceLength(lead);
    if (len == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    // Count the continuation bytes present and valid so far.
    int have = 1;
    while (have < len && i + have < pending_.size()) {
      const auto b = static_cast<uint8_t>(pending_[i + have]);
      const bool ok = have == 1 ? ValidSecondByte(lead, b) : (b & 0xC0) == 0x80;
      if (!ok) break;
      ++have;
    }
    if (have == len) {
      out.append(pending_, i, len);
      i += len;
    } else if (i + have == pending_.size()) {
      break;  // a prefix of a valid sequence: wait for the rest
    } else {
      // A broken sequence: its valid prefix becomes one U+FFFD, the offending byte starts anew.
      out.append(kReplacement);
      i += have;
    }
  }
  pending_.erase(0, i);
  return out;
}

Expected<std::string> Utf8StreamDecoder::Push(int32_t id) {
  CTXPAR_ASSIGN_OR_RETURN(std::string piece, tokenizer_->TokenToPiece(id, render_special_));
  return PushBytes(piece);
}

std::string Utf8StreamDecoder::Finish() {
  std::string out = pending_.empty() ? std::string() : std::string(kReplacement);
  pending_.clear();
  return out;
}

}  // namespace ctxpar
