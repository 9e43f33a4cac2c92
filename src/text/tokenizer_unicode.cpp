#include "text/tokenizer_unicode.h"

#include <algorithm>
#include <array>

namespace ctxpar::tokenizer_internal {
namespace {

// Printable bytes map to themselves; the others (controls, space, DEL, NBSP, soft hyphen) to
// U+0100 upwards in byte order, so every byte has a visible, non-space codepoint.
bool IsPrintableByte(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 0x144> to_byte{};  // codepoints of the alphabet are all below U+0144

  ByteAlphabet() {
    to_byte.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      to_cp[b] = IsPrintableByte(b) ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

namespace {

CodepointClass LookUp(uint32_t cp) {
  const CodepointRun* end = kCodepointRuns + kCodepointRunCount;
  const CodepointRun* it = std::upper_bound(
      kCodepointRuns, end, cp, [](uint32_t c, const CodepointRun& run) { return c < run.first; });
  // Codepoints past U+10FFFF fall in the last run, which is unassigned (kOther).
  return static_cast<CodepointClass>((it - 1)->cls);
}

}  // namespace

CodepointClass ClassOf(uint32_t cp) {
  static const std::array<CodepointClass, 128> ascii = [] {
    std::array<CodepointClass, 128> a{};
    for (uint32_t c = 0; c < 128; ++c) a[c] = LookUp(c);
    return a;
  }();
  return cp < 0x80 ? ascii[cp] : LookUp(cp);
}

uint32_t ToLower(uint32_t cp) {
  const CodepointPair* end = kLowercase + kLowercaseCount;
  const CodepointPair* it = std::lower_bound(
      kLowercase, end, cp, [](const CodepointPair& p, uint32_t c) { return p.from < c; });
  return it != end && it->from == cp ? it->to : cp;
}

uint32_t NfdFirst(uint32_t cp) {
  const NfdRun* end = kNfdRuns + kNfdRunCount;
  const NfdRun* it =
      std::upper_bound(kNfdRuns, end, cp, [](uint32_t c, const NfdRun& r) { return c < r.first; });
  if (it == kNfdRuns) return cp;
  --it;
  return cp <= it->last ? it->nfd : cp;
}

uint32_t NextCodepoint(std::string_view text, size_t* pos) {
  const size_t i = *pos;
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const auto is_cont = [&](size_t k) { return k < text.size() && (byte(k) & 0xC0) == 0x80; };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0 && is_cont(i + 1)) {
    *pos = i + 2;
    return ((b0 & 0x1Fu) << 6) | (byte(i + 1) & 0x3Fu);
  }
  if ((b0 & 0xF0) == 0xE0 && is_cont(i + 1) && is_cont(i + 2)) {
    *pos = i + 3;
    return ((b0 & 0x0Fu) << 12) | ((byte(i + 1) & 0x3Fu) << 6) | (byte(i + 2) & 0x3Fu);
  }
  if ((b0 & 0xF8) == 0xF0 && is_cont(i + 1) && is_cont(i + 2) && is_cont(i + 3)) {
    *pos = i + 4;
    return ((b0 & 0x07u) << 18) | ((byte(i + 1) & 0x3Fu) << 12) | ((byte(i + 2) & 0x3Fu) << 6) |
           (byte(i + 3) & 0x3Fu);
  }
  *pos = i + 1;
  return 0xFFFD;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t ByteToCodepoint(uint8_t b) { return Alphabet().to_cp[b]; }

int CodepointToByte(uint32_t cp) {
  return cp < Alphabet().to_byte.size() ? Alphabet().to_byte[cp] : -1;
}

}  // namespace ctxpar::tokenizer_internal
