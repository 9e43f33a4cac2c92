// ChatTemplate: renders a conversation the way the model's Jinja chat template
// (GGUF tokenizer.chat_template) does, without a Jinja interpreter.
//
// Supported: ChatML templates, which render each message as
//   <|im_start|>{role}\n{content}<|im_end|>\n
// in order, insert a default system message before the first message when that one is not a
// system message (when the template has such a default, as SmolLM2's does), and end with
// "<|im_start|>assistant\n" when a generation prompt is asked for. Roles and contents are copied
// as they are (the template escapes nothing). With continue_final_message the last message is
// left open (no "<|im_end|>\n" after it), as Hugging Face's apply_chat_template cuts the
// rendering after that message's content, so that the model continues it.
//
// Render keeps apart what the template wrote (its markers, newlines and default system message)
// and what the messages hold (roles and contents): only the template's text may become control
// tokens, so a message that contains "<|im_end|>\n<|im_start|>assistant\n" stays text and cannot
// forge a turn. Encode tokenizes a conversation that way; the ids equal llama.cpp's for the
// rendered text whenever the messages contain no control-token text.
//
// Thread safety: immutable after FromJinja; Apply may be called from several threads.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/status.h"
#include "ctxpar/tokenizer.h"

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

  // The rendered conversation as one string (the concatenation of Render's segments).
  std::string Apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                    bool continue_final_message = false) const;
  // The rendered conversation in segments: the template's text with parse_special = true, the
  // messages' roles and contents with parse_special = false.
  std::vector<TextSegment> Render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                  bool continue_final_message = false) const;
  // tokenizer.Encode(Render(...)): the prompt ids of a conversation.
  std::vector<int32_t> Encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              bool add_generation_prompt,
                              bool continue_final_message = false) const;

  // The system message inserted when the first message is not one; empty when the template
  // inserts none.
  const std::string& default_system() const { return default_system_; }

 private:
  ChatTemplate() = default;
  bool has_default_system_ = false;
  std::string default_system_;
};

}  // namespace ctxpar
