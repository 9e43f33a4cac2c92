// The pre-tokenizer regexes of llama.cpp (src/llama-vocab.cpp, one list per
// tokenizer.ggml.pre), matched over codepoints as llama.cpp matches them.
//
// llama.cpp runs each regex with std::regex (ECMAScript: the first alternative that leads to a
// match wins, quantifiers are greedy and backtrack), over the text with every codepoint above
// U+007F collapsed to a byte that stands for its class (whitespace, letter, number, punctuation,
// symbol, mark, other), or over the codepoints themselves when the regex names no class; a few
// regexes have hand-written equivalents (unicode.cpp). A backtracking matcher over codepoints
// whose \p{..} and \s test the class gives the same matches for all of them: a class is the
// collapsed byte's class, and a literal or range outside ASCII compares codepoints.
//
// Supported syntax: literals (UTF-8), escapes \r \n \t \s \S \p{L} \p{N} \p{P} \p{S} \p{M}
// (\p{Lu}, \p{Ll}, \p{Lt}, \p{Lm}, \p{Lo} are \p{L}, as llama.cpp collapses them) and escaped
// punctuation, bracket classes with ranges and negation, groups (?:..) and (..), lookaheads
// (?=..) and (?!..), the quantifiers ? * + {n} {n,m} (greedy), alternation and $.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "ctxpar/status.h"
#include "text/tokenizer_unicode.h"

namespace ctxpar::tokenizer_internal {

class CodepointRegex {
 public:
  static Expected<CodepointRegex> Compile(std::string_view pattern);

  // Splits cps[begin, end) as llama.cpp's unicode_regex_split does with one regex: every match
  // (leftmost first, then after its end) is a word, and so is every run of text between
  // matches. The regex sees only [begin, end): $ and lookaheads end there. Appends the end of
  // each word to *word_ends.
  void Split(const std::vector<uint32_t>& cps, const std::vector<CodepointClass>& classes,
             size_t begin, size_t end, std::vector<size_t>* word_ends) const;

  struct CharClass {
    bool negate = false;
    uint8_t class_bits = 0;  // 1 << CodepointClass for each \p{..} or \s
    bool not_space = false;  // \S
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
  };
  enum class Op : uint8_t { kChar, kSplit, kJump, kLookahead, kEnd, kMatch };
  struct Inst {
    Op op;
    bool negate = false;  // kLookahead: (?!..)
    int32_t x = 0;        // kChar: class index; kSplit: preferred target; kJump, kLookahead: target
    int32_t y = 0;        // kSplit: the other target
  };

 private:
  // The length of the match starting at `pos`, or -1.
  int64_t MatchAt(int32_t pc, const std::vector<uint32_t>& cps,
                  const std::vector<CodepointClass>& classes, size_t pos, size_t end) const;

  std::vector<CharClass> classes_;
  std::vector<Inst> program_;
};

}  // namespace ctxpar::tokenizer_internal
