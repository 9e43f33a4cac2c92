#include "server/response.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "ctxpar/tokenizer.h"
#include "server/tool_calls.h"

namespace ctxpar::server {
namespace {

using json = nlohmann::ordered_json;

json FinishName(FinishReason reason) {
  return reason == FinishReason::kNone ? json() : json(std::string(FinishReasonName(reason)));
}

// OpenAI's bytes: the UTF-8 bytes as numbers 0-255.
std::vector<int> Bytes(const std::string& s) {
  std::vector<int> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

// Characters (code points) in text: a byte that does not continue a UTF-8 sequence starts one.
// A token may end inside a character; its bytes then count where the character starts.
std::size_t Characters(std::string_view text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

std::string NewResponseId(Route route) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string hex = fmt::format("{:016x}{:016x}", rng(), rng());
  switch (route) {
    case Route::kChat:
      return "chatcmpl-" + hex;
    case Route::kCompletions:
      return "cmpl-" + hex;
    case Route::kGenerate:
      break;
  }
  return hex;
}

std::string SseFrame(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

ResponseBuilder::ResponseBuilder(const ApiRequest& request, const ModelContext& model,
                                 std::string id, int64_t created)
    : request_(request),
      model_(model),
      id_(std::move(id)),
      created_(created),
      choices_(request.num_choices()),
      started_(request.num_choices(), false),
      text_offset_(request.num_choices(), 0) {}

void ResponseBuilder::Record(int index, const RequestUpdate& u) {
  ChoiceOutput& c = choices_[index];
  c.tokens.insert(c.tokens.end(), u.tokens.begin(), u.tokens.end());
  c.text += u.text;
  c.logprobs.insert(c.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
  if (!u.prompt_logprobs.empty()) c.prompt_logprobs = u.prompt_logprobs;
  c.finish = u.finish;
  if (u.finish != FinishReason::kNone) {
    c.finish_detail = u.finish_detail;
    c.matched_token = u.matched_token;
  }
  c.prompt_tokens = u.prompt_tokens;
  c.completion_tokens = u.completion_tokens;
  c.cached_tokens = u.cached_tokens;
  c.spec_verify_ct = u.spec_verify_ct;
  c.spec_verify_tokens = u.spec_verify_tokens;
}

void ResponseBuilder::Apply(int index, const RequestUpdate& update) { Record(index, update); }

bool ResponseBuilder::finished() const {
  for (const ChoiceOutput& c : choices_) {
    if (c.finish == FinishReason::kNone) return false;
  }
  return true;
}

std::string ResponseBuilder::Piece(int32_t token) const {
  if (model_.tokenizer != nullptr) {
    Expected<std::string> piece = model_.tokenizer->TokenToPiece(token, true);
    if (piece.ok()) return *piece;
  }
  return fmt::format("token_id:{}", token);
}

json ResponseBuilder::MatchedStop(const ChoiceOutput& c) const {
  if (c.finish != FinishReason::kStop) return json();
  if (c.matched_token) return *c.matched_token;
  return c.finish_detail.empty() ? json() : json(c.finish_detail);
}

json ResponseBuilder::Usage() const {
  int prompt = 0;
  int completion = 0;
  int cached = 0;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (i % request_.n == 0) {
      prompt += choices_[i].prompt_tokens;
      cached += choices_[i].cached_tokens;
    }
    completion += choices_[i].completion_tokens;
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json ResponseBuilder::ChunkBase() const {
  json chunk = {
      {"id", id_},
      {"object", request_.route == Route::kChat ? "chat.completion.chunk" : "text_completion"},
      {"created", created_},
      {"model", request_.model}};
  if (request_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json ResponseBuilder::ChatLogprobs(const std::vector<TokenLogprob>& logprobs) const {
  json content = json::array();
  for (const TokenLogprob& t : logprobs) {
    const std::string piece = Piece(t.token);
    json top = json::array();
    for (const auto& [token, logprob] : t.top) {
      const std::string alt = Piece(token);
      top.push_back({{"token", alt}, {"logprob", logprob}, {"bytes", Bytes(alt)}});
    }
    content.push_back(
        {{"token", piece}, {"logprob", t.logprob}, {"bytes", Bytes(piece)}, {"top_logprobs", top}});
  }
  return {{"content", std::move(content)}};
}

json ResponseBuilder::CompletionLogprobs(int index,
                                         const std::vector<std::optional<TokenLogprob>>* prompt,
                                         const std::vector<TokenLogprob>& output) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  auto add = [&](int32_t token, const TokenLogprob* t) {
    const std::string piece = Piece(token);
    tokens.push_back(piece);
    offsets.push_back(text_offset_[index]);
    text_offset_[index] += Characters(piece);
    if (t == nullptr) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      return;
    }
    token_logprobs.push_back(t->logprob);
    json alternatives = json::object();
    // Most likely first. A key is the text the client reads: the bytes of a partial character
    // become U+FFFD as the serializer writes them, and tokens that read alike keep the likeliest.
    for (const auto& [alt, logprob] : t->top) {
      const std::string key =
          json::parse(json(Piece(alt)).dump(-1, ' ', false, json::error_handler_t::replace))
              .get<std::string>();
      if (!alternatives.contains(key)) alternatives[key] = logprob;
    }
    top.push_back(std::move(alternatives));
  };
  if (prompt != nullptr) {
    const std::vector<int32_t>& ids = request_.prompts[index / request_.n].ids;
    for (size_t i = 0; i < ids.size(); ++i) {
      const TokenLogprob* t = i < prompt->size() && (*prompt)[i] ? &*(*prompt)[i] : nullptr;
      add(ids[i], t);
    }
  }
  for (const TokenLogprob& t : output) add(t.token, &t);
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

json ResponseBuilder::GenerateObject(int index) const {
  const ChoiceOutput& c = choices_[index];
  json finish;
  if (c.finish == FinishReason::kStop) {
    finish = {{"type", "stop"}, {"matched", MatchedStop(c)}};
  } else if (c.finish == FinishReason::kLength) {
    finish = {{"type", "length"}, {"length", c.completion_tokens}};
  } else if (c.finish == FinishReason::kAbort) {
    finish = {{"type", "abort"}, {"message", c.finish_detail}};
  }
  json meta = {{"id", request_.num_choices() == 1 ? id_ : fmt::format("{}-{}", id_, index)},
               {"finish_reason", finish},
               {"prompt_tokens", c.prompt_tokens},
               {"completion_tokens", c.completion_tokens},
               {"cached_tokens", c.cached_tokens}};
  if (model_.speculative) {
    // SGLang's: the verify steps, and the tokens each gave on average (accepted drafts + 1).
    meta["spec_verify_ct"] = c.spec_verify_ct;
    meta["spec_accept_length"] =
        c.spec_verify_ct > 0 ? double(c.spec_verify_tokens) / c.spec_verify_ct : 0.0;
  }
  if (request_.logprobs) {
    auto triple = [&](float logprob, int32_t token) {
      return json::array(
          {logprob, token, request_.return_text_in_logprobs ? json(Piece(token)) : json()});
    };
    json out = json::array(), top = json::array();
    for (const TokenLogprob& t : c.logprobs) {
      out.push_back(triple(t.logprob, t.token));
      json alternatives = json::array();
      for (const auto& [alt, logprob] : t.top) alternatives.push_back(triple(logprob, alt));
      top.push_back(std::move(alternatives));
    }
    meta["output_token_logprobs"] = std::move(out);
    if (request_.top_logprobs > 0) meta["output_top_logprobs"] = std::move(top);
  }
  if (request_.prompt_logprobs) {
    const std::vector<int32_t>& ids = request_.prompts[index / request_.n].ids;
    json in = json::array();
    for (size_t i = request_.logprob_start_len; i < ids.size(); ++i) {
      const bool known = i < c.prompt_logprobs.size() && c.prompt_logprobs[i];
      in.push_back(json::array({known ? json(c.prompt_logprobs[i]->logprob) : json(), ids[i],
                                request_.return_text_in_logprobs ? json(Piece(ids[i])) : json()}));
    }
    meta["input_token_logprobs"] = std::move(in);
  }
  return {
      {"text", c.text}, {"output_ids", c.tokens}, {"meta_info", std::move(meta)}, {"index", index}};
}

std::string ResponseBuilder::StreamUpdate(int index, const RequestUpdate& u) {
  Record(index, u);
  const ChoiceOutput& c = choices_[index];
  std::string frames;
  if (request_.route == Route::kGenerate) {
    if (!u.tokens.empty() || u.finish != FinishReason::kNone)
      frames = SseFrame(GenerateObject(index));
    return frames;
  }
  const bool first = !started_[index];
  started_[index] = true;
  json chunk = ChunkBase();
  if (request_.route == Route::kChat) {
    if (first) {
      chunk["choices"] = json::array({{{"index", index},
                                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
      frames += SseFrame(chunk);
    }
    if (request_.parse_tool_calls) {
      // The calls are known once the text is whole: the content and the calls in one delta.
      if (u.finish == FinishReason::kNone) return frames;
      chunk["choices"] = json::array({{{"index", index},
                                       {"delta", ChatMessage(c)},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
      chunk["choices"][0]["delta"].erase("role");
      frames += SseFrame(chunk);
      chunk["choices"] = json::array({{{"index", index},
                                       {"delta", json::object()},
                                       {"logprobs", nullptr},
                                       {"finish_reason", ChoiceFinish(c)},
                                       {"matched_stop", MatchedStop(c)}}});
      return frames + SseFrame(chunk);
    }
    if (!u.text.empty() || (request_.logprobs && !u.logprobs.empty())) {
      chunk["choices"] =
          json::array({{{"index", index},
                        {"delta", {{"content", u.text}}},
                        {"logprobs", request_.logprobs ? ChatLogprobs(u.logprobs) : json()},
                        {"finish_reason", nullptr}}});
      frames += SseFrame(chunk);
    }
    if (u.finish != FinishReason::kNone) {
      chunk["choices"] = json::array({{{"index", index},
                                       {"delta", json::object()},
                                       {"logprobs", nullptr},
                                       {"finish_reason", FinishName(u.finish)},
                                       {"matched_stop", MatchedStop(c)}}});
      frames += SseFrame(chunk);
    }
    return frames;
  }
  std::string text = u.text;
  const std::vector<std::optional<TokenLogprob>>* prompt = nullptr;
  if (first && request_.echo) {
    text = request_.prompts[index / request_.n].text + text;
    prompt = &c.prompt_logprobs;
  }
  if (text.empty() && u.finish == FinishReason::kNone &&
      !(request_.logprobs && !u.logprobs.empty()))
    return frames;
  chunk["choices"] = json::array(
      {{{"index", index},
        {"text", text},
        {"logprobs", request_.logprobs ? CompletionLogprobs(index, prompt, u.logprobs) : json()},
        {"finish_reason", FinishName(u.finish)}}});
  if (u.finish != FinishReason::kNone) chunk["choices"][0]["matched_stop"] = MatchedStop(c);
  return SseFrame(chunk);
}

std::string ResponseBuilder::StreamEnd() const {
  std::string frames;
  if (request_.include_usage && request_.route != Route::kGenerate) {
    json chunk = ChunkBase();
    chunk["choices"] = json::array();
    chunk["usage"] = Usage();
    frames += SseFrame(chunk);
  }
  frames += kSseDone;
  return frames;
}

json ResponseBuilder::ChatMessage(const ChoiceOutput& c) const {
  if (!request_.parse_tool_calls) return {{"role", "assistant"}, {"content", c.text}};
  ToolCalls calls = ExtractToolCalls(model_.tool_call_parser, c.text);
  json message = {{"role", "assistant"}};
  message["content"] = calls.calls.empty() || !calls.content.empty() ? json(calls.content) : json();
  if (!calls.calls.empty()) {
    json list = json::array();
    for (size_t k = 0; k < calls.calls.size(); ++k) {
      json call = calls.calls[k];
      call["index"] = k;
      list.push_back(std::move(call));
    }
    message["tool_calls"] = std::move(list);
  }
  return message;
}

json ResponseBuilder::ChoiceFinish(const ChoiceOutput& c) const {
  if (request_.parse_tool_calls && c.finish == FinishReason::kStop &&
      !ExtractToolCalls(model_.tool_call_parser, c.text).calls.empty()) {
    return "tool_calls";
  }
  return FinishName(c.finish);
}

json ResponseBuilder::Final() {
  if (request_.route == Route::kGenerate) {
    if (choices_.size() == 1) return GenerateObject(0);
    json all = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) all.push_back(GenerateObject(static_cast<int>(i)));
    return all;
  }
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceOutput& c = choices_[i];
    const int index = static_cast<int>(i);
    json choice = {{"index", index}};
    if (request_.route == Route::kChat) {
      choice["message"] = ChatMessage(c);
      choice["logprobs"] = request_.logprobs ? ChatLogprobs(c.logprobs) : json();
    } else {
      const PromptInput& prompt = request_.prompts[index / request_.n];
      choice["text"] = request_.echo ? prompt.text + c.text : c.text;
      text_offset_[i] = 0;
      choice["logprobs"] =
          request_.logprobs
              ? CompletionLogprobs(index, request_.echo ? &c.prompt_logprobs : nullptr, c.logprobs)
              : json();
    }
    choice["finish_reason"] = ChoiceFinish(c);
    choice["matched_stop"] = MatchedStop(c);
    choices.push_back(std::move(choice));
  }
  return {{"id", id_},
          {"object", request_.route == Route::kChat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", request_.model},
          {"choices", std::move(choices)},
          {"usage", Usage()}};
}

}  // namespace ctxpar::server
