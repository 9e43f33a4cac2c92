// Byte-level BPE (tokenizer.ggml.model "gpt2"): pre-tokenizer, byte alphabet and merges, as
// llama.cpp's llm_tokenizer_bpe_session.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <queue>

#include "text/tokenizer_model.h"
#include "text/tokenizer_unicode.h"

namespace ctxpar::tokenizer_internal {
namespace {

// Pre-tokenizers that split each digit alone before the GPT-2 regex (llama.cpp groups them).
constexpr std::string_view kDigitSplitPre[] = {"smollm",    "starcoder", "refact", "command-r",
                                               "codeshell", "exaone",    "minerva"};

struct Merge {
  int32_t rank;
  int32_t result;
};

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string Utf8Of(uint32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

// A codepoint of the text and its pre-tokenizer class.
struct Cp {
  uint32_t cp;
  CodepointClass cls;
};

class BpeModel final : public TextModel {
 public:
  std::unordered_map<uint64_t, Merge> merges;
  std::array<int32_t, 256> byte_token{};
  bool split_digits = false;

  void Encode(std::string_view text, bool after_special, std::vector<int32_t>* out) const override;

 private:
  void SplitGpt2(const std::vector<Cp>& cps, size_t begin, size_t end,
                 std::vector<size_t>* word_ends) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
};

void BpeModel::Encode(std::string_view text, bool /*after_special*/,
                      std::vector<int32_t>* out) const {
  // The text as codepoints; words are built from their UTF-8, so invalid input bytes become
  // U+FFFD as in llama.cpp.
  std::vector<Cp> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = NextCodepoint(text, &pos);
    cps.push_back({cp, ClassOf(cp)});
  }
  std::vector<size_t> word_ends;  // codepoint index where each word ends
  size_t begin = 0;
  while (begin < cps.size()) {
    size_t end = begin + 1;
    if (split_digits) {
      // "\p{N}": each number alone; the runs between them are split by the GPT-2 regex.
      if (cps[begin].cls != kNumber) {
        while (end < cps.size() && cps[end].cls != kNumber) ++end;
      }
    } else {
      end = cps.size();
    }
    SplitGpt2(cps, begin, end, &word_ends);
    begin = end;
  }
  std::string word;
  size_t start = 0;
  for (size_t word_end : word_ends) {
    word.clear();
    for (size_t i = start; i < word_end; ++i) AppendUtf8(cps[i].cp, &word);
    EncodeWord(word, out);
    start = word_end;
  }
}

// The GPT-2 regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ on
// cps[begin, end), matching as llama.cpp's unicode_regex_split_custom_gpt2 does: nothing outside
// the range is seen, so the lookahead treats the range end as the end of the text.
void BpeModel::SplitGpt2(const std::vector<Cp>& cps, size_t begin, size_t end,
                         std::vector<size_t>* word_ends) const {
  constexpr uint32_t kNone = 0xFFFFFFFF;
  const auto cp_at = [&](size_t i) { return i < end ? cps[i].cp : kNone; };
  // Past the end there is no class: neither letter, number, whitespace nor other.
  constexpr int kEnd = -1;
  const auto cls_at = [&](size_t i) { return i < end ? static_cast<int>(cps[i].cls) : kEnd; };
  size_t pos = begin;
  while (pos < end) {
    const uint32_t cp = cps[pos].cp;
    if (cp == '\'' && pos + 1 < end) {
      const uint32_t c1 = cp_at(pos + 1);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        pos += 2;
        word_ends->push_back(pos);
        continue;
      }
      if (pos + 2 < end) {
        const uint32_t c2 = cp_at(pos + 2);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          pos += 3;
          word_ends->push_back(pos);
          continue;
        }
      }
    }
    const int cls = cp == ' ' ? cls_at(pos + 1) : cls_at(pos);
    if (cls == kLetter || cls == kNumber || cls == kOther) {
      pos += (cp == ' ');
      while (cls_at(pos) == cls) ++pos;
      word_ends->push_back(pos);
      continue;
    }
    size_t spaces = 0;
    while (cls_at(pos + spaces) == kWhitespace) ++spaces;
    if (spaces > 1 && pos + spaces < end) {
      // \s+(?!\S): leave the last whitespace to prefix the word that follows.
      pos += spaces - 1;
    } else if (spaces > 0) {
      pos += spaces;
    } else {
      ++pos;
    }
    word_ends->push_back(pos);
  }
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.size() == 1) {
    const int32_t id = byte_token[static_cast<uint8_t>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }
  // Symbols form a linked list over the word's bytes; a heap holds the candidate merges of
  // adjacent symbols by (rank, left position). A popped candidate whose two symbols changed
  // since it was pushed is stale and skipped.
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Symbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_token[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
                  i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    const auto it = merges.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == merges.end()) return;
    heap.push(
        {it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.result});
  };
  for (size_t i = 0; i + 1 < word.size(); ++i) {
    push(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
  }
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next != c.right || symbols[c.right].id != c.right_id) {
      continue;
    }
    left.id = c.result;
    left.next = symbols[c.right].next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    symbols[c.right].id = -1;
    push(left.prev, c.left);
    push(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) out->push_back(symbols[i].id);
  }
}

}  // namespace

Expected<TextModelParts> MakeBpeModel(const TokenizerSpec& spec, const Vocab& vocab) {
  auto model = std::make_unique<BpeModel>();
  const bool digit_split = std::find(std::begin(kDigitSplitPre), std::end(kDigitSplitPre),
                                     spec.pre) != std::end(kDigitSplitPre);
  if (!digit_split && spec.pre != "gpt2") {
    return Unimplemented(fmt::format(
        "tokenizer.ggml.pre = '{}' is not supported: use 'gpt2', 'smollm' or an alias of "
        "'smollm' (starcoder, refact, command-r, codeshell, exaone, minerva)",
        spec.pre));
  }
  model->split_digits = digit_split;
  // A byte without a token (SmolLM2 has none for 21 bytes that its training text never held)
  // can take part in no merge and is dropped from the output, as llama.cpp drops it.
  for (int b = 0; b < 256; ++b) {
    model->byte_token[b] = vocab.Find(Utf8Of(ByteToCodepoint(static_cast<uint8_t>(b))));
  }
  model->merges.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& m = spec.merges[r];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      return InvalidArgument(fmt::format(
          "tokenizer.ggml.merges[{}] = '{}': a merge must be two tokens separated by one space", r,
          m));
    }
    const std::string left = m.substr(0, space);
    const std::string right = m.substr(space + 1);
    const int32_t l = vocab.Find(left);
    const int32_t rt = vocab.Find(right);
    const int32_t res = vocab.Find(left + right);
    for (const auto& [part, id] : {std::pair{&left, l}, std::pair{&right, rt}}) {
      if (id < 0) {
        return InvalidArgument(fmt::format(
            "tokenizer.ggml.merges[{}] = '{}': '{}' is not in tokenizer.ggml.tokens", r, m, *part));
      }
    }
    if (res < 0) {
      return InvalidArgument(
          fmt::format("tokenizer.ggml.merges[{}] = '{}': the merged token '{}' is not in "
                      "tokenizer.ggml.tokens",
                      r, m, left + right));
    }
    // The first occurrence of a pair has the lowest rank and wins, as in llama.cpp.
    model->merges.emplace(PairKey(l, rt), Merge{static_cast<int32_t>(r), res});
  }
  TextModelParts parts;
  parts.normal_pieces.resize(vocab.tokens.size());
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    if (vocab.types[i] != TokenType::kNormal) continue;
    const std::string& text = vocab.tokens[i];
    std::string& bytes = parts.normal_pieces[i];
    for (size_t pos = 0; pos < text.size();) {
      const uint32_t cp = NextCodepoint(text, &pos);
      const int b = CodepointToByte(cp);
      if (b < 0) {
        return InvalidArgument(
            fmt::format("tokenizer.ggml.tokens[{}] = '{}' holds U+{:04X}, which is outside the "
                        "byte-level alphabet of normal tokens",
                        i, text, cp));
      }
      bytes.push_back(static_cast<char>(b));
    }
  }
  parts.model = std::move(model);
  return parts;
}

}  // namespace ctxpar::tokenizer_internal
