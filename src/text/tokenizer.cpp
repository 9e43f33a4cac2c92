#include "ctxpar/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <span>
#include <utility>

#include "text/tokenizer_model.h"

namespace ctxpar {

namespace ti = tokenizer_internal;

namespace {

// The texts llama.cpp ends generation on besides EOS (llama-vocab.cpp, special_eog_ids).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",      "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<end_of_utterance>",
};

// The texts whose tokens llama.cpp makes CONTROL whatever their type (llama_vocab::load finds
// end-of-turn and fill-in-the-middle tokens by their text; the list of llama-cpp-python
// 0.3.36's llama.cpp). Gemma 3's "</s>" is one: typed as user text it is text, not a token.
// Space-separated.
constexpr std::string_view kControlByText =
    "</s> <EOT> <MID> <PAD> <PRE> <REPO> <SUF> <end_of_turn> <end_of_utterance> <eos> "
    "<fim-middle> <fim-pad> <fim-prefix> <fim-repo> <fim-suffix> <fim_middle> <fim_pad> "
    "<fim_prefix> <fim_suffix> <reponame> <turn|> <|calls|> <|call|> <|code_middle|> "
    "<|code_prefix|> <|code_suffix|> <|end_of_text|> <|endoftext|> <|end|> <|eom_id|> "
    "<|eot_id|> <|file_sep|> <|fim_middle|> <|fim_pad|> <|fim_prefix|> <|fim_repo|> "
    "<|fim_suffix|> <|flush|> <|im_end|> <|middle|> <|prefix|> <|repo_name|> <|return|> "
    "<|suffix|> <|tool_response> [EOS] [EOT] [PAD] [e~[ _<EOT> "
    "<\uFF5Cend\u2581of\u2581sentence\uFF5C> <\uFF5Cfim\u2581begin\uFF5C> "
    "<\uFF5Cfim\u2581end\uFF5C> <\uFF5Cfim\u2581hole\uFF5C> \u2581<MID> \u2581<PRE> "
    "\u2581<SUF>";
// And those it makes USER_DEFINED (gpt-oss's markers, always rendered).
constexpr std::string_view kUserDefinedByText[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                   "<|constrain|>"};

// llama.cpp's corrections of token types by text, applied to `types`.
void CorrectTypesByText(const tokenizer_internal::Vocab& vocab, std::vector<TokenType>* types) {
  for (size_t begin = 0; begin < kControlByText.size();) {
    const size_t end = std::min(kControlByText.find(' ', begin), kControlByText.size());
    const int32_t id = vocab.Find(kControlByText.substr(begin, end - begin));
    if (id >= 0 && (*types)[id] != TokenType::kUnknown) (*types)[id] = TokenType::kControl;
    begin = end + 1;
  }
  for (std::string_view text : kUserDefinedByText) {
    const int32_t id = vocab.Find(text);
    if (id >= 0) (*types)[id] = TokenType::kUserDefined;
  }
  // gpt-oss and solar-open end turns with <|return|> / <|call|> or <|calls|> / <|flush|>, so
  // their <|end|> is markup; Gemma 4's "</s>" is text beside <|tool_response>.
  const auto has = [&](std::string_view t) { return vocab.Find(t) >= 0; };
  const int32_t end = vocab.Find("<|end|>");
  if (end >= 0 && has("<|call|>") && has("<|return|>")) (*types)[end] = TokenType::kUserDefined;
  if (end >= 0 && has("<|calls|>") && has("<|flush|>")) (*types)[end] = TokenType::kUserDefined;
  const int32_t s = vocab.Find("</s>");
  if (s >= 0 && has("<|tool_response>")) (*types)[s] = TokenType::kNormal;
}

// The special tokens' texts in a trie, to learn which of them occur in a text at all: the
// partition then visits only those (Gemma has 6414 special tokens; a text holds a few).
class SpecialTrie {
 public:
  void Insert(std::string_view text, int32_t rank) {
    int32_t node = 0;
    for (char c : text) {
      auto& children = nodes_[node].children;
      const auto b = static_cast<uint8_t>(c);
      auto it = std::lower_bound(children.begin(), children.end(), std::pair{b, int32_t{0}});
      if (it == children.end() || it->first != b) {
        it = children.insert(it, {b, static_cast<int32_t>(nodes_.size())});
        nodes_.emplace_back();
      }
      node = it->second;
    }
    nodes_[node].rank = rank;
  }

  // The ranks of the texts that occur in `text`, ascending, without repeats.
  std::vector<int32_t> Find(std::string_view text) const {
    std::vector<int32_t> ranks;
    for (size_t begin = 0; begin < text.size(); ++begin) {
      int32_t node = 0;
      for (size_t i = begin; i < text.size(); ++i) {
        const auto& children = nodes_[node].children;
        const auto b = static_cast<uint8_t>(text[i]);
        const auto it =
            std::lower_bound(children.begin(), children.end(), std::pair{b, int32_t{0}});
        if (it == children.end() || it->first != b) break;
        node = it->second;
        if (nodes_[node].rank >= 0) ranks.push_back(nodes_[node].rank);
      }
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // by byte
    int32_t rank = -1;
  };
  std::vector<Node> nodes_{1};
};

constexpr uint8_t kLstrip = 1;
constexpr uint8_t kRstrip = 2;

// llama.cpp sets these by the model's name (llama_vocab::load): Phi-3's special tokens take the
// whitespace after them, except <unk>, <s> and <|endoftext|>; ModernBERT's [MASK] the whitespace
// before it.
std::vector<uint8_t> StripAttributes(const tokenizer_internal::Vocab& vocab,
                                     std::string_view name) {
  std::vector<uint8_t> strip(vocab.tokens.size(), 0);
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto set = [&](std::string_view text, uint8_t bit, bool on) {
    const int32_t id = vocab.Find(text);
    if (id >= 0) strip[id] = on ? (strip[id] | bit) : (strip[id] & ~bit);
  };
  if (lower.find("phi-3") != std::string::npos || lower.find("phi3") != std::string::npos) {
    for (size_t i = 0; i < strip.size(); ++i) {
      const TokenType t = vocab.types[i];
      if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) {
        strip[i] |= kRstrip;
      }
    }
    set("</s>", kRstrip, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) set(text, kRstrip, false);
  } else if (lower.find("modern-bert") != std::string::npos) {
    set("[MASK]", kLstrip, true);
  }
  return strip;
}

}  // namespace

struct Tokenizer::Impl {
  std::string model_name;
  ti::Vocab vocab;
  std::vector<std::string> pieces;  // the bytes each normal/user-defined/byte token stands for
  std::unique_ptr<ti::TextModel> model;
  std::vector<int32_t> specials;  // CONTROL, UNKNOWN, USER_DEFINED ids, longest text first
  // Per token: 1 when the whitespace before it (lstrip), 2 when the whitespace after it (rstrip)
  // goes with it when it is cut out of a text (llama.cpp's token attributes).
  std::vector<uint8_t> strip;
  SpecialTrie special_trie;  // their texts; a text's rank is its index in `specials`
  std::vector<bool> end_of_generation;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  std::string chat_template;

  // Encode with CONTROL and UNKNOWN tokens read only inside `special_ranges` ([begin, end)
  // byte offsets, ordered and disjoint).
  std::vector<int32_t> Encode(std::string_view text,
                              std::span<const std::pair<size_t, size_t>> special_ranges,
                              bool add_special) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::Create(TokenizerSpec spec) {
  if (spec.model != "gpt2" && spec.model != "llama" && spec.model != "gemma4" &&
      spec.model != "bert") {
    return Unimplemented(fmt::format(
        "tokenizer.ggml.model = '{}' is not supported: byte-level BPE ('gpt2'), SentencePiece "
        "('llama'), Gemma 4's BPE ('gemma4') and WordPiece ('bert') are",
        spec.model));
  }
  auto impl = std::make_unique<Impl>();
  const auto n = static_cast<int64_t>(spec.tokens.size());
  if (n == 0 || n > INT32_MAX) {
    return InvalidArgument(fmt::format(
        "tokenizer.ggml.tokens has {} entries: it must have between 1 and {}", n, INT32_MAX));
  }
  if (!spec.token_types.empty() && static_cast<int64_t>(spec.token_types.size()) != n) {
    return InvalidArgument(
        fmt::format("tokenizer.ggml.token_type has {} entries: it must have one per token ({})",
                    spec.token_types.size(), n));
  }
  for (const auto& [name, id] :
       {std::pair{"bos_token_id", spec.bos_id}, std::pair{"eos_token_id", spec.eos_id}}) {
    if (id < -1 || id >= n) {
      return InvalidArgument(fmt::format(
          "tokenizer.ggml.{} = {}: it must be a token id in [0, {}) or absent", name, id, n));
    }
  }
  ti::Vocab& vocab = impl->vocab;
  vocab.types.resize(n, TokenType::kNormal);
  for (int64_t i = 0; i < static_cast<int64_t>(spec.token_types.size()); ++i) {
    const int32_t t = spec.token_types[i];
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      return InvalidArgument(
          fmt::format("tokenizer.ggml.token_type[{}] = {}: it must be in [0, 6]", i, t));
    }
    vocab.types[i] = static_cast<TokenType>(t);
  }
  vocab.token_to_id.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    auto [it, inserted] = vocab.token_to_id.emplace(spec.tokens[i], i);
    if (!inserted) {
      return InvalidArgument(fmt::format(
          "tokenizer.ggml.tokens[{}] = '{}' repeats tokens[{}]: token texts must be unique", i,
          spec.tokens[i], it->second));
    }
  }
  vocab.tokens = std::move(spec.tokens);
  CorrectTypesByText(vocab, &vocab.types);
  CTXPAR_ASSIGN_OR_RETURN(ti::TextModelParts parts,
                          spec.model == "llama"  ? ti::MakeSpmModel(spec, vocab)
                          : spec.model == "bert" ? ti::MakeWpmModel(spec, vocab)
                                                 : ti::MakeBpeModel(spec, vocab));
  impl->model = std::move(parts.model);
  impl->pieces = std::move(parts.normal_pieces);
  for (int32_t i = 0; i < n; ++i) {
    const std::string& text = vocab.tokens[i];
    switch (vocab.types[i]) {
      case TokenType::kUserDefined:
        impl->pieces[i] = text;
        break;
      case TokenType::kByte: {
        unsigned value = 0;
        if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>' ||
            std::sscanf(text.c_str() + 3, "%2x", &value) != 1) {
          return InvalidArgument(fmt::format(
              "tokenizer.ggml.tokens[{}] = '{}' has type BYTE: it must read <0xHH>", i, text));
        }
        impl->pieces[i] = std::string(1, static_cast<char>(value));
        break;
      }
      default:
        break;
    }
    const TokenType t = vocab.types[i];
    if ((t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) &&
        !text.empty()) {
      impl->specials.push_back(i);
    }
  }
  std::stable_sort(impl->specials.begin(), impl->specials.end(), [&](int32_t a, int32_t b) {
    return vocab.tokens[a].size() > vocab.tokens[b].size();
  });
  for (size_t rank = 0; rank < impl->specials.size(); ++rank) {
    impl->special_trie.Insert(vocab.tokens[impl->specials[rank]], static_cast<int32_t>(rank));
  }
  impl->end_of_generation.assign(n, false);
  if (spec.eos_id >= 0) impl->end_of_generation[spec.eos_id] = true;
  for (std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = vocab.Find(text);
    if (id >= 0) impl->end_of_generation[id] = true;
  }
  impl->model_name = std::move(spec.model);
  impl->bos_id = spec.bos_id;
  impl->eos_id = spec.eos_id;
  impl->add_bos = spec.add_bos;
  impl->add_eos = spec.add_eos;
  impl->add_space_prefix = spec.add_space_prefix;
  impl->chat_template = std::move(spec.chat_template);
  impl->strip = StripAttributes(vocab, spec.name);
  if (impl->add_bos && impl->bos_id < 0) {
    return InvalidArgument(
        "tokenizer.ggml.add_bos_token = true but tokenizer.ggml.bos_token_id is absent");
  }
  if (impl->add_eos && impl->eos_id < 0) {
    return InvalidArgument(
        "tokenizer.ggml.add_eos_token = true but tokenizer.ggml.eos_token_id is absent");
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  const std::pair<size_t, size_t> all{0, text.size()};
  return impl_->Encode(
      text,
      options.parse_special ? std::span(&all, 1) : std::span<const std::pair<size_t, size_t>>(),
      options.add_special);
}

std::vector<int32_t> Tokenizer::Encode(std::span<const TextSegment> segments,
                                       bool add_special) const {
  std::string text;
  std::vector<std::pair<size_t, size_t>> parsed;
  for (const TextSegment& s : segments) {
    if (s.parse_special && !s.text.empty()) {
      // Adjacent parsed segments form one range: a token may span them.
      if (!parsed.empty() && parsed.back().second == text.size()) {
        parsed.back().second += s.text.size();
      } else {
        parsed.emplace_back(text.size(), text.size() + s.text.size());
      }
    }
    text += s.text;
  }
  return impl_->Encode(text, parsed, add_special);
}

std::vector<int32_t> Tokenizer::Impl::Encode(
    std::string_view text, std::span<const std::pair<size_t, size_t>> special_ranges,
    bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos) out.push_back(bos_id);

  // Whether [begin, end) lies inside one of the (ordered, disjoint) ranges.
  const auto in_special_range = [&](size_t begin, size_t end) {
    auto it = std::upper_bound(special_ranges.begin(), special_ranges.end(), begin,
                               [](size_t pos, const auto& r) { return pos < r.second; });
    return it != special_ranges.end() && it->first <= begin && end <= it->second;
  };
  // Fragments of the text still to tokenize, or special tokens already cut out (id >= 0). Each
  // special token in turn (longest first) splits the text fragments, as llama.cpp partitions.
  struct Fragment {
    int32_t id;
    size_t begin, end;
  };
  // An empty text is no fragment (a SentencePiece space prefix needs some text).
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t rank : special_trie.Find(text)) {
    const int32_t sid = specials[rank];
    const bool user_defined = vocab.types[sid] == TokenType::kUserDefined;
    if (!user_defined && special_ranges.empty()) continue;
    const std::string& st = vocab.tokens[sid];
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      for (size_t from = f.begin;;) {
        const size_t hit = text.substr(0, f.end).find(st, from);
        if (hit == std::string_view::npos) break;
        if (!user_defined && !in_special_range(hit, hit + st.size())) {
          from = hit + 1;  // the user's text: these characters stay text
          continue;
        }
        // C isspace, as llama.cpp trims.
        const auto space = [&](size_t i) {
          return text[i] == ' ' || (text[i] >= 9 && text[i] <= 13);
        };
        size_t left_end = hit;
        if (strip[sid] & kLstrip) {
          while (left_end > pos && space(left_end - 1)) --left_end;
        }
        if (left_end > pos) next.push_back({-1, pos, left_end});
        next.push_back({sid, hit, hit + st.size()});
        pos = from = hit + st.size();
        if (strip[sid] & kRstrip) {
          while (pos < f.end && space(pos)) ++pos;
          from = pos;
        }
      }
      if (pos < f.end) next.push_back({-1, pos, f.end});
    }
    fragments.swap(next);
  }
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else {
      model->Encode(text.substr(f.begin, f.end - f.begin), after_special, &out);
    }
    after_special = f.id >= 0;
  }
  if (add_special && add_eos) out.push_back(eos_id);
  return out;
}

Expected<std::string> Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size()) {
    return OutOfRange(
        fmt::format("token id {}: it must be in [0, {}) (the vocabulary size)", id, vocab_size()));
  }
  const TokenType t = impl_->vocab.types[id];
  if (t == TokenType::kControl || t == TokenType::kUnknown) {
    return render_special ? impl_->vocab.tokens[id] : std::string();
  }
  return impl_->pieces[id];
}

Expected<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    CTXPAR_ASSIGN_OR_RETURN(std::string piece, TokenToPiece(ids[i], render_special));
    // The space the encoder put in front of the text (llama_detokenize's lstrip).
    if (i == 0 && impl_->add_space_prefix && piece.starts_with(' ')) piece.erase(0, 1);
    out += piece;
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
const std::string& Tokenizer::model() const { return impl_->model_name; }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
TokenType Tokenizer::token_type(int32_t id) const { return impl_->vocab.types[id]; }
const std::string& Tokenizer::token_text(int32_t id) const { return impl_->vocab.tokens[id]; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

int32_t Tokenizer::TokenId(std::string_view text) const { return impl_->vocab.Find(text); }

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->end_of_generation[id];
}

}  // namespace ctxpar
