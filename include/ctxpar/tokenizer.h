// Tokenizer: the tokenizer a GGUF file carries, built from its vocabulary and matching llama.cpp
// token for token. Three kinds, named by tokenizer.ggml.model:
//   "gpt2"   byte-level BPE (SmolLM2, Llama 3, Qwen, DeepSeek, ...): a pre-tokenizer splits
//            words, merges join byte tokens;
//   "gemma4" Gemma 4's BPE over UTF-8 characters, spaces written U+2581, <0xXX> byte fallback;
//   "llama"  SentencePiece BPE with byte fallback (Gemma 3, Llama 2, Phi-3): scored pieces join
//            characters.
// All share everything but the encoding of plain text (docs/tokenizer.md).
//
// Encoding runs in two stages:
//   1. Special tokens (token type CONTROL, UNKNOWN or USER_DEFINED) are cut out of the text
//      first, longest first. CONTROL and UNKNOWN ones only when EncodeOptions::parse_special is
//      set; USER_DEFINED ones always (as llama.cpp and HF tokenizers do). Token types are those
//      of the file as llama.cpp corrects them by text: end-of-turn and fill-in-the-middle
//      markers ("</s>", "<eos>", "<|im_end|>", "<fim_prefix>", ...) are CONTROL.
//   2. Each piece of text between them is encoded by the kind's model:
//      gpt2: split into words by the regexes of the pre-tokenizer that tokenizer.ggml.pre names,
//        llama.cpp's list for that name (llama3 / llama-bpe, qwen2, qwen35, deepseek-llm,
//        deepseek-coder, deepseek-v3, falcon, gpt-2 / mpt, smollm / starcoder / refact /
//        command-r, default, and the names llama.cpp gives the same regexes), matched with
//        llama.cpp's semantics (src/text/tokenizer_regex.h). Unicode classes come from a table
//        generated from Unicode 15.1, llama.cpp's version
//        (tools/golden/llama_cpp/gen_unicode_table.py). Each word's UTF-8 bytes are mapped to
//        tokens of the GPT-2 byte-to-unicode alphabet and merged pairwise by merge rank (lowest
//        rank first, leftmost first among equal ranks); with Llama 3's pre-tokenizer a word that is
//        a token is that token (ignore_merges). A byte whose byte-level token is missing from the
//        vocabulary is dropped, as llama.cpp drops it (SmolLM2 lacks 21 of them). Invalid UTF-8 is
//        read as llama.cpp reads it: each byte that does not start a well-formed sequence becomes
//        U+FFFD.
//      gemma4: spaces become U+2581, the text is split into lines and runs of newlines, and the
//        UTF-8 characters of each merge by rank; a character left without a token is written as
//        its bytes' <0xXX> tokens.
//      llama: a space is put in front when add_space_prefix is set and the piece begins the
//        text or follows a special token; spaces become U+2581; the piece is cut into UTF-8
//        characters (a lead byte and the bytes its length claims, unchecked), and adjacent
//        symbols whose concatenation is a token merge, highest score first, leftmost first
//        among equal scores (llama.cpp's llm_tokenizer_spm). A symbol left that is no token is
//        written as its bytes' <0xXX> tokens (the unknown token where one is missing).
//
// Decoding maps each token back to its bytes (gpt2: the byte-level alphabet; llama, gemma4: U+2581
// is a space, <0xXX> is the byte XX). Those bytes need not end on a UTF-8 boundary (one character
// may span tokens): Decode returns them as they are; Utf8StreamDecoder turns a stream of tokens
// into text that only ever contains complete UTF-8 sequences.
//
// Token ids are int32_t in [0, vocab_size()). The ids BOS/EOS come from the metadata
// (tokenizer.ggml.bos_token_id / eos_token_id), -1 when absent.
//
// Thread safety: a Tokenizer is immutable after Create; all const methods may be called from
// several threads at once. A Utf8StreamDecoder is a value with state, one per stream.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar {

class GgufFile;

// The values of the GGUF key tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Everything the tokenizer needs, as plain values; the GGUF keys are named beside each field.
struct TokenizerSpec {
  std::string model = "gpt2";        // tokenizer.ggml.model: "gpt2", "gemma4", "llama", "bert"
  std::string pre = "smollm";        // tokenizer.ggml.pre (gpt2; the others ignore it)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens (gpt2: byte-level alphabet)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type; empty: all kNormal
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", rank = index (BPE)
  std::vector<float> scores;         // tokenizer.ggml.scores (llama: required)
  int32_t bos_id = -1;               // tokenizer.ggml.bos_token_id
  int32_t eos_id = -1;               // tokenizer.ggml.eos_token_id
  int32_t unk_id = -1;               // tokenizer.ggml.unknown_token_id (llama)
  bool add_bos = false;              // tokenizer.ggml.add_bos_token
  bool add_eos = false;              // tokenizer.ggml.add_eos_token
  bool add_space_prefix = false;     // tokenizer.ggml.add_space_prefix (llama)
  bool lowercase = true;             // tokenizer.ggml.normalizer.lowercase (bert)
  bool strip_accents = true;         // tokenizer.ggml.normalizer.strip_accents (bert)
  std::string chat_template;         // tokenizer.chat_template (Jinja source), may be empty
  // general.name: llama.cpp strips the whitespace after Phi-3's special tokens and before
  // ModernBERT's [MASK] when it cuts them out of a text, by the model's name.
  std::string name;
};

struct EncodeOptions {
  // Prepend BOS / append EOS when the metadata asks for it (add_bos / add_eos).
  bool add_special = true;
  // Read CONTROL tokens such as "<|im_start|>" written in the text as those tokens; otherwise
  // they are ordinary text.
  bool parse_special = false;
};

// A piece of text to encode, and whether CONTROL and UNKNOWN tokens written in it are read as
// those tokens. A chat template's own text is parsed for them; a user's text is not, so that a
// user who types "<|im_end|>" gets the tokens of those characters and cannot forge a turn.
struct TextSegment {
  std::string text;
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Validates the spec: model "gpt2", "gemma4", "llama" or "bert", ids in range, unique texts,
  // BYTE tokens that read <0xHH>; for gpt2 a supported pre-tokenizer; for gpt2 and gemma4
  // every merge "a b" with a, b and ab in the vocabulary; for llama one score per token, none
  // NaN.
  static Expected<Tokenizer> Create(TokenizerSpec spec);
  // Reads the tokenizer.* keys of a GGUF file and calls Create; keys a file leaves out take
  // llama.cpp's defaults for its model (llama: BOS 1, EOS 2, unknown 0, add_bos and
  // add_space_prefix true; add_bos true for Llama 3's pre-tokenizer and always for gemma4).
  // A BPE file without merges (the key missing or empty) is refused. Errors carry
  // CTXPAR-GGUF-008. The one constructor a model source needs, for every kind.
  static Expected<Tokenizer> FromGguf(const GgufFile& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;
  // The concatenation of the segments, encoded as one text (words may span segments, so the ids
  // are llama.cpp's for the whole text), except that a CONTROL or UNKNOWN token is read as that
  // token only where it lies wholly inside a segment with parse_special. BOS/EOS as for
  // add_special.
  std::vector<int32_t> Encode(std::span<const TextSegment> segments, bool add_special = true) const;

  // The bytes of the tokens, concatenated. CONTROL/UNKNOWN tokens give their text when
  // render_special is set and nothing otherwise; UNUSED and UNDEFINED ones nothing. With
  // add_space_prefix, the first token loses one leading space (llama.cpp's llama_detokenize).
  // An id outside [0, vocab_size()) is an error.
  Expected<std::string> Decode(std::span<const int32_t> ids, bool render_special = false) const;
  // The bytes of one token (see Decode, but no space is removed: a stream's pieces keep theirs);
  // id must be in range (llama.cpp's llama_token_to_piece with lstrip 0).
  Expected<std::string> TokenToPiece(int32_t id, bool render_special = false) const;

  int32_t vocab_size() const;
  // tokenizer.ggml.model: "gpt2", "gemma4" or "llama".
  const std::string& model() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  TokenType token_type(int32_t id) const;           // id must be in range
  const std::string& token_text(int32_t id) const;  // id must be in range; the vocabulary form
  // The id whose vocabulary text is exactly `text`, or -1.
  int32_t TokenId(std::string_view text) const;
  // EOS and the tokens llama.cpp also ends generation on ("<|im_end|>", "<|endoftext|>",
  // "<|eot_id|>", "<end_of_turn>", ...).
  bool IsEndOfGeneration(int32_t id) const;
  const std::string& chat_template() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns the bytes of a stream of tokens into text that never ends inside a UTF-8 sequence:
// bytes of an incomplete sequence are held back until the tokens that complete it arrive.
// A byte that can never start or continue a well-formed sequence becomes U+FFFD at once.
class Utf8StreamDecoder {
 public:
  explicit Utf8StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(&tokenizer), render_special_(render_special) {}

  // The complete UTF-8 that token `id` makes available (possibly empty).
  Expected<std::string> Push(int32_t id);
  // The same for raw bytes, for callers that decode pieces themselves.
  std::string PushBytes(std::string_view bytes);
  // The end of the stream: a held-back incomplete sequence becomes U+FFFD.
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace ctxpar
