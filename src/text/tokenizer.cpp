#include "ctxpar/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <queue>
#include <span>
#include <unordered_map>
#include <utility>

#include "text/tokenizer_unicode.h"

namespace ctxpar {

namespace ti = tokenizer_internal;

namespace {

// The texts llama.cpp ends generation on besides EOS (llama-vocab.cpp, special_eog_ids).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",      "<|endoftext|>",
    "<|eom_id|>", "<EOT>",      "<|end_of_text|>", "<end_of_utterance>",
};

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
  ti::AppendUtf8(cp, &s);
  return s;
}

// A codepoint of the text and its pre-tokenizer class.
struct Cp {
  uint32_t cp;
  ti::CodepointClass cls;
};

}  // namespace

struct Tokenizer::Impl {
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<std::string> pieces;  // the bytes each normal/user-defined/byte token stands for
  std::unordered_map<std::string, int32_t> token_to_id;
  std::unordered_map<uint64_t, Merge> merges;
  std::array<int32_t, 256> byte_token{};
  std::vector<int32_t> specials;  // CONTROL, UNKNOWN, USER_DEFINED ids, longest text first
  std::vector<bool> end_of_generation;
  bool split_digits = false;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;

  // Encode with CONTROL and UNKNOWN tokens read only inside `special_ranges` ([begin, end)
  // byte offsets, ordered and disjoint).
  std::vector<int32_t> Encode(std::string_view text,
                              std::span<const std::pair<size_t, size_t>> special_ranges,
                              bool add_special) const;
  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;
  void SplitGpt2(const std::vector<Cp>& cps, size_t begin, size_t end,
                 std::vector<size_t>* word_ends) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::Create(TokenizerSpec spec) {
  if (spec.model != "gpt2") {
    return Unimplemented(
        fmt::format("tokenizer.ggml.model = '{}' is not supported: only byte-level BPE ('gpt2') is",
                    spec.model));
  }
  auto impl = std::make_unique<Impl>();
  const bool digit_split = std::find(std::begin(kDigitSplitPre), std::end(kDigitSplitPre),
                                     spec.pre) != std::end(kDigitSplitPre);
  if (!digit_split && spec.pre != "gpt2") {
    return Unimplemented(fmt::format(
        "tokenizer.ggml.pre = '{}' is not supported: use 'gpt2', 'smollm' or an alias of "
        "'smollm' (starcoder, refact, command-r, codeshell, exaone, minerva)",
        spec.pre));
  }
  impl->split_digits = digit_split;
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
  impl->types.resize(n, TokenType::kNormal);
  for (int64_t i = 0; i < static_cast<int64_t>(spec.token_types.size()); ++i) {
    const int32_t t = spec.token_types[i];
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      return InvalidArgument(
          fmt::format("tokenizer.ggml.token_type[{}] = {}: it must be in [0, 6]", i, t));
    }
    impl->types[i] = static_cast<TokenType>(t);
  }
  impl->token_to_id.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    auto [it, inserted] = impl->token_to_id.emplace(spec.tokens[i], i);
    if (!inserted) {
      return InvalidArgument(fmt::format(
          "tokenizer.ggml.tokens[{}] = '{}' repeats tokens[{}]: token texts must be unique", i,
          spec.tokens[i], it->second));
    }
  }
  // A byte without a token (SmolLM2 has none for 21 bytes that its training text never held)
  // can take part in no merge and is dropped from the output, as llama.cpp drops it.
  for (int b = 0; b < 256; ++b) {
    const auto it = impl->token_to_id.find(Utf8Of(ti::ByteToCodepoint(static_cast<uint8_t>(b))));
    impl->byte_token[b] = it == impl->token_to_id.end() ? -1 : it->second;
  }
  impl->merges.reserve(spec.merges.size());
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
    const auto l = impl->token_to_id.find(left);
    const auto rt = impl->token_to_id.find(right);
    const auto res = impl->token_to_id.find(left + right);
    for (const auto& [part, it] : {std::pair{&left, l}, std::pair{&right, rt}}) {
      if (it == impl->token_to_id.end()) {
        return InvalidArgument(fmt::format(
            "tokenizer.ggml.merges[{}] = '{}': '{}' is not in tokenizer.ggml.tokens", r, m, *part));
      }
    }
    if (res == impl->token_to_id.end()) {
      return InvalidArgument(
          fmt::format("tokenizer.ggml.merges[{}] = '{}': the merged token '{}' is not in "
                      "tokenizer.ggml.tokens",
                      r, m, left + right));
    }
    // The first occurrence of a pair has the lowest rank and wins, as in llama.cpp.
    impl->merges.emplace(PairKey(l->second, rt->second),
                         Merge{static_cast<int32_t>(r), res->second});
  }
  impl->pieces.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    const std::string& text = spec.tokens[i];
    switch (impl->types[i]) {
      case TokenType::kNormal: {
        std::string bytes;
        for (size_t pos = 0; pos < text.size();) {
          const uint32_t cp = ti::NextCodepoint(text, &pos);
          const int b = ti::CodepointToByte(cp);
          if (b < 0) {
            return InvalidArgument(
                fmt::format("tokenizer.ggml.tokens[{}] = '{}' holds U+{:04X}, which is outside the "
                            "byte-level alphabet of normal tokens",
                            i, text, cp));
          }
          bytes.push_back(static_cast<char>(b));
        }
        impl->pieces[i] = std::move(bytes);
        break;
      }
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
    const TokenType t = impl->types[i];
    if ((t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) &&
        !text.empty()) {
      impl->specials.push_back(i);
    }
  }
  std::stable_sort(impl->specials.begin(), impl->specials.end(), [&](int32_t a, int32_t b) {
    return spec.tokens[a].size() > spec.tokens[b].size();
  });
  impl->end_of_generation.assign(n, false);
  if (spec.eos_id >= 0) impl->end_of_generation[spec.eos_id] = true;
  for (std::string_view text : kEndOfGenerationTexts) {
    const auto it = impl->token_to_id.find(std::string(text));
    if (it != impl->token_to_id.end()) impl->end_of_generation[it->second] = true;
  }
  impl->tokens = std::move(spec.tokens);
  impl->bos_id = spec.bos_id;
  impl->eos_id = spec.eos_id;
  impl->add_bos = spec.add_bos;
  impl->add_eos = spec.add_eos;
  impl->chat_template = std::move(spec.chat_template);
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
  std::vector<Fragment> fragments{{-1, 0, text.size()}};
  std::vector<Fragment> next;
  for (int32_t sid : specials) {
    const bool user_defined = types[sid] == TokenType::kUserDefined;
    if (!user_defined && special_ranges.empty()) continue;
    const std::string& st = tokens[sid];
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
        if (hit > pos) next.push_back({-1, pos, hit});
        next.push_back({sid, hit, hit + st.size()});
        pos = from = hit + st.size();
      }
      if (pos < f.end) next.push_back({-1, pos, f.end});
    }
    fragments.swap(next);
  }
  for (const Fragment& f : fragments) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else {
      EncodeText(text.substr(f.begin, f.end - f.begin), &out);
    }
  }
  if (add_special && add_eos) out.push_back(eos_id);
  return out;
}

void Tokenizer::Impl::EncodeText(std::string_view text, std::vector<int32_t>* out) const {
  // The text as codepoints; words are built from their UTF-8, so invalid input bytes become
  // U+FFFD as in llama.cpp.
  std::vector<Cp> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = ti::NextCodepoint(text, &pos);
    cps.push_back({cp, ti::ClassOf(cp)});
  }
  std::vector<size_t> word_ends;  // codepoint index where each word ends
  size_t begin = 0;
  while (begin < cps.size()) {
    size_t end = begin + 1;
    if (split_digits) {
      // "\p{N}": each number alone; the runs between them are split by the GPT-2 regex.
      if (cps[begin].cls != ti::kNumber) {
        while (end < cps.size() && cps[end].cls != ti::kNumber) ++end;
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
    for (size_t i = start; i < word_end; ++i) ti::AppendUtf8(cps[i].cp, &word);
    EncodeWord(word, out);
    start = word_end;
  }
}

// The GPT-2 regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ on
// cps[begin, end), matching as llama.cpp's unicode_regex_split_custom_gpt2 does: nothing outside
// the range is seen, so the lookahead treats the range end as the end of the text.
void Tokenizer::Impl::SplitGpt2(const std::vector<Cp>& cps, size_t begin, size_t end,
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
    if (cls == ti::kLetter || cls == ti::kNumber || cls == ti::kOther) {
      pos += (cp == ' ');
      while (cls_at(pos) == cls) ++pos;
      word_ends->push_back(pos);
      continue;
    }
    size_t spaces = 0;
    while (cls_at(pos + spaces) == ti::kWhitespace) ++spaces;
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

void Tokenizer::Impl::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
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

Expected<std::string> Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size()) {
    return OutOfRange(
        fmt::format("token id {}: it must be in [0, {}) (the vocabulary size)", id, vocab_size()));
  }
  const TokenType t = impl_->types[id];
  if (t == TokenType::kControl || t == TokenType::kUnknown) {
    return render_special ? impl_->tokens[id] : std::string();
  }
  return impl_->pieces[id];
}

Expected<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (int32_t id : ids) {
    CTXPAR_ASSIGN_OR_RETURN(std::string piece, TokenToPiece(id, render_special));
    out += piece;
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
TokenType Tokenizer::token_type(int32_t id) const { return impl_->types[id]; }
const std::string& Tokenizer::token_text(int32_t id) const { return impl_->tokens[id]; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

int32_t Tokenizer::TokenId(std::string_view text) const {
  const auto it = impl_->token_to_id.find(std::string(text));
  return it == impl_->token_to_id.end() ? -1 : it->second;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->end_of_generation[id];
}

}  // namespace ctxpar
