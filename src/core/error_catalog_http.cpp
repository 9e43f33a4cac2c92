// The catalog entries of the HTTP server, `ctxpar serve` (error_catalog.h). The server answers
// them as OpenAI's error object, the ID in the message.
#include "core/error_catalog_internal.h"

namespace ctxpar::core_internal {

namespace {
constexpr StatusCode kRequest = StatusCode::kInvalidArgument;
constexpr StatusCode kRuntime = StatusCode::kFailedPrecondition;
}  // namespace

std::vector<CatalogEntry> HttpCatalogEntries() {
  return {
      {"CTXPAR-HTTP-001",
       "A request body that is not JSON",
       "The body of {route} is not valid JSON: {detail}",
       kRequest,
       "Every POST route of `ctxpar serve` takes one JSON object as its body, as OpenAI's and "
       "SGLang's servers do. The body could not be parsed, so nothing was queued; the detail "
       "gives the byte where the parser stopped.",
       "A client sends an empty body, a truncated one, form data, or JSON that is not an object "
       "(a list or a string at the top).",
       {"Send Content-Type: application/json and one JSON object.",
        "Check the quoting when the body is written by hand in a shell: single quotes around "
        "the whole body, double quotes inside."},
       "ctxpar serve & curl localhost:30000/v1/completions -d '{prompt: \"Hi\"}'",
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\"}'",
       {"CTXPAR-HTTP-002", "CTXPAR-HTTP-003"}},
      {"CTXPAR-HTTP-002",
       "A request field of the wrong type",
       "{field} must be {expected}, but the request gives {value}.",
       kRequest,
       "Request fields have OpenAI's types (SGLang's for /generate): max_tokens, n, seed and "
       "top_k are integers, temperature and the penalties numbers, stream a boolean, stop a "
       "string or a list of strings, prompt a string, a list of strings or token ids. A value of "
       "another type is refused rather than converted, so that a typo cannot change what is "
       "generated; param names the field.",
       "A client sends, say, \"max_tokens\": \"16\" or \"stream\": \"yes\", or a message "
       "whose content is neither a string nor a list of text parts. (null is taken as an absent "
       "field.)",
       {"Send the value with the type the message names (no quotes around numbers and "
        "booleans).",
        "Leave a field out (or send null) to get its default."},
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\", "
       "\"max_tokens\": \"16\"}'",
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\", "
       "\"max_tokens\": 16}'",
       {"CTXPAR-HTTP-003", "CTXPAR-HTTP-004"}},
      {"CTXPAR-HTTP-003",
       "A request without a required field",
       "{route} needs {field}, which the request lacks.",
       kRequest,
       "Each route has one field without which there is nothing to do: messages for "
       "/v1/chat/completions, prompt for /v1/completions, text or input_ids for /generate, "
       "prompt for /tokenize and tokens for /detokenize.",
       "A client posts to one route with the body of another (messages to /v1/completions), or "
       "misspells the field.",
       {"Send the field the message names.",
        "Chat messages go to /v1/chat/completions, a raw prompt to /v1/completions."},
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"messages\": [{\"role\": "
       "\"user\", \"content\": \"Hi\"}]}'",
       "ctxpar serve & curl localhost:30000/v1/chat/completions -d '{\"messages\": [{\"role\": "
       "\"user\", \"content\": \"Hi\"}]}'",
       {"CTXPAR-HTTP-002"}},
      {"CTXPAR-HTTP-004",
       "A request field outside its range",
       "{field} must be {rule} on {route}, but the request gives {value}.",
       kRequest,
       "Fields that shape the response rather than the sampling have ranges of their own: n "
       "(choices per prompt) is 1 to 128, logprobs on /v1/completions 0 to 20 alternatives, "
       "top_logprobs on /v1/chat/completions 0 to 20, a message role one of system, user and "
       "assistant. The sampling parameters are checked by the engine (CTXPAR-SAMPLING-001).",
       "A client asks for n 0, logprobs 50, or a message with role 'tool'.",
       {"Use a value inside the range the message gives."},
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\", \"n\": 0}'",
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\", \"n\": 1}'",
       {"CTXPAR-HTTP-002", "CTXPAR-SAMPLING-001"}},
      {"CTXPAR-HTTP-005",
       "A request for a model this server does not serve",
       "The model {model} does not exist: this server serves {served}.",
       StatusCode::kNotFound,
       "One `ctxpar serve` serves one model, under the name --served-model-name gives it (the "
       "model path by default); GET /v1/models lists it. A request that names another model is "
       "answered 404, as OpenAI answers it, instead of being run on the wrong model. A request "
       "without a model field runs on the served model.",
       "A client keeps the model name of another deployment, or the server was started with a "
       "--served-model-name the client does not know.",
       {"Send the name GET /v1/models lists, or leave the model field out.",
        "Start the server with --served-model-name set to the name the client sends."},
       "ctxpar serve --served-model-name smol & curl localhost:30000/v1/completions -d "
       "'{\"model\": \"gpt-4\", \"prompt\": \"Hi\"}'",
       "ctxpar serve --served-model-name smol & curl localhost:30000/v1/completions -d "
       "'{\"model\": \"smol\", \"prompt\": \"Hi\"}'",
       {"CTXPAR-HTTP-003", "CTXPAR-CHAT-001"}},
      {"CTXPAR-HTTP-006",
       "A request without the server's API key",
       "The request has no valid API key: send the header 'Authorization: Bearer KEY' with the "
       "key given to --api-key.",
       kRequest,
       "A server started with --api-key answers only requests that carry that key as a bearer "
       "token (the OpenAI client sends its api_key so). /health and /v1/models stay open so that "
       "load balancers and clients can probe the server.",
       "The header is missing, misspelled, or carries another key.",
       {"Pass the key to the client: OpenAI(base_url=..., api_key=KEY), or curl -H "
        "'Authorization: Bearer KEY'.",
        "Start the server without --api-key on a trusted machine."},
       "ctxpar serve --api-key s3cret & curl localhost:30000/v1/completions -d '{\"prompt\": "
       "\"Hi\"}'",
       "ctxpar serve --api-key s3cret & curl -H 'Authorization: Bearer s3cret' "
       "localhost:30000/v1/completions -d '{\"prompt\": \"Hi\"}'",
       {"CTXPAR-HTTP-005"}},
      {"CTXPAR-HTTP-007",
       "A request field ctxpar does not implement",
       "{field} is not supported by ctxpar serve: {detail}",
       kRequest,
       "Some OpenAI fields change what a response means and ctxpar does not implement them "
       "(a forced tool_choice, functions, response_format other than text, logit_bias, suffix, "
       "best_of, images in messages, text prompts to a model without a tokenizer). They are "
       "refused instead of "
       "ignored, so that a client never takes an answer for what it did not ask.",
       "A client sends one of these fields with a value other than its neutral one.",
       {"Leave the field out, or send its neutral value (tool_choice 'auto', response_format "
        "{'type': 'text'}, an empty logit_bias).",
        "Send token ids to a model that has no tokenizer."},
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\", "
       "\"logit_bias\": {\"42\": 5}}'",
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\"}'",
       {"CTXPAR-HTTP-002"}},
      {"CTXPAR-HTTP-008",
       "A chat request to a model whose chat template ctxpar cannot render",
       "{route} needs the model's chat template, which ctxpar cannot use: {detail}",
       kRequest,
       "Chat completions and /apply-template render the messages with the model's own Jinja "
       "template (tokenizer.chat_template in the GGUF, or the file of --chat-template). A model "
       "without a template, with one the Jinja engine cannot parse, or without a tokenizer "
       "cannot take chat messages.",
       "POST /v1/chat/completions to a server whose model has no usable template.",
       {"Render the conversation in the client and send it to /v1/completions as a prompt.",
        "Give the template with --chat-template FILE (a .jinja file, such as the model's "
        "chat_template from its tokenizer_config.json)."},
       "ctxpar serve --model-path base.gguf & curl localhost:30000/v1/chat/completions -d "
       "'{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}'",
       "ctxpar serve --model-path base.gguf & curl localhost:30000/v1/completions -d "
       "'{\"prompt\": \"User: Hi\\nAssistant:\"}'",
       {"CTXPAR-HTTP-003", "CTXPAR-CHAT-001"}},
      {"CTXPAR-HTTP-009",
       "A server option outside its range",
       "{option} must be {rule}, but got {value}.",
       kRequest,
       "The options of `ctxpar serve` itself (not the launch flags, which `ctxpar check` "
       "validates): --port is a TCP port and --host an address to bind.",
       "`ctxpar serve` starts with --port 70000 or an empty --host.",
       {"Use a port in [0, 65535] (0 picks a free one) and a host such as 127.0.0.1 or 0.0.0.0."},
       "ctxpar serve --port 70000",
       "ctxpar serve --port 30000",
       {"CTXPAR-HTTP-011"}},
      {"CTXPAR-HTTP-010",
       "A request while the server cannot take it",
       "The server is {state}; try again later.",
       StatusCode::kUnavailable,
       "The server answers 503 while the model loads (GET /health says 503 too), and after "
       "SIGINT or SIGTERM, when it finishes the requests it has and takes no new one.",
       "A client sends a request right after starting the server, or while it shuts down.",
       {"Wait until GET /health answers 200 (the server prints a ready line too).",
        "Retry after the restart."},
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\"}'",
       "ctxpar serve & until curl -sf localhost:30000/health; do sleep 1; done; curl "
       "localhost:30000/v1/completions -d '{\"prompt\": \"Hi\"}'",
       {"CTXPAR-HTTP-011"}},
      {"CTXPAR-HTTP-012",
       "A request the HTTP layer refuses",
       "The server refuses a {method} request to {path}: {reason}.",
       StatusCode::kInvalidArgument,
       "Before a route reads a request, the HTTP layer checks that it names a route, with a "
       "method the route takes, and that the request is well formed HTTP/1.1 (RFC 9112) within "
       "the server's limits. The HTTP status says which check failed: 404, 405 (the Allow "
       "header lists the methods), 400 (malformed, or an invalid or conflicting "
       "Content-Length), 408 (the headers did not arrive within --http-timeout, or the body "
       "paused longer), 413 (a body over 64 MiB, answered as soon as Content-Length says so), "
       "417 (an Expect other than 100-continue), 429 (the client holds "
       "--max-connections-per-client connections), 431 (headers over 16 KiB), 501 (a "
       "Transfer-Encoding other than chunked) or 503 (as many requests in flight as the server "
       "takes). The connection closes after each of these answers.",
       "A typo in the route, GET on a POST route, an oversized body, a malformed request, a "
       "client that sends its request slowly or opens connections without using them, or a "
       "client speaking another protocol (TLS or HTTP/2 to the plain HTTP port).",
       {"Check the route and method in docs/server.md.",
        "Split very large batches over several requests.",
        "Reuse connections (keep-alive) rather than opening many; raise "
        "--max-connections-per-client for a proxy that multiplexes many users."},
       "ctxpar serve & curl localhost:30000/v1/completion -d '{\"prompt\": \"Hi\"}'",
       "ctxpar serve & curl localhost:30000/v1/completions -d '{\"prompt\": \"Hi\"}'",
       {"CTXPAR-HTTP-001"}},
      {"CTXPAR-HTTP-011",
       "The server cannot listen on its address",
       "ctxpar serve cannot listen on {host}:{port}: {detail}",
       kRuntime,
       "`ctxpar serve` binds its host and port before it loads the model, so that a port in "
       "use is reported at once.",
       "Another server (another ctxpar serve, SGLang, llama-server) already listens on the port, "
       "or the host is not an address of this machine.",
       {"Pick another --port, or stop the other server.",
        "Use --host 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)."},
       "ctxpar serve --port 30000  # while another server holds 30000",
       "ctxpar serve --port 30001",
       {"CTXPAR-HTTP-009"}},
  };
}

}  // namespace ctxpar::core_internal
