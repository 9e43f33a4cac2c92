// ChatTemplate: renders a conversation with the model's Jinja chat template (GGUF
// tokenizer.chat_template, or a file given with --chat-template) as Hugging Face's
// apply_chat_template does, on llama.cpp's Jinja engine (third_party/llama-jinja; why that one:
// docs/chat-template.md).
//
// The template sees what transformers gives it: `messages` (the conversation as JSON objects:
// role, content, tool_calls, tool_call_id, name, ... as the caller sent them), `tools` (when
// given), `add_generation_prompt`, `bos_token` and `eos_token` (the texts of the model's BOS and
// EOS), `raise_exception(msg)` and `strftime_now(format)` (local time; ChatRequest::now fixes
// the instant), plus ChatRequest::extra (chat_template_kwargs such as enable_thinking). With
// continue_final_message the rendering is cut right after the last message's content, as
// transformers cuts it (the content, else the content stripped, found last in the text).
//
// Render keeps apart what the template wrote and what came from the request: every string of
// `messages` and `tools` is input, and the engine tracks it through concatenation, filters and
// slicing (llama.cpp's input marking). Input becomes TextSegments with parse_special = false,
// so a message holding "<|im_end|>\n<|im_start|>assistant\n" stays text and cannot forge a
// turn; the template's own text (markers, newlines, bos_token) is parsed for control tokens.
// Text the template builds from input by tojson (tool schemas, tool-call arguments) is the
// template's, as in llama.cpp.
//
// Errors: FromJinja gives CTXPAR-CHAT-001 for an empty source (the model carries no template)
// and CTXPAR-CHAT-002 when the engine cannot parse it; Render gives CTXPAR-CHAT-003 when the
// template raises (raise_exception: its message is the detail) or fails on the conversation
// (an unsupported construct or type met while rendering).
//
// Thread safety: immutable after FromJinja; Render, Apply and Encode may be called from several
// threads (each render has its own engine context over the shared parsed program).
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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

// A conversation as apply_chat_template takes it.
struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // message objects
  nlohmann::ordered_json tools;  // null (absent: the template sees none) or a list
  bool add_generation_prompt = false;
  bool continue_final_message = false;
  // More variables for the template (an object), set after the ones above.
  nlohmann::ordered_json extra;
  // The instant strftime_now formats; unset: now.
  std::optional<std::time_t> now;
};

class ChatTemplate {
 public:
  // Parses `source`. bos_token / eos_token are the texts the template's {{ bos_token }} and
  // {{ eos_token }} give ("" when the model has none).
  static Expected<ChatTemplate> FromJinja(std::string_view source, std::string bos_token = "",
                                          std::string eos_token = "");
  // The template of the file `template_file` (--chat-template; CTXPAR-CHAT-004 when it cannot
  // be read), else the model's tokenizer.chat_template, with the BOS and EOS texts of
  // `tokenizer`.
  static Expected<ChatTemplate> ForTokenizer(const Tokenizer& tokenizer,
                                             const std::string& template_file = "");

  // The rendered conversation in segments: the template's text with parse_special = true, text
  // that came from the request with parse_special = false.
  Expected<std::vector<TextSegment>> Render(const ChatRequest& request) const;
  Expected<std::vector<TextSegment>> Render(std::span<const ChatMessage> messages,
                                            bool add_generation_prompt,
                                            bool continue_final_message = false) const;
  // The rendered conversation as one string (the concatenation of Render's segments): what
  // apply_chat_template(..., tokenize=False) returns.
  Expected<std::string> Apply(const ChatRequest& request) const;
  Expected<std::string> Apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                              bool continue_final_message = false) const;
  // Render's segments as a prompt for `tokenizer`: a BOS text the template wrote first (an EOS
  // text last) is dropped when the tokenizer adds BOS (EOS) itself, as llama.cpp does, so that
  // the prompt holds one.
  Expected<std::vector<TextSegment>> RenderPrompt(const Tokenizer& tokenizer,
                                                  const ChatRequest& request) const;
  // RenderPrompt's text (llama-server's POST /apply-template).
  Expected<std::string> Prompt(const Tokenizer& tokenizer, const ChatRequest& request) const;
  // The prompt ids of a conversation: RenderPrompt's segments encoded with add_special.
  Expected<std::vector<int32_t>> Encode(const Tokenizer& tokenizer,
                                        const ChatRequest& request) const;
  Expected<std::vector<int32_t>> Encode(const Tokenizer& tokenizer,
                                        std::span<const ChatMessage> messages,
                                        bool add_generation_prompt,
                                        bool continue_final_message = false) const;

  const std::string& source() const;  // the Jinja source as given
  const std::string& bos_token() const;
  const std::string& eos_token() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The messages as ChatRequest::messages: {"role": ..., "content": ...} each.
nlohmann::ordered_json ChatMessagesJson(std::span<const ChatMessage> messages);

}  // namespace ctxpar
