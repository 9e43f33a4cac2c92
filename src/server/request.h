// The request side of the protocol: an OpenAI or SGLang JSON body -> ApiRequest (prompts as
// token ids, sampling parameters, what the response must contain), and ApiRequest -> the
// GenerateRequest of each choice.
//
// Fields (null is an absent field; unknown fields are ignored, as OpenAI's and SGLang's servers
// do; fields that would change the meaning of a response and are not implemented are refused
// with CTXPAR-HTTP-007):
//   all       model (must be the served name: 404 otherwise), stream, stream_options.include_usage,
//             n (1..128; prompts times n at most 128 too), max_tokens / max_completion_tokens,
//             temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty,
//             repetition_penalty, seed (sampling_seed on /generate too), stop (string or list of at
//             most 64), stop_token_ids (at most 1024), ignore_eos, skip_special_tokens,
//             no_stop_trim; refused: constrained decoding (regex, ebnf, json_schema,
//             structural_tag) and min_new_tokens / min_tokens above 0
//   chat      messages (role system / developer / user / assistant / tool, content a string or
//             text parts; null only for an assistant; an assistant's tool_calls, a tool's
//             tool_call_id and name), tools and tool_choice (none / auto: tool_calls.h),
//             logprobs (bool), top_logprobs (0..20, with logprobs only), add_generation_prompt
//             (default true), continue_final_message (default false; not both true)
//   completion prompt (text, list of texts, token ids, list of token-id lists), echo,
//             logprobs (0..20 alternatives)
//   generate  text or input_ids (one or a list; not both), sampling_params {max_new_tokens, ...
//             as above} (or a list of one per prompt, with the same n), return_logprob,
//             top_logprobs_num (0..20), logprob_start_len (-1, or a position of every prompt:
//             prompt log-probs from there),
//             return_text_in_logprobs
// A text prompt (or the messages' text) longer than ModelContext::max_prompt_bytes is refused
// before it is tokenized. Sampling ranges are the engine's (ValidateSamplingParams, at Submit);
// this layer checks types and the fields only it knows.
//
// Defaults: temperature 1 (OpenAI; SGLang's too), max_tokens 16 on /v1/completions (OpenAI),
// 128 on /generate (SGLang), and on chat the rest of the context (SGLang), capped by the KV pool.
// With n > 1 and a seed, choice j uses seed + j so that the choices differ and stay
// reproducible.
//
// Chat messages are rendered with the model's template; the template's own special tokens are
// tokens, while the text of every message is encoded as text, so a user who writes
// "<|im_end|>" gets those characters, never the control token (Hugging Face's tokenization of the
// rendered string otherwise).
//
// Thread safety: functions of values; the tokenizer and template are only read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/chat_template.h"
#include "ctxpar/engine.h"
#include "ctxpar/sampling.h"
#include "server/api_error.h"
#include "server/tool_calls.h"

namespace ctxpar {
class Tokenizer;
}

namespace ctxpar::server {

enum class Route { kChat, kCompletions, kGenerate };
std::string_view RoutePath(Route route);
// The methods a route of the server takes ("GET", "POST" or "GET, POST", an Allow header), "" for
// a path that is no route.
std::string_view AllowedMethods(std::string_view path);

// What the protocol needs to know of the served model.
struct ModelContext {
  std::string served_model_name;
  const Tokenizer* tokenizer = nullptr;         // null: token ids only
  const ChatTemplate* chat_template = nullptr;  // null: no chat
  std::string chat_template_error;              // why there is none
  int context_length = 0;
  int64_t max_total_num_tokens = 0;
  bool speculative = false;  // --speculative-algorithm: meta_info has spec_verify_ct
  ToolCallParser tool_call_parser = ToolCallParser::kNone;  // --tool-call-parser
  // The most bytes of text a prompt may have: context_length tokens of the longest token's bytes.
  // A longer text cannot fit the context, so it is refused before it is tokenized (bounded work
  // for any input). 0: no tokenizer.
  int64_t max_prompt_bytes = 0;
};

// The bounds of list and count fields, beyond which a request is refused (CTXPAR-HTTP-004).
inline constexpr int kMaxChoices = 128;  // n, and the prompts of one request
inline constexpr int kMaxLogprobs = 20;  // top_logprobs, logprobs, top_logprobs_num
inline constexpr int kMaxStopStrings = 64;
inline constexpr int kMaxStopTokenIds = 1024;

struct PromptInput {
  std::vector<int32_t> ids;
  std::string text;  // the prompt's text, for echo ("" when it was given as ids and no echo)
};

struct ApiRequest {
  Route route = Route::kCompletions;
  std::string model;  // the served name (what the response reports)
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  bool echo = false;
  bool logprobs = false;  // of each output token
  int top_logprobs = 0;   // alternatives per token
  bool prompt_logprobs = false;
  int logprob_start_len = 0;  // /generate: the first prompt position whose log-prob is returned
  bool return_text_in_logprobs = false;  // /generate: each log-prob triple ends with its text
  // /generate with a list of sampling_params: prompt i's (else `sampling` for every prompt).
  std::vector<SamplingParams> prompt_sampling;
  bool add_generation_prompt = true;    // chat: open an assistant turn after the messages
  bool continue_final_message = false;  // chat: leave the last message open to continue it
  // chat: the request gave tools (tool_choice not "none") and the server has a parser: the
  // output's calls become message.tool_calls (tool_calls.h).
  bool parse_tool_calls = false;
  bool max_tokens_given = false;
  std::vector<PromptInput> prompts;  // choice i runs prompts[i / n]
  SamplingParams sampling;

  int num_choices() const { return static_cast<int>(prompts.size()) * n; }
};

ApiExpected<ApiRequest> ParseApiRequest(Route route, std::string_view body,
                                        const ModelContext& model);

// The engine request of choice `index` (prompt index / n, seed + index % n).
GenerateRequest MakeGenerateRequest(const ApiRequest& request, int index,
                                    const ModelContext& model);

// A Status from the engine's Submit of choice `index` as an ApiError whose param names the
// request field: the sampling field of CTXPAR-SAMPLING-001 in the route's spelling (with the
// prompt's element of a sampling_params list), stop_token_ids, stop, or the prompt / messages for
// the length and vocabulary checks.
ApiError SubmitError(const Status& status, const ApiRequest& request, int index = 0);

// /tokenize {"prompt": text or list of texts, "add_special_tokens": bool} ->
// {"tokens": [...] (a list of lists for a list), "count", "max_model_len"}; /detokenize
// {"tokens": [ids], at most 2^20} -> {"text", "prompt"} (SGLang's and vLLM's names). /tokenize
// takes at most 128 texts, each within max_prompt_bytes.
ApiExpected<nlohmann::json> Tokenize(std::string_view body, const ModelContext& model);
ApiExpected<nlohmann::json> Detokenize(std::string_view body, const ModelContext& model);
// POST /apply-template (llama-server's): {"messages": [...], "tools": [...] (optional),
// "add_generation_prompt" (default true), "continue_final_message", "chat_template_kwargs"}
// -> {"prompt": the conversation rendered by the model's chat template}, as transformers renders
// it, less the BOS text the tokenizer adds itself (so the prompt suits /v1/completions). Messages
// go to the template as sent (any role, tool_calls, tool results); a template that refuses the
// conversation is CTXPAR-CHAT-003, a model without a usable template CTXPAR-HTTP-008.
ApiExpected<nlohmann::json> ApplyTemplate(std::string_view body, const ModelContext& model);

}  // namespace ctxpar::server
