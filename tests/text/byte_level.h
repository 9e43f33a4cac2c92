// GPT-2's byte-level alphabet, which the tests build their small tokenizers from: each byte is
// one token, its text the byte itself when printable, else a code point from U+0100 upwards in
// byte order (the same mapping src/text applies; written out here as the tests' reference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ctxpar/tokenizer.h"

namespace ctxpar::testing {

inline bool PrintableByte(uint32_t b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

// cp < 0x10000.
inline std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The code point that stands for byte b.
inline uint32_t ByteCodePoint(uint32_t b) {
  if (PrintableByte(b)) return b;
  uint32_t cp = 0x100;
  for (uint32_t c = 0; c < b; ++c) cp += PrintableByte(c) ? 0 : 1;
  return cp;
}

// Appends the 256 byte-level tokens to `spec` (ids in GPT-2's byte-to-unicode order: the
// printable bytes, then U+0100 upwards) and sets its pre-tokenizer to gpt2.
inline void AddByteLevelTokens(TokenizerSpec& spec) {
  spec.pre = "gpt2";
  const std::size_t end = spec.tokens.size() + 256;
  for (uint32_t b = 0; b < 256; ++b) {
    if (PrintableByte(b)) spec.tokens.push_back(Utf8(b));
  }
  for (uint32_t cp = 0x100; spec.tokens.size() < end; ++cp) spec.tokens.push_back(Utf8(cp));
}

}  // namespace ctxpar::testing
