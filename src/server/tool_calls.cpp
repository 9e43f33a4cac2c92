#include "server/tool_calls.h"

#include <fmt/format.h>

#include <random>
#include <utility>
#include <vector>

namespace ctxpar::server {

namespace {

using json = nlohmann::ordered_json;

std::string CallId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

std::string_view Trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// OpenAI's call object of {"name", args_key: object or string}, or nullopt.
std::optional<json> CallOf(const json& j, std::initializer_list<const char*> args_keys) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  json arguments = json::object();
  for (const char* key : args_keys) {
    if (j.contains(key)) {
      arguments = j[key];
      break;
    }
  }
  if (!arguments.is_object() && !arguments.is_string()) return std::nullopt;
  return json{
      {"id", CallId()},
      {"type", "function"},
      {"function",
       {{"name", j["name"]},
        {"arguments", arguments.is_string() ? arguments.get<std::string>() : arguments.dump()}}}};
}

std::optional<json> CallOf(std::string_view text, std::initializer_list<const char*> args_keys) {
  return CallOf(json::parse(text, nullptr, /*allow_exceptions=*/false), args_keys);
}

ToolCalls Hermes(std::string_view text) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  ToolCalls out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t open = text.find(kOpen, at);
    const std::size_t close =
        open == std::string_view::npos ? open : text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) break;
    const std::string_view inner = text.substr(open + kOpen.size(), close - open - kOpen.size());
    const std::optional<json> call = CallOf(Trim(inner), {"arguments", "parameters"});
    const std::size_t end = close + kClose.size();
    if (call.has_value()) {
      out.content.append(text.substr(at, open - at));
      out.calls.push_back(*call);
    } else {
      out.content.append(text.substr(at, end - at));
    }
    at = end;
  }
  if (at < text.size()) out.content.append(text.substr(at));
  if (!out.calls.empty()) out.content = std::string(Trim(out.content));
  return out;
}

ToolCalls Llama3(std::string_view text) {
  ToolCalls out;
  constexpr std::string_view kPythonTag = "<|python_tag|>";
  std::string_view body = text;
  std::string_view before;
  if (const std::size_t tag = body.find(kPythonTag); tag != std::string_view::npos) {
    before = body.substr(0, tag);
    body = body.substr(tag + kPythonTag.size());
  } else if (const std::size_t brace = body.find('{'); brace != std::string_view::npos) {
    before = body.substr(0, brace);
    body = body.substr(brace);
  } else {
    out.content = std::string(text);
    return out;
  }
  std::vector<json> calls;
  for (std::size_t at = 0; at <= body.size();) {
    const std::size_t semi = std::min(body.find(';', at), body.size());
    const std::string_view part = Trim(body.substr(at, semi - at));
    if (!part.empty()) {
      std::optional<json> call = CallOf(part, {"parameters", "arguments"});
      if (!call.has_value()) {
        out.content = std::string(text);
        return out;
      }
      calls.push_back(std::move(*call));
    }
    at = semi + 1;
  }
  if (calls.empty()) {
    out.content = std::string(text);
    return out;
  }
  out.content = std::string(Trim(before));
  for (json& c : calls) out.calls.push_back(std::move(c));
  return out;
}

// Mistral's calls after the [TOOL_CALLS] control token: one JSON array of {"name", "arguments"}
// (v0.3, Nemo), or name[ARGS]{...} after each [TOOL_CALLS] (the v11 tokenizers' format; a
// [CALL_ID] after the name is skipped).
ToolCalls Mistral(std::string_view text) {
  constexpr std::string_view kTag = "[TOOL_CALLS]", kArgs = "[ARGS]";
  const std::size_t tag = text.find(kTag);
  if (tag == std::string_view::npos) return {std::string(text), json::array()};
  std::vector<json> calls;
  bool whole = true;
  const std::string_view body = Trim(text.substr(tag + kTag.size()));
  if (body.starts_with('[')) {
    const json list = json::parse(body, nullptr, /*allow_exceptions=*/false);
    whole = list.is_array() && !list.empty();
    for (std::size_t i = 0; whole && i < list.size(); ++i) {
      std::optional<json> call = CallOf(list[i], {"arguments"});
      whole = call.has_value();
      if (whole) calls.push_back(std::move(*call));
    }
  } else {
    for (std::size_t at = tag; whole && at < text.size();) {
      const std::size_t next = std::min(text.find(kTag, at + kTag.size()), text.size());
      const std::string_view part = text.substr(at + kTag.size(), next - at - kTag.size());
      const std::size_t args = part.find(kArgs);
      // Some name the call before its arguments: name[CALL_ID]id[ARGS]{...}.
      const json name = std::string(Trim(part.substr(0, std::min(args, part.find("[CALL_ID]")))));
      whole = args != std::string_view::npos && !name.get<std::string>().empty();
      std::optional<json> call;
      if (whole) {
        call = CallOf(json{{"name", name},
                           {"arguments", json::parse(Trim(part.substr(args + kArgs.size())),
                                                     nullptr, /*allow_exceptions=*/false)}},
                      {"arguments"});
      }
      whole = call.has_value() && !call->at("function").at("arguments").get<std::string>().empty();
      if (whole) calls.push_back(std::move(*call));
      at = next;
    }
  }
  if (!whole) return {std::string(text), json::array()};
  ToolCalls out{std::string(Trim(text.substr(0, tag))), json::array()};
  for (json& c : calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace

std::optional<ToolCallParser> ToolCallParserByName(std::string_view name) {
  if (name.empty()) return ToolCallParser::kNone;
  if (name == "qwen25" || name == "qwen" || name == "hermes") return ToolCallParser::kHermes;
  if (name == "llama3") return ToolCallParser::kLlama3;
  if (name == "mistral") return ToolCallParser::kMistral;
  return std::nullopt;
}

ToolCalls ExtractToolCalls(ToolCallParser parser, std::string_view text) {
  switch (parser) {
    case ToolCallParser::kHermes:
      return Hermes(text);
    case ToolCallParser::kLlama3:
      return Llama3(text);
    case ToolCallParser::kMistral:
      return Mistral(text);
    case ToolCallParser::kNone:
      break;
  }
  return {std::string(text), json::array()};
}

}  // namespace ctxpar::server
