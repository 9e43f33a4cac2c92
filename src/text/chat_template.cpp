#include "ctxpar/chat_template.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ctxpar/error_catalog.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"

namespace ctxpar {

using json = nlohmann::ordered_json;

struct ChatTemplate::Impl {
  std::string source;
  std::string bos_token;
  std::string eos_token;
  jinja::program program;
};

namespace {

// What raise_exception throws: not a std::exception, so the engine's statements let it pass
// without wrapping its message in their position reports.
struct TemplateRaised {
  std::string message;
};

Status Refused(std::string detail) {
  return CatalogError("CTXPAR-CHAT-003", {{"detail", std::move(detail)}});
}

// The engine's messages start with a newline and may span lines; the catalog's detail is one
// line.
std::string OneLine(std::string_view message) {
  std::string out;
  for (char c : message) {
    if (c == '\n') {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// A JSON value as the engine's value; strings marked as input when `input` is set (llama.cpp's
// from_json, without a round trip through text, so that bytes that are not UTF-8 pass as they
// came).
jinja::value ToValue(const json& j, bool input) {
  switch (j.type()) {
    case json::value_t::boolean:
      return jinja::mk_val<jinja::value_bool>(j.get<bool>());
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return jinja::mk_val<jinja::value_int>(j.get<int64_t>());
    case json::value_t::number_float:
      return jinja::mk_val<jinja::value_float>(j.get<double>());
    case json::value_t::string: {
      auto s = jinja::mk_val<jinja::value_string>(j.get_ref<const std::string&>());
      if (input) s->val_str.mark_input();
      return s;
    }
    case json::value_t::array: {
      auto a = jinja::mk_val<jinja::value_array>();
      for (const json& item : j) a->push_back(ToValue(item, input));
      return a;
    }
    case json::value_t::object: {
      auto o = jinja::mk_val<jinja::value_object>();
      for (const auto& [key, item] : j.items()) o->insert(key, ToValue(item, input));
      return o;
    }
    default:
      return jinja::mk_val<jinja::value_none>();
  }
}

jinja::value_func Function(const char* name, jinja::func_handler handler) {
  return jinja::mk_val<jinja::value_func>(name, std::move(handler));
}

// The messages as transformers hands them to the template: a key whose value is null is
// dropped (templates handle a missing key, many not a None), and the first of
// reasoning_content, thinking and reasoning that is set is also given as "thinking" (first, for
// gpt-oss's template) and as "reasoning_content" (last), so a template finds it by its name.
Expected<json> NormalizeMessages(const json& messages) {
  if (!messages.is_array()) return Refused("the messages are not a list");
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object()) return Refused(fmt::format("messages[{}] is not an object", i));
    json set = json::object();
    for (const auto& [key, value] : m.items()) {
      if (!value.is_null()) set[key] = value;
    }
    const json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (set.contains(key)) {
        reasoning = &set[key];
        break;
      }
    }
    if (reasoning == nullptr) {
      out.push_back(std::move(set));
      continue;
    }
    json aliased = {{"thinking", *reasoning}};
    for (const auto& [key, value] : set.items()) aliased[key] = value;
    aliased["reasoning_content"] = *reasoning;
    out.push_back(std::move(aliased));
  }
  return out;
}

// transformers' continue_final_message: the final message's content (its last text part)
// gets this tag, and the rendering is cut where the tag begins.
constexpr std::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

// Python's str.isspace() for one codepoint (what str.rstrip() removes).
bool IsPythonSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// The length of s without its trailing Python whitespace (well-formed UTF-8 characters only).
size_t RstripLength(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const auto lead = static_cast<uint8_t>(s[start]);
    const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (len != end - start) break;
    uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[start + k]) & 0x3F);
    if (!IsPythonSpace(cp)) break;
    end = start;
  }
  return end;
}

// The request with the tag after the final message's text, as transformers prepares it.
Expected<json> TagFinalMessage(const json& messages, std::string_view source) {
  if (messages.empty())
    return Refused("continue_final_message is set but the conversation is empty");
  json tagged = messages;
  json& last = tagged.back();
  if (!last.is_object() || !last.contains("content") || last["content"].is_null()) {
    return Refused("continue_final_message is set but the final message has no \"content\"");
  }
  if (source.find("content") == std::string_view::npos) {
    return Refused("continue_final_message is set but the template reads no \"content\"");
  }
  json& content = last["content"];
  if (content.is_string()) {
    content = content.get<std::string>() + std::string(kContinueTag);
    return tagged;
  }
  if (content.is_array()) {
    for (auto it = content.rbegin(); it != content.rend(); ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        (*it)["text"] = (*it)["text"].get<std::string>() + std::string(kContinueTag);
        return tagged;
      }
    }
  }
  return Refused("continue_final_message is set but the final message has no text to continue");
}

// Where the rendering of a tagged request ends: at the tag, and before the whitespace there
// when the template trimmed the tag's space (the content's trailing spaces were trimmed too).
Expected<size_t> ContinueEnd(std::string_view rendered) {
  const std::string_view word = kContinueTag.substr(0, kContinueTag.size() - 1);
  const size_t at = rendered.rfind(word);
  if (at == std::string_view::npos) {
    return Refused(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template");
  }
  if (rendered.substr(at, kContinueTag.size()) == kContinueTag) return at;
  return RstripLength(rendered.substr(0, at));
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::FromJinja(std::string_view source, std::string bos_token,
                                               std::string eos_token) {
  if (source.empty()) return CatalogError("CTXPAR-CHAT-001", {});
  auto impl = std::make_shared<Impl>();
  impl->bos_token = std::move(bos_token);
  impl->eos_token = std::move(eos_token);
  try {
    jinja::lexer lexer;
    jinja::lexer_result lexed = lexer.tokenize(std::string(source));
    impl->program = jinja::parse_from_tokens(lexed);
    impl->source = std::string(source);
  } catch (const std::exception& e) {
    return CatalogError("CTXPAR-CHAT-002", {{"detail", OneLine(e.what())}});
  }
  return ChatTemplate(std::move(impl));
}

Expected<ChatTemplate> ChatTemplate::ForTokenizer(const Tokenizer& tokenizer,
                                                  const std::string& template_file) {
  auto text = [&](int32_t id) -> std::string {
    if (id < 0 || id >= tokenizer.vocab_size()) return "";
    Expected<std::string> piece = tokenizer.TokenToPiece(id, /*render_special=*/true);
    return piece.ok() ? *piece : "";
  };
  std::string source = tokenizer.chat_template();
  if (!template_file.empty()) {
    auto refuse = [&](std::string reason) {
      return CatalogError("CTXPAR-CHAT-004", {{"path", template_file}, {"reason", reason}});
    };
    std::error_code ec;
    const std::filesystem::file_status status = std::filesystem::status(template_file, ec);
    if (status.type() == std::filesystem::file_type::not_found) return refuse("no such file");
    if (ec) return refuse(ec.message());
    if (status.type() != std::filesystem::file_type::regular) {
      return refuse("it is not a regular file");
    }
    std::ifstream in(template_file, std::ios::binary);
    if (!in) return refuse(std::strerror(errno));
    std::ostringstream read;
    read << in.rdbuf();
    if (in.bad()) return refuse(std::strerror(errno));
    source = read.str();
    if (source.empty()) return refuse("it is empty");
  }
  return FromJinja(source, text(tokenizer.bos_id()), text(tokenizer.eos_id()));
}

Expected<std::vector<TextSegment>> ChatTemplate::Render(const ChatRequest& request) const {
  if (request.continue_final_message && request.add_generation_prompt) {
    // transformers refuses the pair: a new turn cannot also continue the last one.
    return Refused("continue_final_message and add_generation_prompt are exclusive");
  }
  CTXPAR_ASSIGN_OR_RETURN(json messages, NormalizeMessages(request.messages));
  if (request.continue_final_message) {
    CTXPAR_ASSIGN_OR_RETURN(messages, TagFinalMessage(messages, impl_->source));
  }
  jinja::context ctx;
  if (request.now.has_value()) ctx.current_time = *request.now;
  ctx.set_val("messages", ToValue(messages, /*input=*/true));
  // transformers passes tools and documents always, None when there are none.
  ctx.set_val("tools", ToValue(request.tools, /*input=*/true));
  ctx.set_val("documents", jinja::mk_val<jinja::value_none>());
  ctx.set_val("add_generation_prompt",
              jinja::mk_val<jinja::value_bool>(request.add_generation_prompt));
  ctx.set_val("bos_token", jinja::mk_val<jinja::value_string>(impl_->bos_token));
  ctx.set_val("eos_token", jinja::mk_val<jinja::value_string>(impl_->eos_token));
  ctx.set_val("raise_exception",
              Function("raise_exception", [](const jinja::func_args& args) -> jinja::value {
                throw TemplateRaised{args.count() < 1 ? std::string("raise_exception()")
                                                      : args.get_pos(0)->as_string().str()};
              }));
  // The engine's own strftime_now reads std::localtime's shared buffer; this one is reentrant.
  ctx.set_val("strftime_now",
              Function("strftime_now", [](const jinja::func_args& args) -> jinja::value {
                args.ensure_vals<jinja::value_string>();
                std::tm local{};
                localtime_r(&args.ctx.current_time, &local);
                char buf[256];
                const std::string format = args.get_pos(0)->as_string().str();
                const size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
                if (n == 0 && !format.empty()) {
                  throw std::runtime_error("strftime_now: cannot format '" + format + "'");
                }
                return jinja::mk_val<jinja::value_string>(std::string(buf, n));
              }));
  if (request.extra.is_object()) {
    for (const auto& [key, value] : request.extra.items()) {
      ctx.set_val(key, ToValue(value, /*input=*/true));
    }
  }
  std::vector<TextSegment> segments;
  try {
    jinja::runtime runtime(ctx);
    const jinja::value_string parts =
        jinja::runtime::gather_string_parts(runtime.execute(impl_->program));
    for (const jinja::string_part& part : parts->val_str.parts) {
      if (!part.val.empty()) segments.push_back({part.val, !part.is_input});
    }
  } catch (const TemplateRaised& raised) {
    return Refused(raised.message);
  } catch (const std::exception& e) {
    return Refused(fmt::format("the template failed on it: {}", OneLine(e.what())));
  }
  if (!request.continue_final_message) return segments;
  std::string rendered;
  for (const TextSegment& s : segments) rendered += s.text;
  CTXPAR_ASSIGN_OR_RETURN(size_t end, ContinueEnd(rendered));
  size_t at = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (at + segments[i].text.size() >= end) {  // the cut is in this segment
      segments[i].text.resize(end - at);
      segments.resize(segments[i].text.empty() ? i : i + 1);
      break;
    }
    at += segments[i].text.size();
  }
  return segments;
}

Expected<std::vector<TextSegment>> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                        bool add_generation_prompt,
                                                        bool continue_final_message) const {
  ChatRequest request;
  request.messages = ChatMessagesJson(messages);
  request.add_generation_prompt = add_generation_prompt;
  request.continue_final_message = continue_final_message;
  return Render(request);
}

Expected<std::string> ChatTemplate::Apply(const ChatRequest& request) const {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<TextSegment> segments, Render(request));
  std::string out;
  for (const TextSegment& s : segments) out += s.text;
  return out;
}

Expected<std::string> ChatTemplate::Apply(std::span<const ChatMessage> messages,
                                          bool add_generation_prompt,
                                          bool continue_final_message) const {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<TextSegment> segments,
                          Render(messages, add_generation_prompt, continue_final_message));
  std::string out;
  for (const TextSegment& s : segments) out += s.text;
  return out;
}

Expected<std::vector<TextSegment>> ChatTemplate::RenderPrompt(const Tokenizer& tokenizer,
                                                              const ChatRequest& request) const {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<TextSegment> segments, Render(request));
  // What add_special puts around any text: BOS first when the tokenizer adds it, EOS last.
  const std::vector<int32_t> specials = tokenizer.Encode("", {.add_special = true});
  const bool adds_bos = !specials.empty() && specials.front() == tokenizer.bos_id();
  const bool adds_eos = !specials.empty() && specials.back() == tokenizer.eos_id();
  const std::string& bos = impl_->bos_token;
  const std::string& eos = impl_->eos_token;
  if (adds_bos && !bos.empty() && !segments.empty() && segments.front().parse_special &&
      segments.front().text.starts_with(bos)) {
    segments.front().text.erase(0, bos.size());
  }
  if (adds_eos && !eos.empty() && !segments.empty() && segments.back().parse_special &&
      segments.back().text.ends_with(eos)) {
    segments.back().text.resize(segments.back().text.size() - eos.size());
  }
  return segments;
}

Expected<std::string> ChatTemplate::Prompt(const Tokenizer& tokenizer,
                                           const ChatRequest& request) const {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<TextSegment> segments, RenderPrompt(tokenizer, request));
  std::string out;
  for (const TextSegment& s : segments) out += s.text;
  return out;
}

Expected<std::vector<int32_t>> ChatTemplate::Encode(const Tokenizer& tokenizer,
                                                    const ChatRequest& request) const {
  CTXPAR_ASSIGN_OR_RETURN(std::vector<TextSegment> segments, RenderPrompt(tokenizer, request));
  return tokenizer.Encode(segments);
}

Expected<std::vector<int32_t>> ChatTemplate::Encode(const Tokenizer& tokenizer,
                                                    std::span<const ChatMessage> messages,
                                                    bool add_generation_prompt,
                                                    bool continue_final_message) const {
  ChatRequest request;
  request.messages = ChatMessagesJson(messages);
  request.add_generation_prompt = add_generation_prompt;
  request.continue_final_message = continue_final_message;
  return Encode(tokenizer, request);
}

const std::string& ChatTemplate::source() const { return impl_->source; }
const std::string& ChatTemplate::bos_token() const { return impl_->bos_token; }
const std::string& ChatTemplate::eos_token() const { return impl_->eos_token; }

json ChatMessagesJson(std::span<const ChatMessage> messages) {
  json out = json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

}  // namespace ctxpar
