// POST /tokenize and /detokenize (request.h).
#include <fmt/format.h>

#include "ctxpar/error_catalog.h"
#include "ctxpar/tokenizer.h"
#include "server/json_read.h"
#include "server/request.h"

namespace ctxpar::server {
namespace {

using json = nlohmann::json;

// The body of /tokenize or /detokenize, which need `field` and the model's tokenizer.
ApiExpected<json> TokenizerBody(std::string_view path, std::string_view body,
                                std::string_view field, const ModelContext& model) {
  ApiExpected<json> parsed = ParseObject(path, body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  if (Field(std::get<json>(parsed), field).is_null()) return Missing(path, field);
  CTXPAR_RETURN_IF_API_ERROR(NeedTokenizer(model, field));
  return parsed;
}

}  // namespace

ApiExpected<json> Tokenize(std::string_view body, const ModelContext& model) {
  ApiExpected<json> parsed = TokenizerBody("/tokenize", body, "prompt", model);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& b = std::get<json>(parsed);
  const json& prompt = Field(b, "prompt");
  bool add_special = true;
  CTXPAR_RETURN_IF_API_ERROR(
      Read(Field(b, "add_special_tokens"), "add_special_tokens", &add_special));
  EncodeOptions options;
  options.add_special = add_special;
  options.parse_special = true;
  auto encode = [&](const json& text) {
    return model.tokenizer->Encode(text.get<std::string>(), options);
  };
  json result = {{"max_model_len", model.context_length}};
  if (prompt.is_array() && prompt.size() > kMaxChoices) {
    return RangeError("/tokenize", "prompt", fmt::format("at most {} texts", kMaxChoices),
                      fmt::format("a list of {}", prompt.size()));
  }
  auto check_bytes = [&](const json& text) -> MaybeError {
    if (!text.is_string()) return std::nullopt;
    return CheckTextBytes("/tokenize", "prompt", text.get_ref<const std::string&>().size(), model);
  };
  CTXPAR_RETURN_IF_API_ERROR(check_bytes(prompt));
  if (prompt.is_array()) {
    for (const json& text : prompt) CTXPAR_RETURN_IF_API_ERROR(check_bytes(text));
  }
  if (prompt.is_string()) {
    std::vector<int32_t> ids = encode(prompt);
    result["count"] = ids.size();
    result["tokens"] = std::move(ids);
    return result;
  }
  std::vector<std::string> texts;
  CTXPAR_RETURN_IF_API_ERROR(ReadStrings(prompt, "prompt", &texts));
  json all = json::array();
  json counts = json::array();
  for (const json& text : prompt) {
    std::vector<int32_t> ids = encode(text);
    counts.push_back(ids.size());
    all.push_back(std::move(ids));
  }
  result["tokens"] = std::move(all);
  result["count"] = std::move(counts);
  return result;
}

ApiExpected<json> Detokenize(std::string_view body, const ModelContext& model) {
  ApiExpected<json> parsed = TokenizerBody("/detokenize", body, "tokens", model);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& b = std::get<json>(parsed);
  const json& tokens = Field(b, "tokens");
  // Far beyond any context, and bounded so that the text of any body is.
  constexpr std::size_t kMaxIds = std::size_t{1} << 20;
  if (tokens.is_array() && tokens.size() > kMaxIds) {
    return RangeError("/detokenize", "tokens", fmt::format("at most {} ids", kMaxIds),
                      fmt::format("a list of {}", tokens.size()));
  }
  std::vector<int32_t> ids;
  CTXPAR_RETURN_IF_API_ERROR(ReadIds(tokens, "tokens", &ids));
  const int vocab = model.tokenizer->vocab_size();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return RangeError("/detokenize", fmt::format("tokens[{}]", i),
                        fmt::format("a token id in [0, {})", vocab), std::to_string(ids[i]));
    }
  }
  bool skip_special = false;
  CTXPAR_RETURN_IF_API_ERROR(
      Read(Field(b, "skip_special_tokens"), "skip_special_tokens", &skip_special));
  Expected<std::string> text = model.tokenizer->Decode(ids, !skip_special);
  if (!text.ok()) return ToApiError(text.status(), "tokens");
  return json{{"text", *text}, {"prompt", *text}};
}

}  // namespace ctxpar::server
