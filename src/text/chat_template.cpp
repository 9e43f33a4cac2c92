#include "ctxpar/chat_template.h"

#include <fmt/format.h>

#include "ctxpar/error_catalog.h"

namespace ctxpar {
namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";
constexpr std::string_view kDefaultSystemGuard = "messages[0]['role'] != 'system'";
constexpr std::string_view kSystemOpen = "<|im_start|>system";

constexpr std::string_view kTurnStart = "<start_of_turn>";
constexpr std::string_view kTurnEnd = "<end_of_turn>";
constexpr std::string_view kGemmaPrompt = "<start_of_turn>model";
// Gemma 3 folds the system message: "set first_user_prefix = messages[0]['content'] + '\n\n'".
constexpr std::string_view kGemmaFold = "first_user_prefix = messages[0]['content'] + ";
constexpr std::string_view kGemmaNoSystem = "System role not supported";
constexpr std::string_view kAlternate =
    "Conversation roles must alternate user/assistant/user/assistant/...";

// Jinja string literals accept Python's escapes; the recognized templates only use these.
std::string UnescapeJinja(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
  }
  return out;
}

// The Jinja string literal that starts at source[pos] ('...' or "..."), unescaped; npos-safe.
Expected<std::string> JinjaLiteral(std::string_view source, size_t pos) {
  if (pos >= source.size() || (source[pos] != '\'' && source[pos] != '"')) {
    return InvalidArgument("no string literal");
  }
  const char quote = source[pos];
  for (size_t i = pos + 1; i < source.size(); ++i) {
    if (source[i] == '\\') {
      ++i;
    } else if (source[i] == quote) {
      return UnescapeJinja(source.substr(pos + 1, i - pos - 1));
    }
  }
  return InvalidArgument("an unterminated string literal");
}

Status Unrecognized(std::string detail) {
  return CatalogError("CTXPAR-CHAT-002", {{"detail", std::move(detail)}});
}

Status Refused(std::string detail) {
  return CatalogError("CTXPAR-CHAT-003", {{"detail", std::move(detail)}});
}

// Python's str.isspace() for one codepoint, which Jinja's trim (str.strip()) removes.
bool IsPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// The codepoint of the well-formed UTF-8 sequence at s[pos] and its length; {0, 0} when the
// bytes there are not one (they are kept: only whitespace is trimmed).
std::pair<uint32_t, size_t> CodepointAt(std::string_view s, size_t pos) {
  const auto b = static_cast<uint8_t>(s[pos]);
  if (b < 0x80) return {b, 1};
  const size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
  if (len == 0 || pos + len > s.size()) return {0, 0};
  uint32_t cp = b & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto c = static_cast<uint8_t>(s[pos + k]);
    if ((c & 0xC0) != 0x80) return {0, 0};
    cp = (cp << 6) | (c & 0x3F);
  }
  constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};  // shorter forms are overlong
  if (cp < kMin[len]) return {0, 0};
  return {cp, len};
}

// Jinja's trim filter: Python's str.strip() on the UTF-8 text.
std::string_view Trim(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const auto [cp, len] = CodepointAt(s, begin);
    if (len == 0 || !IsPythonSpace(cp)) break;
    begin += len;
  }
  size_t end = s.size();
  while (end > begin) {
    // Step back over continuation bytes to the start of the last character.
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const auto [cp, len] = CodepointAt(s, start);
    if (len != end - start || !IsPythonSpace(cp)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

// Segments of a rendering: the template's text may hold control tokens, a message's may not.
class Segments {
 public:
  void Markup(std::string_view text) {
    if (text.empty()) return;
    if (!out_.empty() && out_.back().parse_special) {
      out_.back().text += text;
    } else {
      out_.push_back({std::string(text), true});
    }
  }
  void UserText(std::string_view text) {
    if (!text.empty()) out_.push_back({std::string(text), false});
  }
  std::vector<TextSegment> Take() { return std::move(out_); }

 private:
  std::vector<TextSegment> out_;
};

}  // namespace

Expected<ChatTemplate> ChatTemplate::FromJinja(std::string_view source) {
  if (source.empty()) return CatalogError("CTXPAR-CHAT-001", {});
  ChatTemplate t;
  const bool chatml =
      source.find(kStart) != std::string_view::npos && source.find(kEnd) != std::string_view::npos;
  const bool gemma = source.find(kTurnStart) != std::string_view::npos &&
                     source.find(kTurnEnd) != std::string_view::npos;
  if (gemma && !chatml) {
    t.family_ = Family::kGemma;
    if (source.find(kGemmaPrompt) == std::string_view::npos) {
      return Unrecognized(
          fmt::format("a Gemma template without the generation prompt '{}\\n'", kGemmaPrompt));
    }
    const size_t fold = source.find(kGemmaFold);
    if (fold != std::string_view::npos) {
      Expected<std::string> separator = JinjaLiteral(source, fold + kGemmaFold.size());
      if (!separator.ok()) {
        return Unrecognized(fmt::format("a Gemma template whose {}... is followed by {}",
                                        kGemmaFold, separator.status().message()));
      }
      t.folds_system_ = true;
      t.system_separator_ = std::move(*separator);
    } else if (source.find(kGemmaNoSystem) == std::string_view::npos) {
      return Unrecognized(
          "a Gemma template that neither folds the system message into the first turn "
          "(first_user_prefix) nor refuses it");
    }
    return t;
  }
  if (!chatml) {
    return Unrecognized(fmt::format("it has neither ChatML's {} ... {} nor Gemma's {} ... {}",
                                    kStart, kEnd, kTurnStart, kTurnEnd));
  }
  // The default system message is the literal "<|im_start|>system\n...<|im_end|>" that follows
  // the guard "if ... messages[0]['role'] != 'system'".
  const size_t guard = source.find(kDefaultSystemGuard);
  if (guard != std::string_view::npos) {
    // The newline after the role is a raw newline or the escape "\n" inside the literal.
    size_t body = source.find(kSystemOpen, guard);
    if (body != std::string_view::npos) {
      body += kSystemOpen.size();
      const size_t newline = source.substr(body, 1) == "\n"    ? 1
                             : source.substr(body, 2) == "\\n" ? 2
                                                               : 0;
      body = newline == 0 ? std::string_view::npos : body + newline;
    }
    const size_t close = body == std::string_view::npos ? body : source.find(kEnd, body);
    if (close == std::string_view::npos) {
      return Unrecognized(
          fmt::format("a ChatML template that tests {} but inserts no '{}...{}' literal after it",
                      kDefaultSystemGuard, "<|im_start|>system\\n", kEnd));
    }
    t.has_default_system_ = true;
    t.default_system_ = UnescapeJinja(source.substr(body, close - body));
  }
  return t;
}

Expected<std::vector<TextSegment>> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                        bool add_generation_prompt,
                                                        bool continue_final_message) const {
  if (family_ == Family::kGemma) {
    return RenderGemma(messages, add_generation_prompt, continue_final_message);
  }
  Segments out;
  if (has_default_system_ && !messages.empty() && messages.front().role != "system") {
    out.Markup(kStart);
    out.Markup("system\n");
    out.Markup(default_system_);
    out.Markup(kEnd);
    out.Markup("\n");
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    out.Markup(kStart);
    out.UserText(messages[i].role);
    out.Markup("\n");
    out.UserText(messages[i].content);
    if (continue_final_message && i + 1 == messages.size()) break;
    out.Markup(kEnd);
    out.Markup("\n");
  }
  if (add_generation_prompt) {
    out.Markup(kStart);
    out.Markup("assistant\n");
  }
  return out.Take();
}

// Google's Gemma 3 template, step by step: an optional first system message becomes the prefix
// of the first turn; the rest must alternate user / assistant; contents are trimmed.
Expected<std::vector<TextSegment>> ChatTemplate::RenderGemma(std::span<const ChatMessage> messages,
                                                             bool add_generation_prompt,
                                                             bool continue_final_message) const {
  if (messages.empty()) return Refused("the conversation has no message");
  Segments out;
  size_t first = 0;
  std::string_view system;
  if (!messages.empty() && messages.front().role == "system") {
    if (!folds_system_) {
      return Refused("System role not supported (messages[0].role is 'system')");
    }
    system = messages.front().content;
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if ((m.role == "user") != ((i - first) % 2 == 0)) {
      return Refused(fmt::format("{} (messages[{}].role is '{}')", kAlternate, i, m.role));
    }
    out.Markup(kTurnStart);
    if (m.role == "assistant") {
      out.Markup("model");
    } else {
      out.UserText(m.role);
    }
    out.Markup("\n");
    if (i == first && first == 1) {
      out.UserText(system);
      out.Markup(system_separator_);
    }
    out.UserText(Trim(m.content));
    if (continue_final_message && i + 1 == messages.size()) break;
    out.Markup(kTurnEnd);
    out.Markup("\n");
  }
  if (add_generation_prompt) {
    out.Markup(kGemmaPrompt);
    out.Markup("\n");
  }
  return out.Take();
}

Expected<std::string> ChatTemplate::Apply(std::span<const ChatMessage> messages,
                                          bool add_generation_prompt,
                                          bool continue_final_message) const {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<TextSegment> segments,
                          Render(messages, add_generation_prompt, continue_final_message));
  std::string out;
  for (const TextSegment& s : segments) out += s.text;
  return out;
}

Expected<std::vector<int32_t>> ChatTemplate::Encode(const Tokenizer& tokenizer,
                                                    std::span<const ChatMessage> messages,
                                                    bool add_generation_prompt,
                                                    bool continue_final_message) const {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<TextSegment> segments,
                          Render(messages, add_generation_prompt, continue_final_message));
  return tokenizer.Encode(segments);
}

}  // namespace ctxpar
