// ChatTemplate: renders a conversation the way the model's Jinja chat template
// (GGUF tokenizer.chat_template) does, without a Jinja interpreter.
//
// Supported: ChatML templates, which render each message as
//   <|im_start|>{role}\n{content}<|im_end|>\n
// in order, insert a default system message before the first message when that one is not a
// system message (when the template has such a default, as SmolLM2's does), and end with
// "<|im_start|>assistant\n" when a generation prompt is asked for. Roles and contents are copied
// as they are (the template escapes nothing). The rendered text holds special tokens as text:
// encode it with EncodeOptions::parse_special = true.
//
// Thread safety: immutable after FromJinja; Apply may be called from several threads.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "ctxpar/status.h"

namespace ctxpar {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

class ChatTemplate {
 public:
  // Recognizes the template from its Jinja source; a template of another family is
  // kUnimplemented, naming what is supported.
  static Expected<ChatTemplate> FromJinja(std::string_view source);

  std::string Apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // The system message inserted when the first message is not one; empty when the template
  // inserts none.
  const std::string& default_system() const { return default_system_; }

 private:
  ChatTemplate() = default;
  bool has_default_system_ = false;
  std::string default_system_;
};

}  // namespace ctxpar
