// The server's protocol layer: OpenAI / SGLang request bodies -> engine requests, errors as
// OpenAI's error object, and updates -> responses and SSE frames, checked against the shapes
// OpenAI's API reference and SGLang document (written out here) and, for chat encoding, against
// llama.cpp's tokenization of the rendered conversation (tests/data/tokenizer/golden.json).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ctxpar/chat_template.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/gguf.h"
#include "ctxpar/tokenizer.h"
#include "server/api_error.h"
#include "server/request.h"
#include "server/response.h"
#include "text/byte_level.h"

namespace ctxpar::server {
namespace {

using json = nlohmann::json;

// A byte-level vocabulary without merges: every byte is its own token (ids in GPT-2's
// byte-to-unicode order), plus ChatML's two control tokens. Text encodes to one token per byte.
Tokenizer TinyTokenizer() {
  TokenizerSpec spec;
  testing::AddByteLevelTokens(spec);
  spec.token_types.assign(256, 1);
  for (const char* special : {"<|im_start|>", "<|im_end|>"}) {
    spec.tokens.push_back(special);
    spec.token_types.push_back(3);
  }
  spec.eos_id = 257;
  auto t = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

constexpr int32_t kImStart = 256;
constexpr int32_t kImEnd = 257;

class ProtocolTest : public ::testing::Test {
 protected:
  ProtocolTest()
      : tok_(TinyTokenizer()),
        tmpl_(ChatTemplate::FromJinja("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                                      "{{ m.content }}<|im_end|>\n{% endfor %}"
                                      "{% if add_generation_prompt %}<|im_start|>assistant\n"
                                      "{% endif %}")
                  .value()) {
    model_.served_model_name = "smol";
    model_.tokenizer = &tok_;
    model_.chat_template = &tmpl_;
    model_.context_length = 100;
    model_.max_total_num_tokens = 64;
  }

  std::vector<int32_t> Bytes(std::string_view text) const {
    EncodeOptions o;
    o.add_special = false;
    return tok_.Encode(text, o);
  }

  ApiRequest Parse(Route route, const json& body) {
    auto r = ParseApiRequest(route, body.dump(), model_);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << e->status.message();
      return {};
    }
    return std::get<ApiRequest>(r);
  }

  ApiError Refuse(Route route, std::string_view body) {
    auto r = ParseApiRequest(route, body, model_);
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
  }

  Tokenizer tok_;
  ChatTemplate tmpl_;
  ModelContext model_;
};

TEST_F(ProtocolTest, CompletionFieldsReachTheSamplingParameters) {
  const ApiRequest r = Parse(Route::kCompletions, {{"model", "smol"},
                                                   {"prompt", "Hi"},
                                                   {"max_tokens", 7},
                                                   {"temperature", 0.5},
                                                   {"top_p", 0.9},
                                                   {"top_k", 40},
                                                   {"min_p", 0.05},
                                                   {"frequency_penalty", 0.25},
                                                   {"presence_penalty", -0.5},
                                                   {"repetition_penalty", 1.1},
                                                   {"seed", 42},
                                                   {"stop", "\n"},
                                                   {"stop_token_ids", {3, 4}},
                                                   {"ignore_eos", true},
                                                   {"logprobs", 2},
                                                   {"echo", true},
                                                   {"stream", true},
                                                   {"stream_options", {{"include_usage", true}}},
                                                   {"user", "ignored"}});
  const SamplingParams& s = r.sampling;
  EXPECT_EQ(s.max_new_tokens, 7);
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, 0.25f);
  EXPECT_FLOAT_EQ(s.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_TRUE(s.return_logprob);
  EXPECT_EQ(s.top_logprobs_num, 2);
  EXPECT_TRUE(r.echo && r.prompt_logprobs && r.stream && r.include_usage);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, Bytes("Hi"));
  EXPECT_EQ(r.prompts[0].text, "Hi");
}

TEST_F(ProtocolTest, DefaultsAreOpenAisAndSglangs) {
  const ApiRequest c = Parse(Route::kCompletions, {{"prompt", "Hi"}, {"max_tokens", nullptr}});
  EXPECT_EQ(c.sampling.max_new_tokens, 16);
  EXPECT_FLOAT_EQ(c.sampling.temperature, 1.0f);
  EXPECT_FALSE(c.stream || c.sampling.return_logprob || c.max_tokens_given);
  EXPECT_EQ(c.model, "smol");
  EXPECT_EQ(Parse(Route::kGenerate, {{"text", "Hi"}}).sampling.max_new_tokens, 128);
  // Chat without max_tokens: the rest of the context, capped by the pool (64 tokens here).
  const ApiRequest chat =
      Parse(Route::kChat, {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  const GenerateRequest g = MakeGenerateRequest(chat, 0, model_);
  EXPECT_EQ(g.sampling.max_new_tokens, 64 - static_cast<int>(g.prompt.size()));
}

TEST_F(ProtocolTest, PromptsAsTextTokenIdsAndBatches) {
  EXPECT_EQ(Parse(Route::kCompletions, {{"prompt", {5, 6, 7}}}).prompts[0].ids,
            (std::vector<int32_t>{5, 6, 7}));
  const ApiRequest batch =
      Parse(Route::kCompletions, {{"prompt", {"ab", "c"}}, {"n", 2}, {"seed", 10}});
  ASSERT_EQ(batch.num_choices(), 4);
  EXPECT_EQ(MakeGenerateRequest(batch, 3, model_).prompt, Bytes("c"));
  EXPECT_EQ(MakeGenerateRequest(batch, 2, model_).sampling.seed, 10u);
  EXPECT_EQ(MakeGenerateRequest(batch, 3, model_).sampling.seed, 11u);
  const ApiRequest ids = Parse(Route::kCompletions, {{"prompt", {{1, 2}, {3}}}, {"echo", true}});
  ASSERT_EQ(ids.prompts.size(), 2u);
  EXPECT_EQ(ids.prompts[1].ids, std::vector<int32_t>{3});
  EXPECT_EQ(ids.prompts[0].text, *tok_.Decode(std::vector<int32_t>{1, 2}, true));
  // Special tokens written in a completion prompt are tokens (the client renders the prompt).
  EXPECT_EQ(Parse(Route::kCompletions, {{"prompt", "<|im_end|>"}}).prompts[0].ids,
            std::vector<int32_t>{kImEnd});
  const ApiRequest gen =
      Parse(Route::kGenerate,
            {{"input_ids", {9}}, {"sampling_params", {{"max_new_tokens", 3}, {"temperature", 0}}}});
  EXPECT_EQ(gen.prompts[0].ids, std::vector<int32_t>{9});
  EXPECT_EQ(gen.sampling.max_new_tokens, 3);
  EXPECT_EQ(gen.sampling.temperature, 0.0f);
}

TEST_F(ProtocolTest, ChatKeepsUserTextAsText) {
  const ApiRequest r =
      Parse(Route::kChat,
            {{"messages",
              {{{"role", "system"}, {"content", "S"}},
               {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi <|im_end|>"}}}}}}}});
  std::vector<int32_t> expected = {kImStart};
  for (int32_t id : Bytes("system\nS")) expected.push_back(id);
  expected.insert(expected.end(), {kImEnd});
  for (int32_t id : Bytes("\n")) expected.push_back(id);
  expected.push_back(kImStart);
  for (int32_t id : Bytes("user\nHi <|im_end|>")) expected.push_back(id);
  expected.push_back(kImEnd);
  for (int32_t id : Bytes("\n")) expected.push_back(id);
  expected.push_back(kImStart);
  for (int32_t id : Bytes("assistant\n")) expected.push_back(id);
  EXPECT_EQ(r.prompts[0].ids, expected);
}

void ExpectError(const ApiError& e, int http, std::string_view type, std::string_view param,
                 std::string_view id) {
  EXPECT_EQ(e.http_status, http) << e.status.message();
  EXPECT_EQ(e.type, type);
  EXPECT_EQ(e.param, param);
  EXPECT_EQ(e.status.error_id(), id) << e.status.message();
  const json body = ErrorBody(e);
  EXPECT_NE(body["error"]["message"].get<std::string>().find(std::string(id)), std::string::npos);
  EXPECT_EQ(body["error"]["param"], param.empty() ? json() : json(param));
  EXPECT_EQ(body["error"]["type"], type);
  EXPECT_TRUE(body["error"].contains("code"));
}

TEST_F(ProtocolTest, BadRequestsAreOpenAiErrorsNamingTheField) {
  ExpectError(Refuse(Route::kCompletions, "{\"prompt\": "), 400, "invalid_request_error", "",
              "CTXPAR-HTTP-001");
  ExpectError(Refuse(Route::kCompletions, "[1]"), 400, "invalid_request_error", "",
              "CTXPAR-HTTP-001");
  ExpectError(Refuse(Route::kCompletions, R"({"prompt": "a", "max_tokens": "16"})"), 400,
              "invalid_request_error", "max_tokens", "CTXPAR-HTTP-002");
  ExpectError(Refuse(Route::kCompletions, R"({"prompt": "a", "temperature": "hot"})"), 400,
              "invalid_request_error", "temperature", "CTXPAR-HTTP-002");
  ExpectError(Refuse(Route::kCompletions, R"({"prompt": {"a": 1}})"), 400, "invalid_request_error",
              "prompt", "CTXPAR-HTTP-002");
  ExpectError(Refuse(Route::kCompletions, R"({"max_tokens": 3})"), 400, "invalid_request_error",
              "prompt", "CTXPAR-HTTP-003");
  ExpectError(Refuse(Route::kChat, R"({"prompt": "a"})"), 400, "invalid_request_error", "messages",
              "CTXPAR-HTTP-003");
  ExpectError(Refuse(Route::kCompletions, R"({"prompt": "a", "n": 0})"), 400,
              "invalid_request_error", "n", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kCompletions, R"({"prompt": "a", "logprobs": 21})"), 400,
              "invalid_request_error", "logprobs", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kChat, R"({"messages": [{"role": "function", "content": "x"}]})"), 400,
              "invalid_request_error", "messages[0].role", "CTXPAR-HTTP-004");
  ExpectError(
      Refuse(Route::kCompletions, R"({"prompt": "a", "stream_options": {"include_usage": true}})"),
      400, "invalid_request_error", "stream_options", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kChat, R"({"messages": [{"role": "user", "content": "x"}],
                                       "stream": false, "stream_options": {}})"),
              400, "invalid_request_error", "stream_options", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kGenerate, R"({"text": "a", "sampling_params": {"top_k": 1.5}})"), 400,
              "invalid_request_error", "sampling_params.top_k", "CTXPAR-HTTP-002");
  const ApiError model = Refuse(Route::kCompletions, R"({"model": "gpt-4", "prompt": "a"})");
  ExpectError(model, 404, "not_found_error", "model", "CTXPAR-HTTP-005");
  EXPECT_EQ(model.code, "model_not_found");
  ExpectError(Refuse(Route::kCompletions, R"({"prompt": "a", "logit_bias": {"5": 1}})"), 400,
              "invalid_request_error", "logit_bias", "CTXPAR-HTTP-007");
  // Gemma's template (tests/data/tokenizer/gemma2_chat_template.jinja's rules) refuses turns
  // that do not alternate and a system message: a 400 naming the messages.
  const ChatTemplate gemma =
      ChatTemplate::FromJinja(
          "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
          "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
          "'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
          "alternate user/assistant/user/assistant/...') }}{% endif %}{{ '<start_of_turn>' + "
          "message['role'] + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor "
          "%}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")
          .value();
  model_.chat_template = &gemma;
  const ApiError alternate = Refuse(
      Route::kChat,
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})");
  ExpectError(alternate, 400, "invalid_request_error", "messages", "CTXPAR-CHAT-003");
  EXPECT_NE(alternate.status.message().find("Conversation roles must alternate"), std::string::npos)
      << alternate.status.message();
  ExpectError(Refuse(Route::kChat, R"({"messages": [{"role": "system", "content": "s"}]})"), 400,
              "invalid_request_error", "messages", "CTXPAR-CHAT-003");
  model_.chat_template = nullptr;
  model_.chat_template_error = "not ChatML";
  ExpectError(Refuse(Route::kChat, R"({"messages": [{"role": "user", "content": "x"}]})"), 400,
              "invalid_request_error", "messages", "CTXPAR-HTTP-008");
}

// Issue 28: every refusal does bounded work. A value nested 100,000 deep was re-serialized whole
// (recursively: a stack overflow) before its quote was cut to 80 characters.
TEST_F(ProtocolTest, RefusalsDoBoundedWork) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const ApiError nested =
      Refuse(Route::kChat,
             R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": )" + deep + "}");
  ExpectError(nested, 400, "invalid_request_error", "max_tokens", "CTXPAR-HTTP-002");
  EXPECT_NE(nested.status.message().find("[[[[[[[["), std::string::npos);
  EXPECT_LT(nested.status.message().size(), 300u);
  ExpectError(Refuse(Route::kChat, R"({"messages": [)" + deep + "]}"), 400, "invalid_request_error",
              "messages[0]", "CTXPAR-HTTP-002");
  // A quote is cut inside objects and strings alike: keys and values as JSON writes them.
  const ApiError object =
      Refuse(Route::kCompletions,
             R"({"prompt": "a", "n": {"k": [1, "x"], "s": ")" + std::string(500, 'y') + R"("}})");
  EXPECT_NE(object.status.message().find(R"({"k":[1,"x"],"s":"yyyy)"), std::string::npos)
      << object.status.message();
  // Text that cannot fit the context is refused before it is tokenized.
  model_.max_prompt_bytes = 1000;
  ExpectError(Refuse(Route::kCompletions, json{{"prompt", std::string(1001, 'a')}}.dump()), 400,
              "invalid_request_error", "prompt", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kChat, json{{"messages",
                                         {{{"role", "user"}, {"content", std::string(600, 'a')}},
                                          {{"role", "user"}, {"content", std::string(600, 'a')}}}}}
                                       .dump()),
              400, "invalid_request_error", "messages", "CTXPAR-HTTP-004");
  EXPECT_EQ(Parse(Route::kCompletions, {{"prompt", std::string(1000, 'a')}}).prompts[0].ids.size(),
            1000u);
  // Bounds of lists and counts, and values refused rather than accepted.
  ExpectError(Refuse(Route::kGenerate, R"({"text": "a", "return_logprob": true,
                                          "top_logprobs_num": 1000000})"),
              400, "invalid_request_error", "top_logprobs_num", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kGenerate, R"({"text": "a", "return_logprob": true,
                                          "logprob_start_len": -5})"),
              400, "invalid_request_error", "logprob_start_len", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kGenerate, R"({"text": "ab", "return_logprob": true,
                                          "logprob_start_len": 2})"),
              400, "invalid_request_error", "logprob_start_len", "CTXPAR-HTTP-004");
  EXPECT_TRUE(
      Parse(Route::kGenerate, {{"text", "ab"}, {"return_logprob", true}, {"logprob_start_len", 1}})
          .prompt_logprobs);
  ExpectError(Refuse(Route::kCompletions,
                     json{{"prompt", "a"}, {"stop", std::vector<std::string>(65, "x")}}.dump()),
              400, "invalid_request_error", "stop", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kCompletions,
                     json{{"prompt", std::vector<std::string>(64, "a")}, {"n", 3}}.dump()),
              400, "invalid_request_error", "n", "CTXPAR-HTTP-004");
  ExpectError(Refuse(Route::kChat, R"({"messages": [{"role": "user", "content": null}]})"), 400,
              "invalid_request_error", "messages[0].content", "CTXPAR-HTTP-002");
  EXPECT_EQ(Parse(Route::kChat, json::parse(R"({"messages": [{"role": "user", "content": "x"},
                                                {"role": "assistant", "content": null}],
                                                "add_generation_prompt": false,
                                                "continue_final_message": true})"))
                .prompts.size(),
            1u);
  ExpectError(Refuse(Route::kCompletions, std::string(R"({"prompt": "a"})") + '\0' + '\0'), 400,
              "invalid_request_error", "", "CTXPAR-HTTP-001");
}

TEST_F(ProtocolTest, EngineRefusalsMapToStatusAndField) {
  const ApiRequest r = Parse(Route::kCompletions, {{"prompt", "a"}, {"max_tokens", 500}});
  auto too_long = [](int prompt, int max_new) {
    return CatalogError("CTXPAR-ENGINE-005", {{"needed", std::to_string(prompt + max_new)},
                                              {"prompt", std::to_string(prompt)},
                                              {"max_new", std::to_string(max_new)},
                                              {"context", "100"}});
  };
  ExpectError(SubmitError(too_long(1, 500), r), 400, "invalid_request_error", "max_tokens",
              "CTXPAR-ENGINE-005");
  // A prompt that alone fills the context is the prompt's fault, whatever max_tokens says.
  EXPECT_EQ(SubmitError(too_long(150, 500), r).param, "prompt");
  EXPECT_EQ(SubmitError(too_long(100, 1), r).param, "prompt");
  const Status full(StatusCode::kUnavailable, "The request queue is full", "CTXPAR-ENGINE-007");
  ExpectError(SubmitError(full, r), 503, "unavailable_error", "", "CTXPAR-ENGINE-007");
  const Status stop_id(StatusCode::kInvalidArgument, "stop_token_ids must be token ids",
                       "CTXPAR-SAMPLING-002");
  EXPECT_EQ(SubmitError(stop_id, r).param, "stop_token_ids");
}

TEST_F(ProtocolTest, TokenizeAndDetokenizeRoundTrip) {
  auto t = Tokenize(R"({"prompt": "Hi<|im_end|>", "add_special_tokens": false})", model_);
  ASSERT_TRUE(std::holds_alternative<json>(t));
  const json& tokens = std::get<json>(t);
  std::vector<int32_t> expected = Bytes("Hi");
  expected.push_back(kImEnd);
  EXPECT_EQ(tokens["tokens"].get<std::vector<int32_t>>(), expected);
  EXPECT_EQ(tokens["count"], 3);
  EXPECT_EQ(tokens["max_model_len"], 100);
  auto d = Detokenize(json{{"tokens", tokens["tokens"]}}.dump(), model_);
  ASSERT_TRUE(std::holds_alternative<json>(d));
  EXPECT_EQ(std::get<json>(d)["text"], "Hi<|im_end|>");
  EXPECT_EQ(std::get<json>(d)["prompt"], "Hi<|im_end|>");
  auto missing = Detokenize("{}", model_);
  ASSERT_TRUE(std::holds_alternative<ApiError>(missing));
  EXPECT_EQ(std::get<ApiError>(missing).param, "tokens");
}

RequestUpdate Update(std::vector<int32_t> tokens, std::string text, FinishReason finish,
                     int completion, std::string detail = {},
                     std::optional<int32_t> matched_token = {}) {
  RequestUpdate u;
  u.tokens = std::move(tokens);
  u.text = std::move(text);
  u.finish = finish;
  u.finish_detail = std::move(detail);
  u.matched_token = matched_token;
  u.prompt_tokens = 2;
  u.completion_tokens = completion;
  return u;
}

// The "data: ..." payloads of a stream, in order, checking the framing on the way.
std::vector<std::string> Payloads(const std::string& stream) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < stream.size()) {
    const size_t end = stream.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string frame = stream.substr(pos, end - pos);
    EXPECT_EQ(frame.rfind("data: ", 0), 0u) << frame;
    out.push_back(frame.substr(6));
    pos = end + 2;
  }
  return out;
}

TEST_F(ProtocolTest, ChatStreamHasRoleFirstOneIdUsageAndDone) {
  const ApiRequest r = Parse(Route::kChat, {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                            {"stream", true},
                                            {"stream_options", {{"include_usage", true}}}});
  ResponseBuilder b(r, model_, "chatcmpl-x", 7);
  std::string stream = b.StreamUpdate(0, Update({65}, "A", FinishReason::kNone, 1));
  stream += b.StreamUpdate(0, Update({66, kImEnd}, "B", FinishReason::kStop, 3, "", kImEnd));
  ASSERT_TRUE(b.finished());
  stream += b.StreamEnd();
  const std::vector<std::string> p = Payloads(stream);
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p.back(), "[DONE]");
  std::vector<json> chunks;
  for (size_t i = 0; i + 1 < p.size(); ++i) chunks.push_back(json::parse(p[i]));
  for (const json& c : chunks) {
    EXPECT_EQ(c["id"], "chatcmpl-x");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["model"], "smol");
    EXPECT_EQ(c["created"], 7);
  }
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], "A");
  EXPECT_EQ(chunks[2]["choices"][0]["delta"]["content"], "B");
  EXPECT_EQ(chunks[3]["choices"][0]["delta"], json::object());
  EXPECT_EQ(chunks[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chunks[3]["choices"][0]["matched_stop"], kImEnd);
  EXPECT_TRUE(chunks[3]["usage"].is_null());
  EXPECT_EQ(chunks[4]["choices"], json::array());
  EXPECT_EQ(chunks[4]["usage"], json({{"prompt_tokens", 2},
                                      {"completion_tokens", 3},
                                      {"total_tokens", 5},
                                      {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

TEST_F(ProtocolTest, CompletionWithEchoReturnsPromptLogprobs) {
  const ApiRequest r = Parse(
      Route::kCompletions, {{"prompt", "ab"}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}});
  ResponseBuilder b(r, model_, "cmpl-x", 1);
  const int32_t c_id = Bytes("c")[0];
  RequestUpdate u = Update({c_id}, "c", FinishReason::kLength, 1);
  u.prompt_logprobs = {std::nullopt, TokenLogprob{Bytes("b")[0], -0.5f, {{Bytes("b")[0], -0.5f}}}};
  u.logprobs = {TokenLogprob{c_id, -0.25f, {{c_id, -0.25f}}}};
  b.Apply(0, u);
  ASSERT_TRUE(b.finished());
  const json out = b.Final();
  EXPECT_EQ(out["object"], "text_completion");
  const json& c = out["choices"][0];
  EXPECT_EQ(c["text"], "abc");
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json({nullptr, -0.5, -0.25}));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], json({{"b", -0.5}}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(out["usage"]["total_tokens"], 3);
}

TEST_F(ProtocolTest, GenerateReturnsOutputIdsAndSglangFinishReason) {
  const ApiRequest r = Parse(Route::kGenerate, {{"text", "ab"}});
  ResponseBuilder b(r, model_, "abc", 1);
  b.Apply(0, Update({70, 71}, "FG", FinishReason::kStop, 2, "G"));
  json out = b.Final();
  EXPECT_EQ(out["text"], "FG");
  EXPECT_EQ(out["output_ids"], json({70, 71}));
  EXPECT_EQ(out["meta_info"]["finish_reason"], json({{"type", "stop"}, {"matched", "G"}}));
  EXPECT_EQ(out["meta_info"]["prompt_tokens"], 2);
  EXPECT_EQ(out["meta_info"]["completion_tokens"], 2);
  // A stop string made of digits stays a string, even when the last token's id reads the same.
  ResponseBuilder digits(r, model_, "abc", 1);
  digits.Apply(0, Update({70, 71}, "F", FinishReason::kStop, 2, "71"));
  EXPECT_EQ(json(digits.Final()["meta_info"]["finish_reason"]),
            json({{"type", "stop"}, {"matched", "71"}}));
  ResponseBuilder len(r, model_, "abc", 1);
  len.Apply(0, Update({70}, "F", FinishReason::kLength, 1));
  EXPECT_EQ(json(len.Final()["meta_info"]["finish_reason"]),
            json({{"type", "length"}, {"length", 1}}));
}

// With --speculative-algorithm, meta_info has SGLang's spec_verify_ct and the tokens per verify
// step; without, neither.
TEST_F(ProtocolTest, GenerateReportsSpeculativeDecoding) {
  const ApiRequest r = Parse(Route::kGenerate, {{"text", "ab"}});
  RequestUpdate u = Update({70, 71, 72, 73, 74, 75, 76}, "FGHIJKL", FinishReason::kLength, 7);
  u.spec_verify_ct = 2;  // the first token came from the prefill, 6 from two verify steps
  u.spec_verify_tokens = 6;
  ResponseBuilder plain(r, model_, "abc", 1);
  plain.Apply(0, u);
  EXPECT_FALSE(plain.Final()["meta_info"].contains("spec_verify_ct"));
  model_.speculative = true;
  ResponseBuilder spec(r, model_, "abc", 1);
  spec.Apply(0, u);
  const json meta = spec.Final()["meta_info"];
  EXPECT_EQ(meta["spec_verify_ct"], 2);
  EXPECT_EQ(meta["spec_accept_length"], 3.0);
}

// ChatML that writes the tools as JSON first and an assistant's first tool call's arguments in
// place of its content.
constexpr std::string_view kToolsTemplate =
    "{% if tools %}{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// Chat with tools: the tools and the tool-call / tool-result messages reach the template as
// /apply-template sends them (arguments given as a JSON string become the object transformers'
// templates read), tool_choice "none" leaves the tools out, a forced call is refused; with a
// parser the calls come back as OpenAI's message.tool_calls, whole or streamed, and without one
// the text stays the content.
TEST_F(ProtocolTest, ChatToolsReachTheTemplateAndCallsComeBackParsed) {
  const ChatTemplate tools = ChatTemplate::FromJinja(kToolsTemplate).value();
  model_.chat_template = &tools;
  const std::string messages = R"("messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "3"}])";
  const std::string tool_list =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": {}, "a": {}}}}])";
  auto ids = [&](const std::string& body) {
    auto r = ParseApiRequest(Route::kChat, body, model_);
    EXPECT_TRUE(std::holds_alternative<ApiRequest>(r)) << body;
    return std::holds_alternative<ApiRequest>(r) ? std::get<ApiRequest>(r).prompts[0].ids
                                                 : std::vector<int32_t>{};
  };
  auto prompt = [&](std::string_view text) {
    std::vector<int32_t> out;
    for (size_t at = 0; at < text.size();) {
      const size_t start = text.find("<|im_start|>", at), end = text.find("<|im_end|>", at);
      const size_t next = std::min(start, end);
      const std::vector<int32_t> plain = Bytes(text.substr(at, next - at));
      out.insert(out.end(), plain.begin(), plain.end());
      if (next == std::string_view::npos) break;
      out.push_back(next == start ? kImStart : kImEnd);
      at = next + (next == start ? 12 : 10);
    }
    return out;
  };
  const std::string rendered =
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n{\"z\": 1, \"a\": 2}<|im_end|>\n"
      "<|im_start|>tool\n3<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(ids("{" + messages + ", " + tool_list + "}"),
            prompt("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                   "{\"z\": {}, \"a\": {}}}}]\n" +
                   rendered));
  EXPECT_EQ(ids("{" + messages + ", " + tool_list + R"(, "tool_choice": "none"})"),
            prompt(rendered));
  ExpectError(
      Refuse(Route::kChat, "{" + messages + ", " + tool_list + R"(, "tool_choice": "required"})"),
      400, "invalid_request_error", "tool_choice", "CTXPAR-HTTP-007");
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  ExpectError(Refuse(Route::kChat, "{" + messages + R"(, "tools": [{"type": "function",
                     "function": {"name": "f", "parameters": )" +
                                       deep + "}}]}"),
              400, "invalid_request_error", "tools", "CTXPAR-HTTP-004");

  const std::string call = R"(<tool_call>
{"name": "f", "arguments": {"z": 1}}
</tool_call>)";
  for (const bool stream : {false, true}) {
    for (const bool parser : {false, true}) {
      model_.tool_call_parser = parser ? ToolCallParser::kHermes : ToolCallParser::kNone;
      const ApiRequest r =
          Parse(Route::kChat, json::parse("{" + messages + ", " + tool_list +
                                          ", \"stream\": " + (stream ? "true" : "false") + "}"));
      ResponseBuilder b(r, model_, "chatcmpl-t", 7);
      json message, delta_calls;
      std::string content, finish;
      if (stream) {
        std::string frames = b.StreamUpdate(0, Update({65}, "On it.\n", FinishReason::kNone, 1));
        frames += b.StreamUpdate(0, Update({66, kImEnd}, call, FinishReason::kStop, 2, "", kImEnd));
        for (const std::string& p : Payloads(frames + b.StreamEnd())) {
          if (p == "[DONE]") continue;
          const json chunk = json::parse(p);
          const json& c = chunk["choices"][0];
          if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
          if (c["delta"].contains("tool_calls")) delta_calls = c["delta"]["tool_calls"];
          if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
        }
      } else {
        b.Apply(0, Update({65}, "On it.\n", FinishReason::kNone, 1));
        b.Apply(0, Update({66, kImEnd}, call, FinishReason::kStop, 2, "", kImEnd));
        const json out = b.Final();
        message = out["choices"][0]["message"];
        content = message["content"].get<std::string>();
        delta_calls = message.value("tool_calls", json());
        finish = out["choices"][0]["finish_reason"];
      }
      SCOPED_TRACE(::testing::Message() << "stream " << stream << " parser " << parser);
      if (!parser) {
        EXPECT_EQ(content, "On it.\n" + call);
        EXPECT_TRUE(delta_calls.is_null());
        EXPECT_EQ(finish, "stop");
        continue;
      }
      EXPECT_EQ(content, "On it.");
      ASSERT_EQ(delta_calls.size(), 1u) << delta_calls;
      EXPECT_EQ(delta_calls[0]["index"], 0);
      EXPECT_EQ(delta_calls[0]["type"], "function");
      EXPECT_TRUE(delta_calls[0]["id"].get<std::string>().starts_with("call_"));
      EXPECT_EQ(delta_calls[0]["function"], json({{"name", "f"}, {"arguments", "{\"z\":1}"}}));
      EXPECT_EQ(finish, "tool_calls");
    }
  }
}

// Mistral's calls follow its [TOOL_CALLS] control token: a chat with tools under the mistral parser
// decodes with the control tokens (skip_special_tokens false, whatever the client sent); without
// tools, or under another parser, the client's setting stands.
TEST_F(ProtocolTest, MistralParserKeepsTheControlTokensOfAChatWithTools) {
  const ChatTemplate tools = ChatTemplate::FromJinja(kToolsTemplate).value();
  model_.chat_template = &tools;
  const std::string messages = R"("messages": [{"role": "user", "content": "Hi"}])";
  const std::string tool_list =
      R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}])";
  for (const ToolCallParser parser : {ToolCallParser::kMistral, ToolCallParser::kHermes}) {
    model_.tool_call_parser = parser;
    for (const bool with_tools : {false, true}) {
      const ApiRequest r =
          Parse(Route::kChat, json::parse("{" + messages + (with_tools ? tool_list : "") +
                                          R"(, "skip_special_tokens": true})"));
      EXPECT_EQ(r.sampling.skip_special_tokens, !(with_tools && parser == ToolCallParser::kMistral))
          << static_cast<int>(parser) << " " << with_tools;
    }
  }
}

// POST /apply-template: the messages and tools reach the template as sent (tool calls, key order
// kept for tojson), and its refusals are the other routes' error objects.
TEST_F(ProtocolTest, ApplyTemplateRendersToolsAndRefusesAsTheOtherRoutes) {
  const ChatTemplate tools = ChatTemplate::FromJinja(kToolsTemplate).value();
  model_.chat_template = &tools;
  const std::string body = R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
       "function": {"name": "f", "arguments": {"z": 1, "a": 2}}}]},
      {"role": "tool", "content": "3"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": {}, "a": {}}}}]})";
  auto r = ApplyTemplate(body, model_);
  ASSERT_TRUE(std::holds_alternative<json>(r)) << std::get<ApiError>(r).status.message();
  EXPECT_EQ(std::get<json>(r),
            json({{"prompt",
                   "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                   "{\"z\": {}, \"a\": {}}}}]\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\n{\"z\": 1, \"a\": 2}<|im_end|>\n<|im_start|>tool\n3"
                   "<|im_end|>\n<|im_start|>assistant\n"}}));
  auto closed = ApplyTemplate(R"({"messages": [{"role": "user", "content": "Hi"}],
                                  "add_generation_prompt": false})",
                              model_);
  ASSERT_TRUE(std::holds_alternative<json>(closed));
  EXPECT_EQ(std::get<json>(closed)["prompt"], "<|im_start|>user\nHi<|im_end|>\n");
  auto error = [&](std::string_view b) {
    auto e = ApplyTemplate(b, model_);
    EXPECT_TRUE(std::holds_alternative<ApiError>(e)) << b;
    return std::holds_alternative<ApiError>(e) ? std::get<ApiError>(e) : ApiError{};
  };
  ExpectError(error("{}"), 400, "invalid_request_error", "messages", "CTXPAR-HTTP-003");
  ExpectError(error(R"({"messages": "Hi"})"), 400, "invalid_request_error", "messages",
              "CTXPAR-HTTP-002");
  ExpectError(error(R"({"messages": [{"content": "Hi"}]})"), 400, "invalid_request_error",
              "messages[0].role", "CTXPAR-HTTP-002");
  ExpectError(error(R"({"messages": [{"role": "user", "content": "Hi"}], "tools": {}})"), 400,
              "invalid_request_error", "tools", "CTXPAR-HTTP-002");
  ExpectError(error(R"({"messages": [{"role": "user", "content": "Hi"}],
                        "continue_final_message": true})"),
              400, "invalid_request_error", "continue_final_message", "CTXPAR-HTTP-004");
  const ChatTemplate refuses =
      ChatTemplate::FromJinja("{{ raise_exception('Only user turns') }}").value();
  model_.chat_template = &refuses;
  ExpectError(error(R"({"messages": [{"role": "user", "content": "Hi"}]})"), 400,
              "invalid_request_error", "messages", "CTXPAR-CHAT-003");
  // Nesting is bounded before the value is copied or rendered (both recurse).
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  ExpectError(error(R"({"messages": [{"role": "user", "content": )" + deep + "}]}"), 400,
              "invalid_request_error", "messages", "CTXPAR-HTTP-004");
  model_.chat_template = nullptr;
  model_.chat_template_error = "none";
  ExpectError(error(R"({"messages": [{"role": "user", "content": "Hi"}]})"), 400,
              "invalid_request_error", "messages", "CTXPAR-HTTP-008");
}

}  // namespace
}  // namespace ctxpar::server
