// SentencePiece BPE with byte fallback (tokenizer.ggml.model "llama"), as llama.cpp's
// llm_tokenizer_spm_session: characters merge by token score, leftovers become byte tokens.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <queue>

#include "text/tokenizer_model.h"

namespace ctxpar::tokenizer_internal {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// The length a UTF-8 lead byte claims, from its high nibble, as llama.cpp's unicode_len_utf8:
// continuation bytes count 1, and the claim is not checked against the bytes that follow.
size_t ClaimedLength(uint8_t b) {
  constexpr std::array<uint8_t, 16> kLen = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

class SpmModel final : public TextModel {
 public:
  explicit SpmModel(const Vocab& vocab) : vocab_(vocab) {}

  std::vector<float> scores;
  std::array<int32_t, 256> byte_token{};  // -1: neither <0xXX> nor the byte itself is a token
  int32_t unk_id = -1;
  bool add_space_prefix = false;

  void Encode(std::string_view text, bool after_special, std::vector<int32_t>* out) const override;

 private:
  const Vocab& vocab_;
};

void SpmModel::Encode(std::string_view raw, bool after_special, std::vector<int32_t>* out) const {
  std::string text;
  text.reserve(raw.size() + raw.size() / 2 + 3);
  if (add_space_prefix && after_special) text.append(kSpace);
  for (char c : raw) {
    if (c == ' ') {
      text.append(kSpace);
    } else {
      text.push_back(c);
    }
  }
  // Symbols are spans of `text` in a linked list; a merged-away symbol has n == 0.
  struct Symbol {
    uint32_t offset, n;
    int32_t prev, next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(ClaimedLength(static_cast<uint8_t>(text[off])), text.size() - off);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(n), index - 1,
                       off + n == text.size() ? -1 : index + 1});
    off += n;
  }
  // Highest score first; among equal scores the leftmost. A candidate is stale when either
  // symbol has changed size since it was pushed (sizes only grow, so the sum tells).
  struct Bigram {
    float score;
    int32_t left, right;
    uint32_t size;
  };
  const auto lower = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view joined(text.data() + symbols[left].offset,
                                  symbols[left].n + symbols[right].n);
    const int32_t id = vocab_.Find(joined);
    if (id < 0) return;
    queue.push({scores[id], left, right, static_cast<uint32_t>(joined.size())});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  // Every merged symbol is a token; a symbol never merged may not be, and falls back to bytes.
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece(text.data() + symbols[i].offset, symbols[i].n);
    const int32_t id = vocab_.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte = byte_token[static_cast<uint8_t>(c)];
      if (byte >= 0) {
        out->push_back(byte);
      } else if (unk_id >= 0) {
        out->push_back(unk_id);
      }
    }
  }
}

}  // namespace

std::string SpaceEscapedPiece(std::string_view text) {
  std::string piece;
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kSpace.size(), kSpace) == 0) {
      piece.push_back(' ');
      pos += kSpace.size();
    } else {
      piece.push_back(text[pos++]);
    }
  }
  return piece;
}

Expected<TextModelParts> MakeSpmModel(const TokenizerSpec& spec, const Vocab& vocab) {
  const size_t n = vocab.tokens.size();
  // Scores decide the order of merges: without them (or with NaN, which compares false with
  // everything) the ids would be some order's, not the model's.
  if (spec.scores.size() != n) {
    return InvalidArgument(
        fmt::format("tokenizer.ggml.scores has {} entries: a SentencePiece vocabulary needs one "
                    "score per token ({})",
                    spec.scores.size(), n));
  }
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(spec.scores[i])) {
      return InvalidArgument(
          fmt::format("tokenizer.ggml.scores[{}] (token '{}') is NaN: scores must be numbers", i,
                      vocab.tokens[i]));
    }
  }
  if (spec.unk_id < -1 || spec.unk_id >= static_cast<int64_t>(n)) {
    return InvalidArgument(fmt::format(
        "tokenizer.ggml.unknown_token_id = {}: it must be a token id in [0, {}) or absent",
        spec.unk_id, n));
  }
  auto model = std::make_unique<SpmModel>(vocab);
  model->scores = spec.scores;
  model->unk_id = spec.unk_id;
  model->add_space_prefix = spec.add_space_prefix;
  // Byte fallback: <0xXX> (upper-case hex), else a token that is the byte itself, as llama.cpp's
  // byte_to_token.
  for (int b = 0; b < 256; ++b) {
    const int32_t hex = vocab.Find(fmt::format("<0x{:02X}>", b));
    model->byte_token[b] = hex >= 0 ? hex : vocab.Find(std::string(1, static_cast<char>(b)));
  }
  TextModelParts parts;
  parts.normal_pieces.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (vocab.types[i] != TokenType::kNormal) continue;
    parts.normal_pieces[i] = SpaceEscapedPiece(vocab.tokens[i]);
  }
  parts.model = std::move(model);
  return parts;
}

}  // namespace ctxpar::tokenizer_internal
