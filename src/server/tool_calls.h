// Tool calls in a chat completion's text (SGLang's --tool-call-parser): the calls the model wrote
// in its template's format, taken out of the text and returned as OpenAI's message.tool_calls
// [{"id", "type": "function", "function": {"name", "arguments": a JSON string}}].
//
// - qwen25 / hermes: each call a JSON object {"name", "arguments"} between <tool_call> and
//   </tool_call> (Qwen 2.5 / 3, Hermes 2 / 3); the text outside them is the content.
// - llama3: the text (after an optional <|python_tag|>) is one JSON object {"name",
//   "parameters" or "arguments"}, or several separated by ";" (Llama 3.1 / 3.2 / 3.3's JSON
//   tool calls); text before the first "{" is the content.
// - mistral: after the [TOOL_CALLS] control token, a JSON array of {"name", "arguments"}
//   (Mistral v0.3, Nemo, Small 3) or, after each [TOOL_CALLS], name[ARGS] and the arguments' JSON
//   object (the v11 tokenizers': Magistral, Devstral); text before the first is the content. The
//   token is a control token: a request with tools decodes with skip_special_tokens false
//   (request.cpp), as vLLM's Mistral parser asks.
// A call that is not such JSON stays in the content: nothing the model wrote is lost.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ctxpar::server {

enum class ToolCallParser { kNone, kHermes, kLlama3, kMistral };

// "" -> kNone; "qwen25", "qwen", "hermes" -> kHermes; "llama3" -> kLlama3; "mistral" ->
// kMistral; else nullopt.
std::optional<ToolCallParser> ToolCallParserByName(std::string_view name);

struct ToolCalls {
  std::string content;                                             // the text outside the calls
  nlohmann::ordered_json calls = nlohmann::ordered_json::array();  // OpenAI's tool_calls
};

// The calls of `text`; ids are "call_" and 24 random hex digits.
ToolCalls ExtractToolCalls(ToolCallParser parser, std::string_view text);

}  // namespace ctxpar::server
