// The seam between what every tokenizer kind shares (tokenizer.cpp: the vocabulary, special
// tokens, BOS/EOS, decoding) and what each kind does alone: the encoding of plain text, and
// the bytes its NORMAL tokens stand for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ctxpar/status.h"
#include "ctxpar/tokenizer.h"

namespace ctxpar::tokenizer_internal {

// Hashes std::string and std::string_view alike, so that lookups need no copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The validated vocabulary, as the kinds read it.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  TokenIndex token_to_id;

  int32_t Find(std::string_view text) const {
    const auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
};

class TextModel {
 public:
  virtual ~TextModel() = default;
  // Appends the ids of `text`, a piece of the input with no special token cut out of it.
  // `after_special`: the piece begins the input or follows a special token.
  virtual void Encode(std::string_view text, bool after_special,
                      std::vector<int32_t>* out) const = 0;
};

// A kind's model and the bytes of each NORMAL token (the other entries of `pieces` are left as
// they are). `vocab` must outlive the model.
struct TextModelParts {
  std::unique_ptr<TextModel> model;
  std::vector<std::string> normal_pieces;  // one per token; used for NORMAL tokens only
};
// "gpt2" and "gemma4"; "llama"; "bert".
Expected<TextModelParts> MakeBpeModel(const TokenizerSpec& spec, const Vocab& vocab);
Expected<TextModelParts> MakeSpmModel(const TokenizerSpec& spec, const Vocab& vocab);
Expected<TextModelParts> MakeWpmModel(const TokenizerSpec& spec, const Vocab& vocab);

// Whether llama.cpp adds BOS for a BPE model whose file has no tokenizer.ggml.add_bos_token
// (Llama 3's pre-tokenizer, Gemma 4).
bool BpeAddsBosByDefault(std::string_view model, std::string_view pre);

// A SentencePiece-style token's bytes: U+2581 is a space.
std::string SpaceEscapedPiece(std::string_view text);

}  // namespace ctxpar::tokenizer_internal
