// Byte-level BPE (tokenizer.ggml.model "gpt2") and Gemma 4's BPE over UTF-8 ("gemma4"): the
// pre-tokenizer that tokenizer.ggml.pre names, then merges by rank, as llama.cpp's
// llm_tokenizer_bpe_session.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <queue>

#include "text/tokenizer_model.h"
#include "text/tokenizer_regex.h"
#include "text/tokenizer_unicode.h"

namespace ctxpar::tokenizer_internal {
namespace {

// The regexes of llama.cpp's pre-tokenizers (src/llama-vocab.cpp, llm_tokenizer_bpe), each the
// split of a Hugging Face tokenizer.json.
constexpr std::string_view kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr std::string_view kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)re"
    R"re(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|)re"
    R"re(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen35 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|)re"
    R"re([^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|)re"
    R"re(\s+(?!\S)|\s+)re";
constexpr std::string_view kDeepSeekLetters =
    R"re(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳ)re"
    R"re(Ͷͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽ)re"
    R"re(ᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅ)re"
    R"re(ὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥ)re"
    R"re(ῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉ)re"
    R"re(ⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿ)re"
    R"re(ﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟)re"
    R"re(𞤀-𞥃]+)re";
constexpr std::string_view kDeepSeekPunctuation = R"re(\s?[!-/:-~！-／：-～‘-‟　-。]+)re";
constexpr std::string_view kDeepSeekCjk = R"re([一-龥ࠀ-一가-퟿]+)re";
constexpr std::string_view kDeepSeek3Cjk = R"re([一-龥぀-ゟ゠-ヿ]+)re";
constexpr std::string_view kDeepSeek3 =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)re"
    R"re( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Mistral's tekken and GPT-4o's: a word is upper-case letters then lower-case ones, or upper-case
// ones alone. llama.cpp writes "upper" as a letter outside a-z and "lower" as one outside A-Z
// (std::regex has no \p{Lu}), which this follows.
constexpr std::string_view kTekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|)re"
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|)re"
    R"re(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)re"
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)re"
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)re"
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|)re"
    R"re(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// What a word is split into before merging, and the defaults that come with the name.
enum class WholeWord : uint8_t {
  kMerge,        // always merge
  kIfToken,      // a word that is a token is that token (llama.cpp's ignore_merges)
  kNewlineRuns,  // only a word of newlines (Gemma 4)
};
struct PreTokenizer {
  std::string_view names;  // tokenizer.ggml.pre values, space-separated
  std::vector<std::string_view> regexes;
  WholeWord whole_word = WholeWord::kMerge;
  bool add_bos = false;  // tokenizer.ggml.add_bos_token when the file leaves it out
};

const std::vector<PreTokenizer>& PreTokenizers() {
  static const std::vector<PreTokenizer> table = {
      {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
       {kLlama3},
       WholeWord::kIfToken,
       true},
      {"dbrx smaug-bpe", {kLlama3}},
      {"qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open", {kQwen2}},
      {"qwen35", {kQwen35}},
      {"tekken", {kTekken}, WholeWord::kIfToken, true},
      {"gpt-4o llama4 kanana2 talkie minimax-m2", {kGpt4o}},
      {"deepseek-llm",
       {R"re([\r\n])re", kDeepSeekLetters, kDeepSeekPunctuation, R"re(\s+$)re", kDeepSeekCjk,
        R"re(\p{N}+)re"}},
      {"deepseek-coder",
       {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kDeepSeekCjk, R"re(\p{N})re"}},
      {"deepseek-v3 hunyuan-dense joyai-llm hy_v4",
       {R"re(\p{N}{1,3})re", kDeepSeek3Cjk, kDeepSeek3}},
      {"falcon", {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, R"re([0-9][0-9][0-9])re"}},
      {"smollm starcoder refact command-r codeshell exaone minerva-7b mellum2",
       {R"re(\p{N})re", kGpt2}},
      {"gpt2 gpt-2 mpt phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum "
       "modern-bert olmo jais trillion granite-docling exaone4",
       {kGpt2}},
      {"default", {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
      // Gemma 4 (tokenizer.ggml.model "gemma4"): spaces are U+2581 and the merges run over
      // whole lines; llama.cpp adds BOS whatever the file says.
      {"gemma4", {R"re([^\n]+|[\n]+)re"}, WholeWord::kNewlineRuns, true},
  };
  return table;
}

const PreTokenizer* FindPreTokenizer(std::string_view name) {
  for (const PreTokenizer& p : PreTokenizers()) {
    for (size_t begin = 0; begin < p.names.size();) {
      const size_t end = std::min(p.names.find(' ', begin), p.names.size());
      if (p.names.substr(begin, end - begin) == name) return &p;
      begin = end + 1;
    }
  }
  return nullptr;
}

std::string SupportedNames() {
  std::string names;
  for (const PreTokenizer& p : PreTokenizers()) {
    if (p.names == "gemma4") continue;
    names += names.empty() ? "" : " ";
    names += p.names;
  }
  return names;
}

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

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

// The number of bytes a UTF-8 lead byte claims (llama.cpp's unicode_len_utf8).
size_t ClaimedLength(uint8_t b) {
  constexpr std::array<uint8_t, 16> kLen = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

class BpeModel final : public TextModel {
 public:
  explicit BpeModel(const Vocab& vocab) : vocab_(vocab) {}

  std::vector<CodepointRegex> regexes;
  WholeWord whole_word = WholeWord::kMerge;
  // gpt2: each byte of a word is the token of its byte-level character. gemma4: each UTF-8
  // character of the word is its own token, and spaces are U+2581 first.
  bool byte_level = true;
  std::unordered_map<uint64_t, Merge> merges;
  std::array<int32_t, 256> byte_token{};  // gpt2: the token of each byte's character, or -1
  // The tokens of a byte that ends up in no token: gpt2, the one-byte tokens of its byte-level
  // character's UTF-8 (there are none in a byte-level vocabulary: the byte is dropped); gemma4,
  // its <0xXX> token.
  std::array<std::vector<int32_t>, 256> fallback;

  void Encode(std::string_view text, bool after_special, std::vector<int32_t>* out) const override;

 private:
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  const Vocab& vocab_;
};

void BpeModel::Encode(std::string_view raw, bool /*after_special*/,
                      std::vector<int32_t>* out) const {
  std::string escaped;
  std::string_view text = raw;
  if (!byte_level) {
    for (char c : raw) {
      if (c == ' ') {
        escaped.append(kSpace);
      } else {
        escaped.push_back(c);
      }
    }
    text = escaped;
  }
  // The text as codepoints; words are built from their UTF-8, so invalid input bytes become
  // U+FFFD as in llama.cpp.
  std::vector<uint32_t> cps;
  std::vector<CodepointClass> classes;
  cps.reserve(text.size());
  classes.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    cps.push_back(NextCodepoint(text, &pos));
    classes.push_back(ClassOf(cps.back()));
  }
  // Each regex splits every word of the one before (llama.cpp's unicode_regex_split).
  std::vector<size_t> ends = {cps.size()};
  std::vector<size_t> next;
  for (const CodepointRegex& regex : regexes) {
    next.clear();
    size_t begin = 0;
    for (size_t end : ends) {
      regex.Split(cps, classes, begin, end, &next);
      begin = end;
    }
    ends.swap(next);
  }
  std::string word;
  size_t begin = 0;
  for (size_t end : ends) {
    word.clear();
    for (size_t i = begin; i < end; ++i) AppendUtf8(cps[i], &word);
    EncodeWord(word, out);
    begin = end;
  }
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (whole_word != WholeWord::kMerge &&
      (whole_word == WholeWord::kIfToken || word.find_first_not_of('\n') == std::string::npos)) {
    int32_t id;
    if (byte_level) {
      std::string chars;
      for (char c : word) AppendUtf8(ByteToCodepoint(static_cast<uint8_t>(c)), &chars);
      id = vocab_.Find(chars);
    } else {
      id = vocab_.Find(word);
    }
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  // Symbols form a linked list over the word's units (bytes, or UTF-8 characters); a heap holds
  // the candidate merges of adjacent symbols by (rank, left position). A popped candidate whose
  // two symbols changed since it was pushed is stale and skipped.
  struct Symbol {
    int32_t id;          // -1: no token (it takes part in no merge)
    uint32_t begin, n;   // its bytes in the word
    int32_t prev, next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (size_t off = 0; off < word.size();) {
    const size_t n =
        byte_level ? 1
                   : std::min(ClaimedLength(static_cast<uint8_t>(word[off])), word.size() - off);
    const int32_t id =
        byte_level ? byte_token[static_cast<uint8_t>(word[off])] : vocab_.Find(word.substr(off, n));
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, static_cast<uint32_t>(off), static_cast<uint32_t>(n), index - 1,
                       off + n == word.size() ? -1 : index + 1});
    off += n;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    const auto it = merges.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == merges.end()) return;
    heap.push(
        {it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.result});
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    push(static_cast<int32_t>(i), static_cast<int32_t>(i + 1));
  }
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next != c.right || symbols[c.right].id != c.right_id) {
      continue;
    }
    Symbol& right = symbols[c.right];
    left.id = c.result;
    left.n += right.n;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    right.id = -1;
    right.n = 0;
    push(left.prev, c.left);
    push(c.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out->push_back(s.id);
      continue;
    }
    for (uint32_t k = s.begin; k < s.begin + s.n; ++k) {
      const auto& ids = fallback[static_cast<uint8_t>(word[k])];
      out->insert(out->end(), ids.begin(), ids.end());
    }
  }
}

}  // namespace

bool BpeAddsBosByDefault(std::string_view model, std::string_view pre) {
  const PreTokenizer* p = FindPreTokenizer(model == "gemma4" ? model : pre);
  return p != nullptr && p->add_bos;
}

Expected<TextModelParts> MakeBpeModel(const TokenizerSpec& spec, const Vocab& vocab) {
  auto model = std::make_unique<BpeModel>(vocab);
  model->byte_level = spec.model != "gemma4";
  // Gemma 4's files name no pre-tokenizer: the model is its name (as llama.cpp sets it).
  const std::string_view pre_name = model->byte_level ? std::string_view(spec.pre) : "gemma4";
  const PreTokenizer* pre = FindPreTokenizer(pre_name);
  if (pre == nullptr || (model->byte_level && pre_name == "gemma4")) {
    return Unimplemented(fmt::format(
        "tokenizer.ggml.pre = '{}' is not supported: the supported pre-tokenizers are {}", spec.pre,
        SupportedNames()));
  }
  for (std::string_view pattern : pre->regexes) {
    CTXPAR_ASSIGN_OR_RETURN(CodepointRegex regex, CodepointRegex::Compile(pattern));
    model->regexes.push_back(std::move(regex));
  }
  model->whole_word = pre->whole_word;
  for (int b = 0; b < 256; ++b) {
    if (model->byte_level) {
      model->byte_token[b] = vocab.Find(Utf8Of(ByteToCodepoint(static_cast<uint8_t>(b))));
      for (char c : Utf8Of(ByteToCodepoint(static_cast<uint8_t>(b)))) {
        const int32_t id = vocab.Find(std::string(1, c));
        if (id >= 0) model->fallback[b].push_back(id);
      }
    } else {
      const int32_t id = vocab.Find(fmt::format("<0x{:02X}>", b));
      if (id >= 0) model->fallback[b].push_back(id);
    }
  }
  model->merges.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const std::string& m = spec.merges[r];
    // llama.cpp splits at the first space after the first byte.
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos || space + 1 == m.size()) {
      return InvalidArgument(fmt::format(
          "tokenizer.ggml.merges[{}] = '{}': a merge must be two tokens separated by a space", r,
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
    if (!model->byte_level) {
      bytes = SpaceEscapedPiece(text);
      continue;
    }
    for (size_t pos = 0; pos < text.size();) {
      const uint32_t cp = NextCodepoint(text, &pos);
      const int b = CodepointToByte(cp);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        continue;
      }
      // A character outside the byte-level alphabet (Command-R's vocabulary holds U+200D) is
      // written as llama.cpp's llama_decode_text writes it.
      bytes += "[UNK_BYTE_0x";
      for (char c : Utf8Of(cp)) bytes += fmt::format("{:02x}", static_cast<uint8_t>(c));
      bytes += text + "]";
    }
  }
  parts.model = std::move(model);
  return parts;
}

}  // namespace ctxpar::tokenizer_internal
