// The response side of the protocol: the engine's updates of each choice -> OpenAI's and SGLang's
// JSON, whole or as SSE frames.
//
// Streams (each frame "data: {json}\n\n", one id for the whole stream):
//   chat        per choice, a first chunk whose delta is {"role": "assistant", "content": ""},
//               chunks with delta.content (and logprobs), a last chunk with an empty delta,
//               finish_reason and matched_stop
//   completion  chunks with text (the prompt first with echo) and logprobs, a last one with
//               finish_reason
//   generate    SGLang's: each frame the cumulative text and output_ids with meta_info
// then, with stream_options.include_usage, one chunk with empty choices and the usage (every
// other chunk then has "usage": null), then "data: [DONE]".
//
// Chat with tools and --tool-call-parser: the content and message.tool_calls come once the choice
// has finished (one delta when streaming), and finish_reason is "tool_calls" when a choice that
// stopped made calls (tool_calls.h).
//
// finish_reason is "stop", "length" or "abort"; matched_stop is the stop token id (a number) or
// the stop string that ended the choice, else null. Usage counts each prompt once and every
// choice's completion tokens.
//
// Thread safety: a ResponseBuilder belongs to one HTTP request, used by one thread at a time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ctxpar/engine.h"
#include "server/request.h"

namespace ctxpar::server {

// What one choice has produced so far.
struct ChoiceOutput {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<TokenLogprob> logprobs;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string finish_detail;
  std::optional<int32_t> matched_token;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  int spec_verify_ct = 0;
  int spec_verify_tokens = 0;
};

// "chatcmpl-...", "cmpl-..." or a bare id for /generate: 32 random hex digits after the prefix.
std::string NewResponseId(Route route);

// "data: <json>\n\n".
std::string SseFrame(const nlohmann::ordered_json& data);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

class ResponseBuilder {
 public:
  ResponseBuilder(const ApiRequest& request, const ModelContext& model, std::string id,
                  int64_t created);

  // Applies `update` to choice `index` and returns the frames it makes (possibly none).
  std::string StreamUpdate(int index, const RequestUpdate& update);
  // After every choice has finished: the usage chunk when asked for, then [DONE].
  std::string StreamEnd() const;

  // Non-streaming: applies an update; Final() once every choice has finished.
  void Apply(int index, const RequestUpdate& update);
  nlohmann::ordered_json Final();

  bool finished() const;
  const ChoiceOutput& choice(int index) const { return choices_[index]; }

 private:
  void Record(int index, const RequestUpdate& update);
  nlohmann::ordered_json Usage() const;
  nlohmann::ordered_json ChunkBase() const;
  nlohmann::ordered_json ChatLogprobs(const std::vector<TokenLogprob>& logprobs) const;
  // OpenAI's completion logprobs of prompt (with echo, first chunk) and output tokens; advances
  // the choice's text offset.
  nlohmann::ordered_json CompletionLogprobs(int index,
                                            const std::vector<std::optional<TokenLogprob>>* prompt,
                                            const std::vector<TokenLogprob>& output);
  nlohmann::ordered_json GenerateObject(int index) const;
  // The chat message of a finished choice: with parse_tool_calls, its calls (tool_calls.h) as
  // message.tool_calls and the rest as content (null when the calls are all).
  nlohmann::ordered_json ChatMessage(const ChoiceOutput& c) const;
  // "tool_calls" where a choice that stopped made calls, else finish_reason.
  nlohmann::ordered_json ChoiceFinish(const ChoiceOutput& c) const;
  nlohmann::ordered_json MatchedStop(const ChoiceOutput& c) const;
  std::string Piece(int32_t token) const;

  const ApiRequest& request_;
  const ModelContext& model_;
  std::string id_;
  int64_t created_;
  std::vector<ChoiceOutput> choices_;
  std::vector<bool> started_;        // a first frame was sent (chat role, echo)
  std::vector<size_t> text_offset_;  // completion logprobs' text_offset so far
};

}  // namespace ctxpar::server
