// WordPiece (tokenizer.ggml.model "bert"), as llama.cpp's llm_tokenizer_wpm_session: BERT's
// normalizer splits the text into words, and each word, with a U+2581 in front, is cut into the
// longest tokens from its start.
#include <fmt/format.h>

#include <algorithm>

#include "text/tokenizer_model.h"
#include "text/tokenizer_unicode.h"

namespace ctxpar::tokenizer_internal {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581: llama.cpp's converter writes
                                                     // "##x" as "x" and "x" as U+2581 "x"

// BERT's CJK ideograph ranges, as llama.cpp writes them (0x2B920, not 0x2B820, as HF's Rust code).
bool IsChineseChar(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

class WpmModel final : public TextModel {
 public:
  explicit WpmModel(const Vocab& vocab) : vocab_(vocab) {}

  bool lowercase = true;
  bool strip_accents = true;
  int32_t unk_id = -1;
  size_t max_token_size = 0;

  void Encode(std::string_view text, bool after_special, std::vector<int32_t>* out) const override;

 private:
  std::vector<std::string> Words(std::string_view text) const;
  const Vocab& vocab_;
};

// Whitespace separates words; NUL, U+FFFD and control characters go (and marks, when accents
// are stripped); punctuation, ASCII symbols and CJK ideographs are words of their own.
std::vector<std::string> WpmModel::Words(std::string_view text) const {
  std::vector<std::string> words(1);
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp = NextCodepoint(text, &pos);
    if (strip_accents) cp = NfdFirst(cp);
    const CodepointClass cls = ClassOf(cp);
    if (cls == kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || cls == kControl || (strip_accents && cls == kMark)) continue;
    std::string s;
    AppendUtf8(lowercase ? ToLower(cp) : cp, &s);
    if (cls == kPunctuation || (cp < 0x7F && cls == kSymbol) || IsChineseChar(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void WpmModel::Encode(std::string_view text, bool /*after_special*/,
                      std::vector<int32_t>* out) const {
  for (const std::string& word : Words(text)) {
    const std::string w = std::string(kSpace) + word;
    const size_t n = w.size();
    const size_t start = out->size();
    // Longest token first, byte by byte (a cut may fall inside a character, as in llama.cpp);
    // a word with a position no token starts at is the unknown token, whole.
    for (size_t i = 0; i < n;) {
      size_t j = std::min(n, i + max_token_size + 1);
      for (; j > i; --j) {
        const int32_t id = vocab_.Find(std::string_view(w).substr(i, j - i));
        if (id >= 0) {
          out->push_back(id);
          break;
        }
      }
      if (j == i) {
        out->resize(start);
        break;
      }
      i = j;
    }
    if (out->size() == start) out->push_back(unk_id);
  }
}

}  // namespace

Expected<TextModelParts> MakeWpmModel(const TokenizerSpec& spec, const Vocab& vocab) {
  const size_t n = vocab.tokens.size();
  if (spec.unk_id < 0 || spec.unk_id >= static_cast<int64_t>(n)) {
    return InvalidArgument(fmt::format(
        "tokenizer.ggml.unknown_token_id = {}: a WordPiece vocabulary needs its unknown token, "
        "an id in [0, {})",
        spec.unk_id, n));
  }
  auto model = std::make_unique<WpmModel>(vocab);
  model->lowercase = spec.lowercase;
  model->strip_accents = spec.strip_accents;
  model->unk_id = spec.unk_id;
  for (const std::string& t : vocab.tokens) {
    model->max_token_size = std::max(model->max_token_size, t.size());
  }
  TextModelParts parts;
  parts.normal_pieces.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (vocab.types[i] == TokenType::kNormal) {
      parts.normal_pieces[i] = SpaceEscapedPiece(vocab.tokens[i]);
    }
  }
  parts.model = std::move(model);
  return parts;
}

}  // namespace ctxpar::tokenizer_internal
