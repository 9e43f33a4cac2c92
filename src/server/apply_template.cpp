// POST /apply-template (request.h): llama-server's route, the chat template without generation.
#include <fmt/format.h>

#include <utility>
#include <vector>

#include "ctxpar/chat_template.h"
#include "ctxpar/error_catalog.h"
#include "server/json_read.h"
#include "server/request.h"

namespace ctxpar::server {

namespace {

constexpr std::string_view kPath = "/apply-template";

}  // namespace

ApiExpected<nlohmann::json> ApplyTemplate(std::string_view body, const ModelContext& model) {
  ApiExpected<nlohmann::json> parsed = ParseObject(kPath, body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const nlohmann::json& checked = std::get<nlohmann::json>(parsed);
  const nlohmann::json& messages = Field(checked, "messages");
  if (messages.is_null()) return Missing(kPath, "messages");
  if (!messages.is_array() || messages.empty()) {
    return TypeError("messages", "a non-empty list of messages", messages);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    if (!messages[i].is_object()) return TypeError(at, "an object with a role", messages[i]);
    if (const nlohmann::json& role = Field(messages[i], "role"); !role.is_string()) {
      return TypeError(at + ".role", "a string", role);
    }
  }
  const nlohmann::json& tools = Field(checked, "tools");
  if (!tools.is_null() && !tools.is_array()) return TypeError("tools", "a list of tools", tools);
  const nlohmann::json& kwargs = Field(checked, "chat_template_kwargs");
  if (!kwargs.is_null() && !kwargs.is_object()) {
    return TypeError("chat_template_kwargs", "an object", kwargs);
  }
  for (const char* field : {"messages", "tools", "chat_template_kwargs"}) {
    if (NestedTooDeep(Field(checked, field))) {
      return RangeError(kPath, field, fmt::format("nested at most {} levels deep", kMaxJsonDepth),
                        "a value nested deeper");
    }
  }
  // The template sees the request's objects in their order (a tool schema's keys, as
  // transformers passes the client's dicts): read again, ordered, what ParseObject accepted.
  const auto b = nlohmann::ordered_json::parse(body);
  ChatRequest request;
  request.messages = b["messages"];
  if (!tools.is_null()) request.tools = b["tools"];
  if (!kwargs.is_null()) request.extra = b["chat_template_kwargs"];
  // llama-server's default: the prompt ends with the assistant's turn opened.
  request.add_generation_prompt = true;
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(checked, "add_generation_prompt"), "add_generation_prompt",
                                  &request.add_generation_prompt));
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(checked, "continue_final_message"),
                                  "continue_final_message", &request.continue_final_message));
  if (request.add_generation_prompt && request.continue_final_message) {
    // As /v1/chat/completions: a new turn cannot also continue the last one.
    return RangeError(kPath, "continue_final_message",
                      "false when add_generation_prompt is true (send "
                      "\"add_generation_prompt\": false to continue the last message)",
                      "true");
  }
  if (model.tokenizer == nullptr || model.chat_template == nullptr) {
    const std::string detail =
        model.tokenizer == nullptr ? "the model has no tokenizer" : model.chat_template_error;
    return ToApiError(
        CatalogError("CTXPAR-HTTP-008", {{"route", std::string(kPath)}, {"detail", detail}}),
        "messages");
  }
  Expected<std::string> prompt = model.chat_template->Prompt(*model.tokenizer, request);
  if (!prompt.ok()) return ToApiError(prompt.status(), "messages");
  return nlohmann::json{{"prompt", std::move(*prompt)}};
}

}  // namespace ctxpar::server
