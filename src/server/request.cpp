#include "server/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "ctxpar/error_catalog.h"
#include "ctxpar/tokenizer.h"
#include "server/json_read.h"

namespace ctxpar::server {
namespace {

using json = nlohmann::json;

ApiError RangeError(Route route, std::string_view param, std::string_view rule,
                    const std::string& value) {
  return server::RangeError(RoutePath(route), param, rule, value);
}

// The sampling fields every route shares, from `obj` (the body, or /generate's
// sampling_params), params spelled with `prefix`.
MaybeError ReadSampling(const json& obj, std::string_view prefix, Route route, ApiRequest* r) {
  SamplingParams& s = r->sampling;
  auto p = [&](std::string_view key) { return std::string(prefix) + std::string(key); };
  // OpenAI's max_completion_tokens replaces the deprecated max_tokens: with both, it wins, as in
  // SGLang and vLLM (max_completion_tokens or max_tokens).
  for (std::string_view key :
       route == Route::kGenerate
           ? std::vector<std::string_view>{"max_new_tokens"}
           : std::vector<std::string_view>{"max_tokens", "max_completion_tokens"}) {
    if (!Field(obj, key).is_null()) {
      CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, key), p(key), &s.max_new_tokens));
      r->max_tokens_given = true;
    }
  }
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, "temperature"), p("temperature"), &s.temperature));
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, "top_p"), p("top_p"), &s.top_p));
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, "top_k"), p("top_k"), &s.top_k));
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, "min_p"), p("min_p"), &s.min_p));
  CTXPAR_RETURN_IF_API_ERROR(
      Read(Field(obj, "frequency_penalty"), p("frequency_penalty"), &s.frequency_penalty));
  CTXPAR_RETURN_IF_API_ERROR(
      Read(Field(obj, "presence_penalty"), p("presence_penalty"), &s.presence_penalty));
  CTXPAR_RETURN_IF_API_ERROR(
      Read(Field(obj, "repetition_penalty"), p("repetition_penalty"), &s.repetition_penalty));
  if (const json& stop = Field(obj, "stop"); stop.is_array() && stop.size() > kMaxStopStrings) {
    return RangeError(route, p("stop"), fmt::format("at most {} strings", kMaxStopStrings),
                      fmt::format("a list of {}", stop.size()));
  }
  CTXPAR_RETURN_IF_API_ERROR(ReadStrings(Field(obj, "stop"), p("stop"), &s.stop));
  if (const json& ids = Field(obj, "stop_token_ids"); !ids.is_null()) {
    if (ids.is_array() && ids.size() > kMaxStopTokenIds) {
      return RangeError(route, p("stop_token_ids"), fmt::format("at most {} ids", kMaxStopTokenIds),
                        fmt::format("a list of {}", ids.size()));
    }
    CTXPAR_RETURN_IF_API_ERROR(ReadIds(ids, p("stop_token_ids"), &s.stop_token_ids));
  }
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, "ignore_eos"), p("ignore_eos"), &s.ignore_eos));
  CTXPAR_RETURN_IF_API_ERROR(
      Read(Field(obj, "skip_special_tokens"), p("skip_special_tokens"), &s.skip_special_tokens));
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, "no_stop_trim"), p("no_stop_trim"), &s.no_stop_trim));
  // SGLang's /generate spells the seed sampling_seed.
  const std::string_view seed_key =
      route == Route::kGenerate && !Field(obj, "sampling_seed").is_null() ? "sampling_seed"
                                                                          : "seed";
  if (const json& seed = Field(obj, seed_key); !seed.is_null()) {
    int64_t value = 0;
    CTXPAR_RETURN_IF_API_ERROR(Read(seed, p(seed_key), &value));
    if (value < 0) return RangeError(route, p(seed_key), "a non-negative integer", Quote(seed));
    s.seed = static_cast<uint64_t>(value);
  }
  for (std::string_view key : {"regex", "ebnf", "json_schema", "structural_tag"}) {
    if (const json& v = Field(obj, key); !v.is_null()) {
      return Unsupported(p(key), "constrained decoding is not implemented");
    }
  }
  for (std::string_view key : {"min_new_tokens", "min_tokens"}) {
    if (const json& v = Field(obj, key); !v.is_null() && v != 0) {
      return Unsupported(p(key), "a minimum number of new tokens is not implemented");
    }
  }
  int n = 1;
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(obj, "n"), p("n"), &n));
  if (n < 1 || n > kMaxChoices) {
    return RangeError(route, p("n"), fmt::format("in [1, {}]", kMaxChoices), std::to_string(n));
  }
  r->n = n;
  return std::nullopt;
}

// Fields that change what a response means and that ctxpar does not implement.
MaybeError RefuseUnsupported(const json& body) {
  if (const json& v = Field(body, "functions"); !v.is_null() && !v.empty()) {
    return Unsupported("functions", "function calls are not implemented");
  }
  if (const json& v = Field(body, "tool_choice"); !v.is_null() && v != "none" && v != "auto") {
    return Unsupported("tool_choice",
                       "forcing a tool call (constrained decoding) is not implemented");
  }
  if (const json& v = Field(body, "response_format");
      !v.is_null() && !(v.is_object() && Field(v, "type") == "text")) {
    return Unsupported("response_format", "only {\"type\": \"text\"} is implemented");
  }
  if (const json& v = Field(body, "logit_bias"); !v.is_null() && !v.empty()) {
    return Unsupported("logit_bias", "logit biases are not implemented");
  }
  if (const json& v = Field(body, "suffix"); !v.is_null() && v != "") {
    return Unsupported("suffix", "insertion (a suffix after the completion) is not implemented");
  }
  // Compared only as numbers: == on two deeply nested arrays would recurse as deep as they go.
  if (const json& v = Field(body, "best_of");
      !v.is_null() && !(v.is_number() && (v == 1 || v == Field(body, "n")))) {
    return Unsupported("best_of", "server-side best-of ranking is not implemented");
  }
  return std::nullopt;
}

MaybeError ReadModel(const json& body, const ModelContext& model, ApiRequest* r) {
  r->model = model.served_model_name;
  const json& v = Field(body, "model");
  if (v.is_null()) return std::nullopt;
  if (!v.is_string()) return TypeError("model", "a string", v);
  if (v.get<std::string>() != model.served_model_name) {
    return ToApiError(CatalogError("CTXPAR-HTTP-005", {{"model", PyRepr(v.get<std::string>())},
                                                       {"served", PyRepr(r->model)}}),
                      "model");
  }
  return std::nullopt;
}

MaybeError ReadStream(const json& body, Route route, ApiRequest* r) {
  CTXPAR_RETURN_IF_API_ERROR(Read(Field(body, "stream"), "stream", &r->stream));
  const json& options = Field(body, "stream_options");
  if (options.is_null()) return std::nullopt;
  if (!options.is_object()) return TypeError("stream_options", "an object", options);
  // As vLLM and SGLang do: options of a stream on a request that does not stream would be
  // silently void (no usage chunk without chunks).
  if (!r->stream) {
    return RangeError(route, "stream_options", "absent unless stream is true", Quote(options));
  }
  return Read(Field(options, "include_usage"), "stream_options.include_usage", &r->include_usage);
}

// Text as a completion prompt: special tokens written in it are tokens (the client renders the
// whole prompt, as with Hugging Face's tokenizer call).
std::vector<int32_t> EncodePrompt(const Tokenizer& tokenizer, std::string_view text) {
  EncodeOptions options;
  options.parse_special = true;
  return tokenizer.Encode(text, options);
}

// prompt / text / input_ids: one or a batch of texts or token-id lists.
MaybeError ReadPrompts(const json& v, std::string_view param, const ModelContext& model,
                       bool want_text, ApiRequest* r) {
  auto add_text = [&](const json& t) -> MaybeError {
    CTXPAR_RETURN_IF_API_ERROR(NeedTokenizer(model, param));
    CTXPAR_RETURN_IF_API_ERROR(
        CheckTextBytes(RoutePath(r->route), param, t.get_ref<const std::string&>().size(), model));
    r->prompts.push_back({EncodePrompt(*model.tokenizer, t.get<std::string>()), t});
    return std::nullopt;
  };
  auto add_ids = [&](const json& ids) -> MaybeError {
    PromptInput prompt;
    CTXPAR_RETURN_IF_API_ERROR(ReadIds(ids, param, &prompt.ids));
    if (want_text && model.tokenizer != nullptr) {
      Expected<std::string> text = model.tokenizer->Decode(prompt.ids, true);
      if (!text.ok()) return ToApiError(text.status(), std::string(param));
      prompt.text = std::move(*text);
    }
    r->prompts.push_back(std::move(prompt));
    return std::nullopt;
  };
  const std::string_view expected = "a string, a list of strings, or token ids";
  if (v.is_string()) return add_text(v);
  if (IsIdList(v) && !v.empty()) return add_ids(v);
  if (!v.is_array() || v.empty()) return TypeError(param, expected, v);
  if (v.size() > kMaxChoices) {
    return RangeError(r->route, param, fmt::format("at most {} prompts", kMaxChoices),
                      fmt::format("a list of {}", v.size()));
  }
  for (const json& item : v) {
    if (item.is_string()) {
      CTXPAR_RETURN_IF_API_ERROR(add_text(item));
    } else if (IsIdList(item)) {
      CTXPAR_RETURN_IF_API_ERROR(add_ids(item));
    } else {
      return TypeError(param, expected, v);
    }
  }
  return std::nullopt;
}

// A message's text content (a string or a list of text parts) into *out; null only where
// `null_ok` (an assistant message that made tool calls).
MaybeError ReadContent(const json& content, const std::string& at, bool null_ok, std::string* out) {
  if (content.is_string()) {
    *out = content.get<std::string>();
    return std::nullopt;
  }
  if (content.is_array()) {
    for (size_t j = 0; j < content.size(); ++j) {
      const json& part = content[j];
      const std::string part_at = fmt::format("{}.content[{}]", at, j);
      if (!part.is_object()) return TypeError(part_at, "a content part object", part);
      if (Field(part, "type") != "text") {
        return Unsupported(part_at + ".type", "only text content parts are implemented, not " +
                                                  Quote(Field(part, "type")));
      }
      const json& text = Field(part, "text");
      if (!text.is_string()) return TypeError(part_at + ".text", "a string", text);
      *out += text.get<std::string>();
    }
    return std::nullopt;
  }
  if (content.is_null() && null_ok) return std::nullopt;
  return TypeError(at + ".content", "a string or a list of text parts", content);
}

// A value nested deeper than kMaxJsonDepth, refused before it is copied or rendered.
MaybeError RefuseTooDeep(const json& v, const std::string& at) {
  if (!NestedTooDeep(v)) return std::nullopt;
  return RangeError(Route::kChat, at, fmt::format("nested at most {} levels deep", kMaxJsonDepth),
                    "a value nested deeper");
}

// An assistant message's tool_calls as templates read them (`ordered`: the same list in the
// client's key order): OpenAI sends each call's arguments as a JSON string, the templates
// (transformers' convention) expect the object.
MaybeError ReadToolCalls(const json& calls, const nlohmann::ordered_json& ordered,
                         const std::string& at, size_t* text_bytes, nlohmann::ordered_json* out) {
  if (!calls.is_array()) return TypeError(at, "a list of tool calls", calls);
  *out = nlohmann::ordered_json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string call_at = fmt::format("{}[{}]", at, k);
    const json& call = calls[k];
    const json& function = Field(call, "function");
    if (!call.is_object() || !function.is_object() || !Field(function, "name").is_string()) {
      return TypeError(call_at, "{\"type\": \"function\", \"function\": {\"name\", ...}}", call);
    }
    nlohmann::ordered_json c = ordered[k];
    if (const json& args = Field(function, "arguments"); args.is_string()) {
      const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
          args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) c["function"]["arguments"] = parsed;
    }
    *text_bytes += call.dump().size();
    out->push_back(std::move(c));
  }
  return std::nullopt;
}

MaybeError ReadMessages(const json& body, std::string_view raw, const ModelContext& model,
                        ApiRequest* r) {
  const json& v = Field(body, "messages");
  if (model.tokenizer == nullptr || model.chat_template == nullptr) {
    const std::string detail =
        model.tokenizer == nullptr ? "the model has no tokenizer" : model.chat_template_error;
    return ToApiError(
        CatalogError("CTXPAR-HTTP-008", {{"route", "/v1/chat/completions"}, {"detail", detail}}),
        "messages");
  }
  if (!v.is_array() || v.empty()) return TypeError("messages", "a non-empty list of messages", v);
  if (model.context_length > 0 && v.size() > static_cast<std::size_t>(model.context_length)) {
    return RangeError(
        Route::kChat, "messages",
        fmt::format("at most {} messages (the context's tokens)", model.context_length),
        fmt::format("a list of {}", v.size()));
  }
  // The body in the client's key order, read once a tool or a tool call needs it.
  nlohmann::ordered_json ordered;
  ChatRequest chat;
  chat.add_generation_prompt = r->add_generation_prompt;
  chat.continue_final_message = r->continue_final_message;
  std::size_t text_bytes = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    const json& m = v[i];
    if (!m.is_object()) return TypeError(at, "an object with role and content", m);
    const json& role = Field(m, "role");
    if (!role.is_string()) return TypeError(at + ".role", "a string", role);
    std::string name = role.get<std::string>();
    if (name == "developer") name = "system";
    if (name != "system" && name != "user" && name != "assistant" && name != "tool") {
      return RangeError(Route::kChat, at + ".role",
                        "one of system, developer, user, assistant, tool", Quote(role));
    }
    nlohmann::ordered_json message = {{"role", name}};
    const json& calls = Field(m, "tool_calls");
    const bool has_calls = name == "assistant" && !calls.is_null();
    std::string content;
    // OpenAI's schema: only an assistant message (one that made tool calls) may have none.
    CTXPAR_RETURN_IF_API_ERROR(ReadContent(Field(m, "content"), at, name == "assistant", &content));
    message["content"] = Field(m, "content").is_null() && has_calls
                             ? nlohmann::ordered_json()
                             : nlohmann::ordered_json(content);
    text_bytes += content.size();
    if (has_calls) {
      CTXPAR_RETURN_IF_API_ERROR(RefuseTooDeep(calls, at + ".tool_calls"));
      if (ordered.is_null()) ordered = nlohmann::ordered_json::parse(raw);
      CTXPAR_RETURN_IF_API_ERROR(ReadToolCalls(calls, ordered["messages"][i]["tool_calls"],
                                               at + ".tool_calls", &text_bytes,
                                               &message["tool_calls"]));
    }
    for (const char* key : {"tool_call_id", "name"}) {
      if (const json& value = Field(m, key); value.is_string()) {
        message[key] = value.get<std::string>();
        text_bytes += value.get<std::string>().size();
      }
    }
    CTXPAR_RETURN_IF_API_ERROR(
        CheckTextBytes(RoutePath(Route::kChat), "messages", text_bytes, model));
    chat.messages.push_back(std::move(message));
  }
  const json& tools = Field(body, "tools");
  const bool use_tools = !tools.is_null() && !tools.empty() && Field(body, "tool_choice") != "none";
  if (use_tools) {
    if (!tools.is_array()) return TypeError("tools", "a list of tools", tools);
    for (size_t k = 0; k < tools.size(); ++k) {
      const json& tool = tools[k];
      if (!tool.is_object() || Field(tool, "type") != "function" ||
          !Field(Field(tool, "function"), "name").is_string()) {
        return TypeError(fmt::format("tools[{}]", k),
                         "{\"type\": \"function\", \"function\": {\"name\", ...}}", tool);
      }
    }
    CTXPAR_RETURN_IF_API_ERROR(RefuseTooDeep(tools, "tools"));
    text_bytes += tools.dump().size();
    CTXPAR_RETURN_IF_API_ERROR(CheckTextBytes(RoutePath(Route::kChat), "tools", text_bytes, model));
    if (ordered.is_null()) ordered = nlohmann::ordered_json::parse(raw);
    chat.tools = ordered["tools"];
    r->parse_tool_calls = model.tool_call_parser != ToolCallParser::kNone;
    // Mistral's calls follow a control token that would otherwise decode to nothing.
    if (model.tool_call_parser == ToolCallParser::kMistral) r->sampling.skip_special_tokens = false;
  }
  Expected<std::vector<int32_t>> ids = model.chat_template->Encode(*model.tokenizer, chat);
  if (!ids.ok()) return ToApiError(ids.status(), "messages");
  r->prompts.push_back({std::move(*ids), ""});
  return std::nullopt;
}

// The logprob fields of each route.
MaybeError ReadLogprobs(const json& body, Route route, ApiRequest* r) {
  const std::string range = fmt::format("in [0, {}]", kMaxLogprobs);
  if (route == Route::kChat) {
    CTXPAR_RETURN_IF_API_ERROR(Read(Field(body, "logprobs"), "logprobs", &r->logprobs));
    CTXPAR_RETURN_IF_API_ERROR(Read(Field(body, "top_logprobs"), "top_logprobs", &r->top_logprobs));
    if (r->top_logprobs < 0 || r->top_logprobs > kMaxLogprobs) {
      return RangeError(route, "top_logprobs", range, std::to_string(r->top_logprobs));
    }
    if (r->top_logprobs > 0 && !r->logprobs) {  // OpenAI's rule
      return RangeError(route, "top_logprobs", "given only with \"logprobs\": true",
                        std::to_string(r->top_logprobs));
    }
  } else if (route == Route::kCompletions) {
    if (const json& v = Field(body, "logprobs"); !v.is_null()) {
      CTXPAR_RETURN_IF_API_ERROR(Read(v, "logprobs", &r->top_logprobs));
      if (r->top_logprobs < 0 || r->top_logprobs > kMaxLogprobs) {
        return RangeError(route, "logprobs", range, std::to_string(r->top_logprobs));
      }
      r->logprobs = true;
    }
    CTXPAR_RETURN_IF_API_ERROR(Read(Field(body, "echo"), "echo", &r->echo));
    r->prompt_logprobs = r->echo && r->logprobs;
  } else {
    CTXPAR_RETURN_IF_API_ERROR(Read(Field(body, "return_logprob"), "return_logprob", &r->logprobs));
    CTXPAR_RETURN_IF_API_ERROR(
        Read(Field(body, "top_logprobs_num"), "top_logprobs_num", &r->top_logprobs));
    if (r->top_logprobs < 0 || r->top_logprobs > kMaxLogprobs) {
      return RangeError(route, "top_logprobs_num", range, std::to_string(r->top_logprobs));
    }
    int start = -1;
    CTXPAR_RETURN_IF_API_ERROR(Read(Field(body, "logprob_start_len"), "logprob_start_len", &start));
    // Its upper bound (a position of every prompt) is checked once the prompts are read.
    if (start < -1) {
      return RangeError(route, "logprob_start_len", "-1 (none) or a prompt position >= 0",
                        std::to_string(start));
    }
    r->prompt_logprobs = r->logprobs && start >= 0;
    r->logprob_start_len = std::max(start, 0);
  }
  r->sampling.return_logprob = r->logprobs;
  r->sampling.top_logprobs_num = r->logprobs ? r->top_logprobs : 0;
  return std::nullopt;
}

// /generate's sampling_params as a list: one object per prompt of the batch (SGLang's
// GenerateReqInput), each over the request's defaults, with the same n.
MaybeError ReadPromptSampling(const json& params, ApiRequest* r) {
  if (params.size() != r->prompts.size()) {
    return RangeError(Route::kGenerate, "sampling_params",
                      fmt::format("a list of {} objects, one per prompt", r->prompts.size()),
                      fmt::format("a list of {}", params.size()));
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string at = fmt::format("sampling_params[{}]", i);
    if (!params[i].is_object()) return TypeError(at, "an object", params[i]);
    ApiRequest one;
    one.sampling = r->sampling;
    CTXPAR_RETURN_IF_API_ERROR(ReadSampling(params[i], at + ".", Route::kGenerate, &one));
    if (i == 0) {
      r->n = one.n;
    } else if (one.n != r->n) {
      return Unsupported(at + ".n", "every prompt of a batch takes the same n");
    }
    r->prompt_sampling.push_back(std::move(one.sampling));
  }
  return std::nullopt;
}

}  // namespace

std::string_view RoutePath(Route route) {
  switch (route) {
    case Route::kChat:
      return "/v1/chat/completions";
    case Route::kCompletions:
      return "/v1/completions";
    case Route::kGenerate:
      return "/generate";
  }
  return "";
}

std::string_view AllowedMethods(std::string_view path) {
  for (std::string_view get : {"/health", "/health_generate", "/v1/models", "/get_server_info",
                               "/get_model_info", "/tokenizer_info", "/metrics"}) {
    if (path == get) return "GET";
  }
  if (path.starts_with("/v1/models/")) return "GET";
  for (std::string_view post : {"/v1/chat/completions", "/v1/completions", "/generate", "/tokenize",
                                "/detokenize", "/apply-template"}) {
    if (path == post) return "POST";
  }
  if (path == "/flush_cache") return "GET, POST";  // as SGLang
  return "";
}

ApiExpected<ApiRequest> ParseApiRequest(Route route, std::string_view body,
                                        const ModelContext& model) {
  ApiExpected<json> parsed = ParseObject(RoutePath(route), body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& b = std::get<json>(parsed);
  ApiRequest r;
  r.route = route;
  CTXPAR_RETURN_IF_API_ERROR(ReadModel(b, model, &r));
  CTXPAR_RETURN_IF_API_ERROR(ReadStream(b, route, &r));
  CTXPAR_RETURN_IF_API_ERROR(RefuseUnsupported(b));
  CTXPAR_RETURN_IF_API_ERROR(ReadLogprobs(b, route, &r));
  if (route == Route::kGenerate) {
    r.sampling.max_new_tokens = 128;
    const json& params = Field(b, "sampling_params");
    if (!params.is_null() && !params.is_object() && !params.is_array()) {
      return TypeError("sampling_params", "an object, or a list of one per prompt", params);
    }
    if (!params.is_array()) {
      CTXPAR_RETURN_IF_API_ERROR(
          ReadSampling(params.is_null() ? json::object() : params, "sampling_params.", route, &r));
    }
    const bool has_text = !Field(b, "text").is_null();
    if (has_text && !Field(b, "input_ids").is_null()) {
      return RangeError(route, "input_ids", "given without text: send one of text and input_ids",
                        Quote(Field(b, "input_ids")));
    }
    const json& input = has_text ? Field(b, "text") : Field(b, "input_ids");
    if (input.is_null()) return Missing(RoutePath(route), "text");
    CTXPAR_RETURN_IF_API_ERROR(Read(Field(b, "return_text_in_logprobs"), "return_text_in_logprobs",
                                    &r.return_text_in_logprobs));
    CTXPAR_RETURN_IF_API_ERROR(
        ReadPrompts(input, has_text ? "text" : "input_ids", model, false, &r));
    if (params.is_array()) CTXPAR_RETURN_IF_API_ERROR(ReadPromptSampling(params, &r));
    for (const PromptInput& prompt : r.prompts) {
      if (r.logprob_start_len > 0 && r.logprob_start_len >= static_cast<int>(prompt.ids.size())) {
        return RangeError(route, "logprob_start_len",
                          fmt::format("below the prompt's {} tokens", prompt.ids.size()),
                          std::to_string(r.logprob_start_len));
      }
    }
  } else {
    r.sampling.max_new_tokens = 16;
    CTXPAR_RETURN_IF_API_ERROR(ReadSampling(b, "", route, &r));
    if (route == Route::kChat) {
      if (Field(b, "messages").is_null()) return Missing(RoutePath(route), "messages");
      CTXPAR_RETURN_IF_API_ERROR(Read(Field(b, "add_generation_prompt"), "add_generation_prompt",
                                      &r.add_generation_prompt));
      CTXPAR_RETURN_IF_API_ERROR(Read(Field(b, "continue_final_message"), "continue_final_message",
                                      &r.continue_final_message));
      if (r.add_generation_prompt && r.continue_final_message) {
        // Hugging Face's apply_chat_template refuses the pair too: a new turn cannot also
        // continue the last one.
        return RangeError(route, "continue_final_message",
                          "false when add_generation_prompt is true (send "
                          "\"add_generation_prompt\": false to continue the last message)",
                          "true");
      }
      CTXPAR_RETURN_IF_API_ERROR(ReadMessages(b, body, model, &r));
    } else {
      if (Field(b, "prompt").is_null()) return Missing(RoutePath(route), "prompt");
      CTXPAR_RETURN_IF_API_ERROR(ReadPrompts(Field(b, "prompt"), "prompt", model, r.echo, &r));
    }
  }
  if (r.num_choices() > kMaxChoices) {
    return RangeError(route, "n",
                      fmt::format("at most {} choices (n times the prompts)", kMaxChoices),
                      std::to_string(r.num_choices()));
  }
  return r;
}

GenerateRequest MakeGenerateRequest(const ApiRequest& request, int index,
                                    const ModelContext& model) {
  GenerateRequest g;
  g.prompt = request.prompts[index / request.n].ids;
  g.sampling = request.prompt_sampling.empty() ? request.sampling
                                               : request.prompt_sampling[index / request.n];
  g.return_prompt_logprobs = request.prompt_logprobs;
  if (g.sampling.seed) *g.sampling.seed += static_cast<uint64_t>(index % request.n);
  if (request.route == Route::kChat && !request.max_tokens_given) {
    const int64_t room = std::min<int64_t>(model.context_length, model.max_total_num_tokens) -
                         static_cast<int64_t>(g.prompt.size());
    // At least one token: a prompt that fills the room is refused (CTXPAR-ENGINE-005 / 006),
    // as SGLang refuses a prompt as long as the context, rather than prefilled for nothing.
    g.sampling.max_new_tokens = static_cast<int>(std::max<int64_t>(room, 1));
  }
  return g;
}

ApiError SubmitError(const Status& status, const ApiRequest& request, int index) {
  const std::string& id = status.error_id();
  const bool text = !request.prompts.empty() && !request.prompts[0].text.empty();
  const std::string_view prompt_field = request.route == Route::kChat ? "messages"
                                        : request.route == Route::kGenerate
                                            ? (text ? "text" : "input_ids")
                                            : "prompt";
  std::string param;
  if (id == "CTXPAR-SAMPLING-001") {
    if (std::optional<CatalogMatch> m = MatchCatalogMessage(status.message())) {
      for (const auto& [name, value] : m->values) {
        if (name == "field") param = value;
      }
    }
    const bool chat = request.route == Route::kChat;
    if (request.route == Route::kGenerate) {
      param = (request.prompt_sampling.empty()
                   ? std::string("sampling_params")
                   : fmt::format("sampling_params[{}]", index / request.n)) +
              "." + param;
    } else if (param == "max_new_tokens") {
      param = "max_tokens";
    } else if (param == "top_logprobs_num") {
      param = chat ? "top_logprobs" : "logprobs";
    }
  } else if (id == "CTXPAR-SAMPLING-002") {
    param = "stop_token_ids";
  } else if (id == "CTXPAR-ENGINE-009") {
    param = "stop";
  } else if (id == "CTXPAR-ENGINE-005" || id == "CTXPAR-ENGINE-006") {
    // The prompt's field when the prompt alone does not fit, else the token budget's.
    int64_t prompt = 0, limit = 0;
    if (std::optional<CatalogMatch> m = MatchCatalogMessage(status.message())) {
      for (const auto& [name, value] : m->values) {
        if (name == "prompt") prompt = std::strtoll(value.c_str(), nullptr, 10);
        if (name == "context" || name == "capacity")
          limit = std::strtoll(value.c_str(), nullptr, 10);
      }
    }
    param =
        request.max_tokens_given && prompt < limit
            ? (request.route == Route::kGenerate ? "sampling_params.max_new_tokens" : "max_tokens")
            : std::string(prompt_field);
  } else if (id == "CTXPAR-ENGINE-016") {
    param = prompt_field;
  } else if (id == "CTXPAR-ENGINE-010" || status.code() == StatusCode::kInvalidArgument) {
    param = request.route == Route::kChat       ? "messages"
            : request.route == Route::kGenerate ? "input_ids"
                                                : "prompt";
  }
  return ToApiError(status, std::move(param));
}

}  // namespace ctxpar::server
