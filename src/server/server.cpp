// The routes of server.h on the HTTP transport (http_transport.h).
#include "ctxpar/server.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "ctxpar/chat_template.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/tokenizer.h"
#include "server/http_transport.h"
#include "server/json_read.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/response.h"
#include "server/update_queue.h"

namespace ctxpar {
namespace {

using json = nlohmann::json;
using server::ApiError;
using server::Route;

constexpr auto kPollInterval = std::chrono::milliseconds(200);
// A body this large is refused (413): a batch of requests at the model's whole context is far
// smaller, and the parsed JSON takes several times the body's bytes.
constexpr std::size_t kMaxBodyBytes = std::size_t{64} << 20;
// An idle stream writes an SSE comment this often, so that a client that went away is noticed
// (and its requests cancelled) even while they wait in the queue.
constexpr auto kHeartbeat = std::chrono::seconds(2);

// json, or the ordered JSON of response bodies (whose keys keep OpenAI's order).
template <class Json>
void Reply(server::HttpResponder& out, int status, const Json& body,
           const server::HttpHeaders& headers = {}) {
  out.Send(status, "application/json", body.dump(-1, ' ', false, Json::error_handler_t::replace),
           headers);
}

void ReplyError(server::HttpResponder& out, const ApiError& error,
                const server::HttpHeaders& headers = {}) {
  Reply(out, error.http_status, server::ErrorBody(error), headers);
}

// CTXPAR-HTTP-012 with `status`: a request refused before any route read it.
ApiError HttpRefusal(std::string_view method, std::string_view path, int status,
                     std::string_view reason) {
  const std::string shown =
      path.size() > 200 ? std::string(path.substr(0, 197)) + "..." : std::string(path);
  ApiError e = server::ToApiError(CatalogError(
      "CTXPAR-HTTP-012", {{"method", method.empty() ? "malformed" : std::string(method)},
                          {"path", shown.empty() ? "an unread path" : shown},
                          {"reason", std::string(reason)}}));
  e.http_status = status;
  e.type = status == 404 ? "not_found_error" : "invalid_request_error";
  return e;
}

// 405 with Allow when the path is a route of another method, else 404.
void RefuseRoute(const server::HttpRequest& req, server::HttpResponder& out) {
  const std::string_view allow = server::AllowedMethods(req.path);
  if (allow.empty()) {
    return ReplyError(out, HttpRefusal(req.method, req.path, 404, "not a route of ctxpar serve"));
  }
  ReplyError(out,
             HttpRefusal(req.method, req.path, 405, fmt::format("the route takes {} only", allow)),
             {{"Allow", std::string(allow)}});
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One generation request's state shared by its HTTP thread and the engine's callbacks.
struct Job {
  server::UpdateQueue queue;
  std::vector<server::RequestTimer> timers;  // one per choice, fed on the engine's thread
};

// "data: {"error": {...}}" then [DONE]: how a stream ends when the engine fails under it
// (SGLang's error event).
std::string StreamError(const ApiError& error) {
  return "data: " + server::ErrorBody(error).dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n\n" + std::string(server::kSseDone);
}

}  // namespace

int ServerThreads(const EngineConfig& config) {
  if (!config.max_queued_requests) return kMaxHttpThreads;
  return std::clamp(config.max_running_requests + *config.max_queued_requests + 8, 16,
                    kMaxHttpThreads);
}

struct Server::Impl {
  ServerOptions options;
  std::unique_ptr<server::HttpTransport> http;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  // Generation requests whose response is not written yet; Wait closes the server at 0.
  std::mutex active_mu;
  std::condition_variable active_cv;
  int active = 0;
  // The jobs in flight, and why the engine can serve no more (Fail), under jobs_mu.
  mutable std::mutex jobs_mu;
  std::set<std::shared_ptr<Job>> jobs;
  std::optional<Status> failure;
  ServingModel model;
  std::optional<ChatTemplate> chat_template;
  server::ModelContext context;
  server::ServerMetrics metrics;

  void Handle(const server::HttpRequest& req, server::HttpResponder& out);
  void Dispatch(const server::HttpRequest& req, server::HttpResponder& out);
  bool KeyGiven(const server::HttpRequest& req) const;
  bool Authorized(const server::HttpRequest& req) const;
  std::optional<ApiError> Unavailable() const;
  std::optional<Status> Failure();
  void Generate(Route route, const std::string& body, server::HttpResponder& out);
  std::shared_ptr<void> Track();
  std::shared_ptr<void> Register(const std::shared_ptr<Job>& job);
  std::string PublicModelName(bool with_key) const;
  json ServerInfo() const;
  json TokenizerInfo() const;
  json ModelCard(bool with_key) const;
  std::optional<ApiError> GenerateOneToken();
};

// With an API key set, a client without it sees the served name, never the model's file-system
// path: --served-model-name when given, else the file's name.
std::string Server::Impl::PublicModelName(bool with_key) const {
  if (with_key || options.api_key.empty() || !options.served_model_name.empty()) {
    return context.served_model_name;
  }
  const std::string& path = model.config.model_path;
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

json Server::Impl::ModelCard(bool with_key) const {
  const std::string name = PublicModelName(with_key);
  const bool path_shown = with_key || options.api_key.empty();
  return {{"id", name},
          {"object", "model"},
          {"created", UnixSeconds()},
          {"owned_by", "ctxpar"},
          {"root", path_shown ? model.config.model_path : name},
          {"max_model_len", model.desc.context_length}};
}

// SGLang's /health_generate: the engine generates one token, within a deadline.
std::optional<ApiError> Server::Impl::GenerateOneToken() {
  constexpr auto kDeadline = std::chrono::seconds(30);
  std::shared_ptr<void> tracked = Track();
  GenerateRequest probe;
  probe.prompt = {0};
  probe.sampling.max_new_tokens = 1;
  probe.sampling.temperature = 0.0f;
  auto done = std::make_shared<std::promise<FinishReason>>();
  std::future<FinishReason> finished = done->get_future();
  Expected<uint64_t> id = model.backend->Submit(probe, [done](const RequestUpdate& u) {
    if (u.finish != FinishReason::kNone) done->set_value(u.finish);
  });
  // A full queue means the engine is busy, hence alive (SGLang's probe counts recent output).
  if (!id.ok()) {
    if (id.status().error_id() == "CTXPAR-ENGINE-007") return std::nullopt;
    return server::ToApiError(id.status());
  }
  if (finished.wait_for(kDeadline) != std::future_status::ready) {
    model.backend->Cancel(*id);
    return server::ToApiError(
        CatalogError("CTXPAR-HTTP-010", {{"state", "not generating within 30 s"}}));
  }
  if (finished.get() == FinishReason::kAbort) {
    return server::ToApiError(CatalogError("CTXPAR-HTTP-010", {{"state", "shutting down"}}));
  }
  return std::nullopt;
}

// The scheme is case-insensitive (RFC 7235).
bool Server::Impl::KeyGiven(const server::HttpRequest& req) const {
  if (options.api_key.empty()) return true;
  const std::string header = req.Header("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() != kScheme.size() + options.api_key.size()) return false;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  return header.compare(kScheme.size(), std::string::npos, options.api_key) == 0;
}

// /health*, /v1/models[/ID] and /metrics stay open (probes, clients listing models, Prometheus).
bool Server::Impl::Authorized(const server::HttpRequest& req) const {
  const std::string& p = req.path;
  return p.starts_with("/health") || p == "/v1/models" || p.starts_with("/v1/models/") ||
         p == "/metrics" || KeyGiven(req);
}

std::optional<Status> Server::Impl::Failure() {
  std::lock_guard lock(jobs_mu);
  return failure;
}

std::optional<ApiError> Server::Impl::Unavailable() const {
  {
    std::lock_guard lock(jobs_mu);
    if (failure) return server::ToApiError(*failure);
  }
  if (stopping) {
    return server::ToApiError(CatalogError("CTXPAR-HTTP-010", {{"state", "shutting down"}}));
  }
  if (!ready) {
    return server::ToApiError(CatalogError("CTXPAR-HTTP-010", {{"state", "loading the model"}}));
  }
  if (Status health = model.backend->Health(); !health.ok()) return server::ToApiError(health);
  return std::nullopt;
}

std::shared_ptr<void> Server::Impl::Track() {
  std::lock_guard lock(active_mu);
  ++active;
  return std::shared_ptr<void>(nullptr, [this](void*) {
    std::lock_guard lock(active_mu);
    if (--active == 0) active_cv.notify_all();
  });
}

// Registers a job for Fail; the job is failed at once when the engine already has.
std::shared_ptr<void> Server::Impl::Register(const std::shared_ptr<Job>& job) {
  std::lock_guard lock(jobs_mu);
  if (failure) job->queue.Fail(*failure);
  jobs.insert(job);
  return std::shared_ptr<void>(nullptr, [this, job](void*) {
    std::lock_guard lock(jobs_mu);
    jobs.erase(job);
  });
}

void Server::Impl::Generate(Route route, const std::string& body, server::HttpResponder& out) {
  std::shared_ptr<void> tracked = Track();
  if (auto e = Unavailable()) return ReplyError(out, *e);
  auto parsed = server::ParseApiRequest(route, body, context);
  if (auto* e = std::get_if<ApiError>(&parsed)) return ReplyError(out, *e);
  auto request =
      std::make_shared<server::ApiRequest>(std::move(std::get<server::ApiRequest>(parsed)));
  const int choices = request->num_choices();
  if (const std::optional<int> bound = model.config.max_queued_requests;
      bound && choices > *bound) {
    // All of them would never fit the queue at once: not worth a retry (503).
    return ReplyError(out, server::RangeError(server::RoutePath(route), "n",
                                              fmt::format("at most --max-queued-requests = {} "
                                                          "choices (n times the prompts) in one "
                                                          "request",
                                                          *bound),
                                              std::to_string(choices)));
  }
  auto job = std::make_shared<Job>();
  job->timers.assign(choices, server::RequestTimer(&metrics, server::Clock::now()));
  std::shared_ptr<void> registered = Register(job);
  std::vector<uint64_t> ids;
  Backend* backend = model.backend;
  auto cancel_all = [&] {
    for (uint64_t id : ids) backend->Cancel(id);
  };
  for (int i = 0; i < choices; ++i) {
    Expected<uint64_t> id = backend->Submit(server::MakeGenerateRequest(*request, i, context),
                                            [job, i](const RequestUpdate& u) {
                                              job->timers[i].OnUpdate(u, server::Clock::now());
                                              job->queue.Push(i, u);
                                            });
    if (!id.ok()) {
      cancel_all();
      return ReplyError(out, server::SubmitError(id.status(), *request, i));
    }
    ids.push_back(*id);
  }
  server::ResponseBuilder builder(*request, context, server::NewResponseId(route), UnixSeconds());
  if (!request->stream) {
    while (!builder.finished()) {
      // A client that left frees its requests' pages now, not when they would have ended.
      if (out.ClientGone()) return cancel_all();
      if (std::optional<Status> failed = job->queue.failure()) {
        cancel_all();
        return ReplyError(out, server::ToApiError(*failed));
      }
      for (server::ChoiceUpdate& u : job->queue.Pop(kPollInterval)) {
        builder.Apply(u.choice, u.update);
      }
    }
    return Reply(out, 200, builder.Final());
  }
  // Exactly this type: an event stream is UTF-8 by definition.
  if (!out.StartStream("text/event-stream", {{"Cache-Control", "no-cache"}})) return cancel_all();
  server::Clock::time_point last_write = server::Clock::now();
  for (;;) {
    std::string frames;
    for (server::ChoiceUpdate& u : job->queue.Pop(kPollInterval)) {
      frames += builder.StreamUpdate(u.choice, u.update);
    }
    bool done = builder.finished();
    if (done) {
      frames += builder.StreamEnd();
    } else if (std::optional<Status> failed = job->queue.failure()) {
      cancel_all();
      frames += StreamError(server::ToApiError(*failed));
      done = true;
    }
    // An idle stream writes an SSE comment, so that a client that went away is noticed.
    if (frames.empty() && server::Clock::now() - last_write >= kHeartbeat) frames = ": \n\n";
    if (!frames.empty()) {
      if (!out.Write(frames)) return cancel_all();
      last_write = server::Clock::now();
    }
    if (done) {
      out.End();
      return;
    }
  }
}

json Server::Impl::ServerInfo() const {
  json info = json::object();
  json sources = json::object();
  for (const FieldResolution& f : model.resolved.fields()) {
    info[std::string(f.field->name)] = FieldValueJson<json>(f.value);
    sources[std::string(f.field->name)] = f.source;
  }
  const std::string name =
      options.served_model_name.empty() ? model.config.model_path : options.served_model_name;
  info["model_path"] = model.config.model_path;
  info["served_model_name"] = name;
  info["host"] = options.host;
  info["port"] = http ? http->port() : 0;
  info["enable_metrics"] = options.enable_metrics;
  info["api_key_set"] = !options.api_key.empty();
  const EngineSnapshot s = model.backend->Snapshot();
  info["max_total_num_tokens"] = s.max_total_num_tokens;
  info["radix_cache_tokens"] = s.cache_tokens;
  info["max_running_requests"] = s.max_running_requests;
  info["chunked_prefill_size"] = s.chunked_prefill_size;
  info["context_length"] = s.context_length;
  info["sources"] = std::move(sources);
  return info;
}

json Server::Impl::TokenizerInfo() const {
  const Tokenizer& tok = *model.tokenizer;
  auto text = [&](int32_t id) { return id < 0 ? json() : json(tok.token_text(id)); };
  return {{"eos_token", text(tok.eos_id())},
          {"bos_token", text(tok.bos_id())},
          {"pad_token", nullptr},
          // The template chat requests use: --chat-template's, else the model's.
          {"chat_template", chat_template ? chat_template->source() : tok.chat_template()},
          {"model_max_length", model.desc.context_length}};
}

void Server::Impl::Handle(const server::HttpRequest& req, server::HttpResponder& out) {
  try {
    Dispatch(req, out);
  } catch (const std::exception&) {
    ReplyError(out, server::ToApiError(Internal("the server failed on this request")));
  }
}

void Server::Impl::Dispatch(const server::HttpRequest& req, server::HttpResponder& out) {
  if (!Authorized(req)) {
    return ReplyError(out, server::ToApiError(CatalogError("CTXPAR-HTTP-006", {})));
  }
  const std::string& path = req.path;
  const std::string_view allow = server::AllowedMethods(path);
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool allowed = allow == "GET"    ? get
                       : allow == "POST" ? req.method == "POST"
                                         : get || req.method == "POST";
  if (allow.empty() || !allowed) return RefuseRoute(req, out);
  // SGLang reads JSON whatever the Content-Type; form data is another encoding of fields.
  if (allow == "POST" && req.Header("Content-Type").starts_with("multipart/form-data")) {
    return ReplyError(out, HttpRefusal(req.method, path, 415,
                                       "the body is multipart/form-data; send a JSON object"));
  }
  if (path == "/metrics") {
    if (!options.enable_metrics) {
      return ReplyError(out,
                        HttpRefusal(req.method, path, 404,
                                    "metrics are off: start the server with --enable-metrics"));
    }
    if (auto e = Unavailable()) return ReplyError(out, *e);
    out.Send(200, "text/plain; version=0.0.4",
             metrics.Render(model.backend->Snapshot(), PublicModelName(KeyGiven(req))));
    return;
  }
  if (auto e = Unavailable()) return ReplyError(out, *e);
  if (path == "/health") {
    out.Send(200, "", "");
  } else if (path == "/health_generate") {
    if (auto e = GenerateOneToken()) return ReplyError(out, *e);
    out.Send(200, "", "");
  } else if (path == "/v1/models") {
    Reply(out, 200, json{{"object", "list"}, {"data", json::array({ModelCard(KeyGiven(req))})}});
  } else if (path.starts_with("/v1/models/")) {
    const std::string id = path.substr(std::string_view("/v1/models/").size());
    const std::string name = PublicModelName(KeyGiven(req));
    if (id != name) {
      return ReplyError(
          out, server::ToApiError(CatalogError("CTXPAR-HTTP-005",
                                               {{"model", PyRepr(id)}, {"served", PyRepr(name)}}),
                                  "model"));
    }
    Reply(out, 200, ModelCard(KeyGiven(req)));
  } else if (path == "/get_model_info") {
    Reply(out, 200,
          json{{"model_path", model.config.model_path},
               {"tokenizer_path", model.config.model_path},
               {"is_generation", true},
               {"max_context_length", model.desc.context_length}});
  } else if (path == "/get_server_info") {
    Reply(out, 200, ServerInfo());
  } else if (path == "/tokenizer_info") {
    if (model.tokenizer == nullptr) return Reply(out, 404, json::object());
    Reply(out, 200, TokenizerInfo());
  } else if (path == "/tokenize" || path == "/detokenize" || path == "/apply-template") {
    auto result = path == "/tokenize"     ? server::Tokenize(req.body, context)
                  : path == "/detokenize" ? server::Detokenize(req.body, context)
                                          : server::ApplyTemplate(req.body, context);
    if (auto* e = std::get_if<ApiError>(&result)) return ReplyError(out, *e);
    Reply(out, 200, std::get<json>(result));
  } else if (path == "/flush_cache") {
    // SGLang's answers, as plain text: 200 when flushed, 400 with the reason while requests run.
    const Status flushed = model.backend->FlushCache();
    out.Send(flushed.ok() ? 200 : 400, "text/plain; charset=utf-8",
             flushed.ok() ? "Cache flushed.\nPlease check backend logs for more details. (When "
                            "there are running or waiting requests, the operation will not be "
                            "performed.)\n"
                          : flushed.message() + "\n");
  } else {
    for (Route route : {Route::kChat, Route::kCompletions, Route::kGenerate}) {
      if (path == server::RoutePath(route)) return Generate(route, req.body, out);
    }
    RefuseRoute(req, out);
  }
}

Expected<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return CatalogError(
        "CTXPAR-HTTP-009",
        {{"option", "--port"}, {"rule", "in [0, 65535]"}, {"value", std::to_string(options.port)}});
  }
  if (options.host.empty()) {
    return CatalogError("CTXPAR-HTTP-009",
                        {{"option", "--host"}, {"rule", "an address"}, {"value", "''"}});
  }
  if (!(options.http_timeout > 0 && options.http_timeout <= 3600)) {
    return CatalogError("CTXPAR-HTTP-009", {{"option", "--http-timeout"},
                                            {"rule", "seconds in (0, 3600]"},
                                            {"value", fmt::format("{:g}", options.http_timeout)}});
  }
  if (options.max_connections_per_client < 1) {
    return CatalogError("CTXPAR-HTTP-009",
                        {{"option", "--max-connections-per-client"},
                         {"rule", "at least 1"},
                         {"value", std::to_string(options.max_connections_per_client)}});
  }
  if (options.decode_log_interval < 1) {
    return CatalogError("CTXPAR-HTTP-009",
                        {{"option", "--decode-log-interval"},
                         {"rule", "at least 1"},
                         {"value", std::to_string(options.decode_log_interval)}});
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  BeginShutdown();
  Wait();
}

Status Server::Start(int threads) {
  Impl& s = *impl_;
  server::HttpOptions o;
  o.host = s.options.host;
  o.port = s.options.port;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(s.options.http_timeout * 1000));
  o.max_connections_per_client = s.options.max_connections_per_client;
  o.max_body_bytes = kMaxBodyBytes;
  o.max_handlers = threads;
  CTXPAR_ASSIGN_OR_RETURN(
      s.http,
      server::HttpTransport::Listen(
          o,
          [&s](const server::HttpRequest& req, server::HttpResponder& out) { s.Handle(req, out); },
          [](int status, std::string_view method, std::string_view path, std::string_view reason) {
            return server::ErrorBody(HttpRefusal(method, path, status, reason)).dump();
          }));
  s.http->Start();
  return Status::Ok();
}

int Server::port() const { return impl_->http ? impl_->http->port() : -1; }

Status Server::Attach(ServingModel model) {
  Impl& s = *impl_;
  s.model = std::move(model);
  s.context.served_model_name =
      s.options.served_model_name.empty() ? s.model.config.model_path : s.options.served_model_name;
  s.context.tokenizer = s.model.tokenizer;
  s.context.context_length = s.model.desc.context_length;
  s.context.max_total_num_tokens = s.model.backend->Snapshot().max_total_num_tokens;
  s.context.speculative = s.model.config.speculative_algorithm != SpeculativeAlgorithm::kNone;
  s.context.tool_call_parser =
      server::ToolCallParserByName(s.model.resolved.tool_call_parser().value_or(""))
          .value_or(server::ToolCallParser::kNone);
  Status status;
  if (const Tokenizer* tok = s.model.tokenizer) {
    std::size_t longest = 1;
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      if (Expected<std::string> piece = tok->TokenToPiece(id, true); piece.ok()) {
        longest = std::max(longest, piece->size());
      }
    }
    s.context.max_prompt_bytes = static_cast<int64_t>(longest) * s.context.context_length;
    Expected<ChatTemplate> tmpl =
        ChatTemplate::ForTokenizer(*tok, s.model.resolved.chat_template());
    if (tmpl.ok()) {
      s.chat_template.emplace(std::move(*tmpl));
      s.context.chat_template = &*s.chat_template;
    } else {
      s.context.chat_template_error = tmpl.status().message();
      status = tmpl.status();
    }
  }
  s.ready = true;
  return status;
}

void Server::BeginShutdown() { impl_->stopping = true; }

void Server::Fail(const Status& cause) {
  Impl& s = *impl_;
  std::lock_guard lock(s.jobs_mu);
  if (s.failure) return;
  s.failure = cause;
  for (const std::shared_ptr<Job>& job : s.jobs) job->queue.Fail(cause);
}

bool Server::WaitResponses(std::chrono::milliseconds limit) {
  Impl& s = *impl_;
  std::unique_lock lock(s.active_mu);
  return s.active_cv.wait_for(lock, limit, [&] { return s.active == 0; });
}

void Server::Wait() {
  Impl& s = *impl_;
  {
    std::unique_lock lock(s.active_mu);
    s.active_cv.wait(lock, [&] { return s.active == 0; });
  }
  if (s.http) s.http->Stop();
}

}  // namespace ctxpar
