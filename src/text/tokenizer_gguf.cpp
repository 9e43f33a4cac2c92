// Tokenizer::FromGguf: the tokenizer.* metadata of a GGUF file as a TokenizerSpec.
#include <fmt/format.h>

#include <tuple>

#include "ctxpar/error_catalog.h"
#include "ctxpar/gguf.h"
#include "ctxpar/gguf_hparams.h"
#include "ctxpar/tokenizer.h"
#include "text/tokenizer_model.h"

namespace ctxpar {
namespace {

// An optional key: its value, `fallback` when absent, or the lookup's error (a wrong type).
template <typename T, typename Get>
Expected<T> Optional(const GgufFile& file, std::string_view key, T fallback, Get get) {
  if (file.Find(key) == nullptr) return fallback;
  return get(key);
}

}  // namespace

Expected<Tokenizer> Tokenizer::FromGguf(const GgufFile& file) {
  TokenizerSpec spec;
  CTXPAR_ASSIGN_OR_RETURN(spec.model, file.GetString("tokenizer.ggml.model"));
  // Files older than the key use llama.cpp's "default" pre-tokenizer, which Create names.
  CTXPAR_ASSIGN_OR_RETURN(
      spec.pre, Optional<std::string>(file, "tokenizer.ggml.pre", "default",
                                      [&](std::string_view k) { return file.GetString(k); }));
  CTXPAR_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                          file.GetArrayRef<std::string>("tokenizer.ggml.tokens"));
  spec.tokens = *tokens;
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    CTXPAR_ASSIGN_OR_RETURN(spec.token_types, file.GetArray<int32_t>("tokenizer.ggml.token_type"));
  }
  if (file.Find("tokenizer.ggml.merges") != nullptr) {
    CTXPAR_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                            file.GetArrayRef<std::string>("tokenizer.ggml.merges"));
    spec.merges = *merges;
  }
  if (file.Find("tokenizer.ggml.scores") != nullptr) {
    CTXPAR_ASSIGN_OR_RETURN(spec.scores, file.GetArray<float>("tokenizer.ggml.scores"));
  }
  // llama.cpp's defaults for a SentencePiece or WordPiece file that leaves the keys out
  // (llama_vocab::load). WordPiece ends with its separator ([SEP], llama.cpp's add_sep) where
  // the others end with EOS.
  const bool spm = spec.model == "llama";
  const bool wpm = spec.model == "bert";
  const auto get_int = [&](std::string_view k) { return file.GetInteger(k); };
  const auto get_bool = [&](std::string_view k) { return file.GetBool(k); };
  for (auto [key, dst, fallback] :
       {std::tuple{"tokenizer.ggml.bos_token_id", &spec.bos_id,
                   spm   ? 1
                   : wpm ? 101
                         : -1},
        std::tuple{wpm ? "tokenizer.ggml.seperator_token_id" : "tokenizer.ggml.eos_token_id",
                   &spec.eos_id,
                   spm   ? 2
                   : wpm ? 102
                         : -1},
        std::tuple{"tokenizer.ggml.unknown_token_id", &spec.unk_id,
                   spm   ? 0
                   : wpm ? 100
                         : -1}}) {
    CTXPAR_ASSIGN_OR_RETURN(int64_t id, Optional<int64_t>(file, key, fallback, get_int));
    if (id < -1 || id > INT32_MAX) {
      return HparamError(file, key, id, "it must be a token id");
    }
    *dst = static_cast<int32_t>(id);
  }
  const bool bos_by_default =
      spm || wpm || tokenizer_internal::BpeAddsBosByDefault(spec.model, spec.pre);
  CTXPAR_ASSIGN_OR_RETURN(
      spec.add_bos, Optional<bool>(file, "tokenizer.ggml.add_bos_token", bos_by_default, get_bool));
  // llama.cpp adds BOS for Gemma 4 even where the file says not to.
  if (spec.model == "gemma4") spec.add_bos = true;
  CTXPAR_ASSIGN_OR_RETURN(
      spec.add_eos,
      Optional<bool>(file, wpm ? "tokenizer.ggml.add_sep_token" : "tokenizer.ggml.add_eos_token",
                     wpm, get_bool));
  // BERT's normalizer: strip_accents follows lowercase unless the file says.
  CTXPAR_ASSIGN_OR_RETURN(
      spec.lowercase, Optional<bool>(file, "tokenizer.ggml.normalizer.lowercase", true, get_bool));
  CTXPAR_ASSIGN_OR_RETURN(
      spec.strip_accents,
      Optional<bool>(file, "tokenizer.ggml.normalizer.strip_accents", spec.lowercase, get_bool));
  CTXPAR_ASSIGN_OR_RETURN(spec.add_space_prefix,
                          Optional<bool>(file, "tokenizer.ggml.add_space_prefix", spm, get_bool));
  CTXPAR_ASSIGN_OR_RETURN(spec.chat_template, Optional<std::string>(file, "tokenizer.chat_template",
                                                                    "", [&](std::string_view k) {
                                                                      return file.GetString(k);
                                                                    }));
  CTXPAR_ASSIGN_OR_RETURN(
      spec.name, Optional<std::string>(file, "general.name", "",
                                       [&](std::string_view k) { return file.GetString(k); }));
  // A BPE file without merges would tokenize byte by byte (llama.cpp refuses it too).
  const bool bpe = spec.model == "gpt2" || spec.model == "gemma4";
  Expected<Tokenizer> tokenizer =
      bpe && spec.merges.empty()
          ? Expected<Tokenizer>(InvalidArgument(
                "tokenizer.ggml.merges is missing or empty: a BPE vocabulary needs its merges"))
          : Create(std::move(spec));
  if (!tokenizer.ok()) {
    const Status& s = tokenizer.status();
    return Status(
        s.code(),
        CatalogError("CTXPAR-GGUF-008", {{"file", PyRepr(file.path())}, {"detail", s.message()}})
            .message(),
        "CTXPAR-GGUF-008");
  }
  return tokenizer;
}

}  // namespace ctxpar
