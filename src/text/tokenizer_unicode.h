// Unicode helpers of the tokenizer: codepoint classes for the pre-tokenizer, UTF-8 reading as
// llama.cpp reads it, and the GPT-2 byte-to-unicode alphabet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ctxpar::tokenizer_internal {

// A codepoint's class for the pre-tokenizer regexes and WordPiece: White_Space first, else its
// general category's first letter (L, N, P, S, M), kControl for Cc, Cf, Co and Cs, and kOther for
// unassigned codepoints.
enum CodepointClass : uint8_t {
  kOther = 0,
  kLetter = 1,
  kNumber = 2,
  kWhitespace = 3,
  kPunctuation = 4,
  kSymbol = 5,
  kMark = 6,
  kControl = 7,
};

struct CodepointRun {
  uint32_t first;
  uint8_t cls;
};
// Generated (tokenizer_unicode_table.cpp): runs in ascending order of first codepoint.
extern const CodepointRun kCodepointRuns[];
extern const int kCodepointRunCount;

struct CodepointPair {
  uint32_t from, to;
};
struct NfdRun {
  uint32_t first, last, nfd;
};
// Generated: simple lowercase mappings by codepoint; runs of codepoints whose NFD begins with
// `nfd`, in ascending order.
extern const CodepointPair kLowercase[];
extern const int kLowercaseCount;
extern const NfdRun kNfdRuns[];
extern const int kNfdRunCount;

CodepointClass ClassOf(uint32_t cp);
// The simple lowercase mapping (llama.cpp's unicode_tolower); cp itself when it has none.
uint32_t ToLower(uint32_t cp);
// The first codepoint of cp's NFD (llama.cpp's unicode_cpts_normalize_nfd, for WordPiece).
uint32_t NfdFirst(uint32_t cp);

// Reads one codepoint at text[*pos] and advances *pos. Mirrors llama.cpp's reader: a lead byte
// with its continuation bytes gives the codepoint (no overlong or surrogate check); any other
// byte gives U+FFFD and advances by one.
uint32_t NextCodepoint(std::string_view text, size_t* pos);

void AppendUtf8(uint32_t cp, std::string* out);

// The GPT-2 byte-level alphabet: byte b <-> codepoint ByteToCodepoint(b).
uint32_t ByteToCodepoint(uint8_t b);
// The byte of a codepoint of the alphabet, or -1.
int CodepointToByte(uint32_t cp);

}  // namespace ctxpar::tokenizer_internal
