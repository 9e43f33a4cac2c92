#include "ctxpar/chat_template.h"

#include <fmt/format.h>

namespace ctxpar {
namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";
constexpr std::string_view kDefaultSystemGuard = "messages[0]['role'] != 'system'";
constexpr std::string_view kSystemOpen = "<|im_start|>system";

// Jinja string literals accept Python's escapes; ChatML templates only use these.
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

}  // namespace

Expected<ChatTemplate> ChatTemplate::FromJinja(std::string_view source) {
  if (source.find(kStart) == std::string_view::npos ||
      source.find(kEnd) == std::string_view::npos) {
    return Unimplemented(fmt::format(
        "tokenizer.chat_template is not a ChatML template (it lacks {} ... {}): only ChatML "
        "templates are implemented",
        kStart, kEnd));
  }
  ChatTemplate t;
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
      return Unimplemented(fmt::format(
          "tokenizer.chat_template tests {} but inserts no '{}...{}' literal after it: only "
          "a literal default system message is implemented",
          kDefaultSystemGuard, "<|im_start|>system\\n", kEnd));
    }
    t.has_default_system_ = true;
    t.default_system_ = UnescapeJinja(source.substr(body, close - body));
  }
  return t;
}

std::vector<TextSegment> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                              bool add_generation_prompt,
                                              bool continue_final_message) const {
  std::vector<TextSegment> out;
  const auto markup = [&](std::string_view text) {
    if (!out.empty() && out.back().parse_special) {
      out.back().text += text;
    } else {
      out.push_back({std::string(text), true});
    }
  };
  const auto user_text = [&](std::string_view text) {
    if (!text.empty()) out.push_back({std::string(text), false});
  };
  if (has_default_system_ && !messages.empty() && messages.front().role != "system") {
    markup(kStart);
    markup("system\n");
    markup(default_system_);
    markup(kEnd);
    markup("\n");
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    markup(kStart);
    user_text(messages[i].role);
    markup("\n");
    user_text(messages[i].content);
    if (continue_final_message && i + 1 == messages.size()) break;
    markup(kEnd);
    markup("\n");
  }
  if (add_generation_prompt) {
    markup(kStart);
    markup("assistant\n");
  }
  return out;
}

std::string ChatTemplate::Apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                bool continue_final_message) const {
  std::string out;
  for (const TextSegment& s : Render(messages, add_generation_prompt, continue_final_message)) {
    out += s.text;
  }
  return out;
}

std::vector<int32_t> ChatTemplate::Encode(const Tokenizer& tokenizer,
                                          std::span<const ChatMessage> messages,
                                          bool add_generation_prompt,
                                          bool continue_final_message) const {
  return tokenizer.Encode(Render(messages, add_generation_prompt, continue_final_message));
}

}  // namespace ctxpar
