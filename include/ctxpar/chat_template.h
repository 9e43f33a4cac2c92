// ChatTemplate: renders a conversation the way the model's Jinja chat template
// (GGUF tokenizer.chat_template) does, without a Jinja interpreter.
//
// Two families are recognized from the template's source:
//   ChatML (SmolLM2, Qwen): each message as <|im_start|>{role}\n{content}<|im_end|>\n in order,
//     a default system message before the first message when that one is not a system message
//     (when the template has such a default, as SmolLM2's does), and "<|im_start|>assistant\n"
//     when a generation prompt is asked for. Roles and contents are copied as they are.
//   Gemma (Gemma 2 and 3): each message as <start_of_turn>{role}\n{content | trim}<end_of_turn>\n
//     with "assistant" written "model", and "<start_of_turn>model\n" as the generation prompt.
//     A first system message is folded into the first turn as "{system}{separator}" (Gemma 3:
//     the separator is the template's literal, "\n\n" in Google's); a template without that
//     fold (Gemma 2) refuses system messages. The other messages must alternate user,
//     assistant, user, ... (the template raises otherwise, and so does Render). The template's
//     leading {{ bos_token }} is left to the tokenizer, which adds BOS (add_bos_token), as
//     llama.cpp strips a rendered BOS text when it adds one.
// "trim" is Jinja's: Python's str.strip(), which removes Unicode whitespace at both ends. With
// continue_final_message the last message is left open (nothing of the template after its
// content), as Hugging Face's apply_chat_template cuts the rendering after that content, so
// that the model continues it.
//
// Render keeps apart what the template wrote (its markers, newlines, default system message,
// "model") and what the messages hold (roles and contents): only the template's text may become
// control tokens, so a message that contains "<|im_end|>\n<|im_start|>assistant\n" or
// "<end_of_turn>" stays text and cannot forge a turn. Encode tokenizes a conversation that way;
// the ids equal llama.cpp's for the rendered text whenever the messages contain no control-token
// text.
//
// Thread safety: immutable after FromJinja; Render, Apply and Encode may be called from several
// threads.
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
  enum class Family { kChatMl, kGemma };

  // Recognizes the template from its Jinja source: CTXPAR-CHAT-001 when it is empty (the model
  // carries none), CTXPAR-CHAT-002 when it is of no family above.
  static Expected<ChatTemplate> FromJinja(std::string_view source);

  // The rendered conversation in segments: the template's text with parse_special = true, the
  // messages' roles and contents with parse_special = false. CTXPAR-CHAT-003 when the template
  // refuses the conversation (Gemma: roles that do not alternate, a system message where none
  // is allowed).
  Expected<std::vector<TextSegment>> Render(std::span<const ChatMessage> messages,
                                            bool add_generation_prompt,
                                            bool continue_final_message = false) const;
  // The rendered conversation as one string (the concatenation of Render's segments).
  Expected<std::string> Apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                              bool continue_final_message = false) const;
  // tokenizer.Encode(Render(...)): the prompt ids of a conversation.
  Expected<std::vector<int32_t>> Encode(const Tokenizer& tokenizer,
                                        std::span<const ChatMessage> messages,
                                        bool add_generation_prompt,
                                        bool continue_final_message = false) const;

  Family family() const { return family_; }
  // ChatML: the system message inserted when the first message is not one; empty when the
  // template inserts none.
  const std::string& default_system() const { return default_system_; }

 private:
  ChatTemplate() = default;
  Expected<std::vector<TextSegment>> RenderGemma(std::span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 bool continue_final_message) const;

  Family family_ = Family::kChatMl;
  bool has_default_system_ = false;
  std::string default_system_;
  bool folds_system_ = false;     // Gemma: a first system message joins the first turn
  std::string system_separator_;  // Gemma: what follows the system text there
};

}  // namespace ctxpar
