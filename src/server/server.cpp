// The routes of server.h on cpp-httplib.
#include "ctxpar/server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "ctxpar/chat_template.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/tokenizer.h"
#include "server/json_read.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/response.h"
#include "server/task_queue.h"
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
void Reply(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

void ReplyError(httplib::Response& res, const ApiError& error) {
  Reply(res, error.http_status, server::ErrorBody(error));
}

// Why the HTTP layer refused a request, by its status (Debian's cpp-httplib has no table).
std::string HttpReason(int status) {
  switch (status) {
    case 400:
      return "400 Bad Request: the request is not well formed HTTP/1.1";
    case 408:
      return "408 Request Timeout: the request did not arrive in time";
    case 413:
      return fmt::format("413 Payload Too Large: the body exceeds {} MiB", kMaxBodyBytes >> 20);
    case 414:
      return "414 URI Too Long";
    case 415:
      return "415 Unsupported Media Type: the body's encoding is not supported";
    case 431:
      return "431 Request Header Fields Too Large";
    default:
      return fmt::format("{}: refused by the HTTP layer", status);
  }
}

// CTXPAR-HTTP-012 with `status`: a request refused before any route read it.
ApiError HttpRefusal(const httplib::Request& req, int status, const std::string& reason) {
  const std::string path = req.path.size() > 200 ? req.path.substr(0, 197) + "..." : req.path;
  ApiError e = server::ToApiError(
      CatalogError("CTXPAR-HTTP-012", {{"method", req.method.empty() ? "malformed" : req.method},
                                       {"path", path.empty() ? "an unread path" : path},
                                       {"reason", reason}}));
  e.http_status = status;
  e.type = status == 404 ? "not_found_error" : "invalid_request_error";
  return e;
}

// Registers a POST route that reads its body itself. httplib's own reading form-parses a body
// sent as application/x-www-form-urlencoded (curl -d's default type) and refuses one over 8 KiB
// with 413; SGLang reads JSON whatever the Content-Type. The payload limit still holds (413).
void PostBody(
    httplib::Server& http, const std::string& path,
    std::function<void(const httplib::Request&, httplib::Response&, std::string body)> handler) {
  http.Post(
      path, [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                           const httplib::ContentReader& reader) {
        if (req.is_multipart_form_data()) {
          return ReplyError(
              res, HttpRefusal(req, 415, "the body is multipart/form-data; send a JSON object"));
        }
        std::string body;
        // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112,
        // 6.3); httplib would wait for one until its read timeout (5 s).
        if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
          return handler(req, res, std::move(body));
        }
        const bool read = reader([&body](const char* data, std::size_t size) {
          body.append(data, size);
          return true;
        });
        // On a failed read httplib answers with the status it set (413), through the error
        // handler.
        if (!read) return;
        handler(req, res, std::move(body));
      });
}

// 405 with Allow when the path is a route of another method, else 404.
void RefuseRoute(const httplib::Request& req, httplib::Response& res) {
  const std::string_view allow = server::AllowedMethods(req.path);
  if (allow.empty()) {
    res.status = 404;
    return ReplyError(res, HttpRefusal(req, 404, "not a route of ctxpar serve"));
  }
  res.status = 405;
  res.set_header("Allow", std::string(allow));
  ReplyError(res, HttpRefusal(req, 405, fmt::format("the route takes {} only", allow)));
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

}  // namespace

int ServerThreads(const EngineConfig& config) {
  if (!config.max_queued_requests) return kMaxHttpThreads;
  return std::clamp(config.max_running_requests + *config.max_queued_requests + 8, 16,
                    kMaxHttpThreads);
}

struct Server::Impl {
  ServerOptions options;
  httplib::Server http;
  std::thread listener;
  int port = 0;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  // Generation requests whose response is not written yet; Wait closes the server at 0 (httplib's
  // stop() would cut the streams short).
  std::mutex active_mu;
  std::condition_variable active_cv;
  int active = 0;
  ServingModel model;
  std::optional<ChatTemplate> chat_template;
  server::ModelContext context;
  server::ServerMetrics metrics;

  void Routes();
  bool Authorized(const httplib::Request& req) const;
  std::optional<ApiError> Unavailable() const;
  void Generate(Route route, const std::string& body, httplib::Response& res);
  std::shared_ptr<void> Track();
  json ServerInfo() const;
  json TokenizerInfo() const;
  json ModelCard() const;
  std::optional<ApiError> GenerateOneToken();
};

json Server::Impl::ModelCard() const {
  return {{"id", context.served_model_name}, {"object", "model"},
          {"created", UnixSeconds()},        {"owned_by", "ctxpar"},
          {"root", model.config.model_path}, {"max_model_len", model.desc.context_length}};
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

// /health*, /v1/models[/ID] and /metrics stay open (probes, clients listing models, Prometheus);
// the scheme is case-insensitive (RFC 7235).
bool Server::Impl::Authorized(const httplib::Request& req) const {
  if (options.api_key.empty() || req.path.starts_with("/health") || req.path == "/v1/models" ||
      req.path.starts_with("/v1/models/") || req.path == "/metrics") {
    return true;
  }
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() != kScheme.size() + options.api_key.size()) return false;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  return header.compare(kScheme.size(), std::string::npos, options.api_key) == 0;
}

std::optional<ApiError> Server::Impl::Unavailable() const {
  if (stopping) {
    return server::ToApiError(CatalogError("CTXPAR-HTTP-010", {{"state", "shutting down"}}));
  }
  if (!ready) {
    return server::ToApiError(CatalogError("CTXPAR-HTTP-010", {{"state", "loading the model"}}));
  }
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

void Server::Impl::Generate(Route route, const std::string& body, httplib::Response& res) {
  std::shared_ptr<void> tracked = Track();
  if (auto e = Unavailable()) return ReplyError(res, *e);
  auto parsed = server::ParseApiRequest(route, body, context);
  if (auto* e = std::get_if<ApiError>(&parsed)) return ReplyError(res, *e);
  auto request =
      std::make_shared<server::ApiRequest>(std::move(std::get<server::ApiRequest>(parsed)));
  const int choices = request->num_choices();
  if (const std::optional<int> bound = model.config.max_queued_requests;
      bound && choices > *bound) {
    // All of them would never fit the queue at once: not worth a retry (503).
    return ReplyError(res, server::RangeError(server::RoutePath(route), "n",
                                              fmt::format("at most --max-queued-requests = {} "
                                                          "choices (n times the prompts) in one "
                                                          "request",
                                                          *bound),
                                              std::to_string(choices)));
  }
  auto job = std::make_shared<Job>();
  job->timers.assign(choices, server::RequestTimer(&metrics, server::Clock::now()));
  auto ids = std::make_shared<std::vector<uint64_t>>();
  Backend* backend = model.backend;
  for (int i = 0; i < choices; ++i) {
    Expected<uint64_t> id = backend->Submit(server::MakeGenerateRequest(*request, i, context),
                                            [job, i](const RequestUpdate& u) {
                                              job->timers[i].OnUpdate(u, server::Clock::now());
                                              job->queue.Push(i, u);
                                            });
    if (!id.ok()) {
      for (uint64_t submitted : *ids) backend->Cancel(submitted);
      return ReplyError(res, server::SubmitError(id.status(), *request, i));
    }
    ids->push_back(*id);
  }
  auto builder = std::make_shared<server::ResponseBuilder>(
      *request, context, server::NewResponseId(route), UnixSeconds());
  if (!request->stream) {
    while (!builder->finished()) {
      for (server::ChoiceUpdate& u : job->queue.Pop(kPollInterval))
        builder->Apply(u.choice, u.update);
    }
    return Reply(res, 200, builder->Final());
  }
  auto last_write = std::make_shared<server::Clock::time_point>(server::Clock::now());
  res.set_header("Cache-Control", "no-cache");
  // Exactly this type: an event stream is UTF-8 by definition, and cpp-httplib gzips (so buffers)
  // any other text/ type for a client that accepts gzip.
  res.set_chunked_content_provider(
      "text/event-stream",
      [request, job, builder, last_write, tracked](size_t, httplib::DataSink& sink) {
        std::string frames;
        for (server::ChoiceUpdate& u : job->queue.Pop(kPollInterval)) {
          frames += builder->StreamUpdate(u.choice, u.update);
        }
        const bool done = builder->finished();
        if (done) frames += builder->StreamEnd();
        if (frames.empty() && server::Clock::now() - *last_write >= kHeartbeat) frames = ": \n\n";
        if (!frames.empty()) {
          if (!sink.write(frames.data(), frames.size())) return false;
          *last_write = server::Clock::now();
        }
        if (done) sink.done();
        return true;
      },
      [backend, ids](bool success) {
        if (success) return;
        for (uint64_t id : *ids) backend->Cancel(id);
      });
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
  info["port"] = port;
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
          {"chat_template", tok.chat_template()},
          {"model_max_length", model.desc.context_length}};
}

void Server::Impl::Routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req)) {
      ReplyError(res, server::ToApiError(CatalogError("CTXPAR-HTTP-006", {})));
      return httplib::Server::HandlerResponse::Handled;
    }
    // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112, 6.3);
    // to a route that does not take its method httplib would still wait for one until its read
    // timeout (5 s) before it answered.
    if (req.method != "GET" && req.method != "HEAD" && !req.has_header("Content-Length") &&
        !req.has_header("Transfer-Encoding") && server::AllowedMethods(req.path) != req.method) {
      RefuseRoute(req, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    res.status = 200;
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    Reply(res, 200, json{{"object", "list"}, {"data", json::array({ModelCard()})}});
  });
  http.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    if (req.matches[1] != context.served_model_name) {
      return ReplyError(
          res, server::ToApiError(
                   CatalogError("CTXPAR-HTTP-005", {{"model", PyRepr(req.matches[1].str())},
                                                    {"served", PyRepr(context.served_model_name)}}),
                   "model"));
    }
    Reply(res, 200, ModelCard());
  });
  http.Get("/get_model_info", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    Reply(res, 200,
          json{{"model_path", model.config.model_path},
               {"tokenizer_path", model.config.model_path},
               {"is_generation", true},
               {"max_context_length", model.desc.context_length}});
  });
  http.Get("/health_generate", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    if (auto e = GenerateOneToken()) return ReplyError(res, *e);
    res.status = 200;
  });
  http.Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    Reply(res, 200, ServerInfo());
  });
  http.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    if (model.tokenizer == nullptr) return Reply(res, 404, json::object());
    Reply(res, 200, TokenizerInfo());
  });
  for (auto [path, tokenize] : {std::pair{"/tokenize", true}, std::pair{"/detokenize", false}}) {
    PostBody(http, path,
             [this, tokenize = tokenize](const httplib::Request&, httplib::Response& res,
                                         const std::string& body) {
               if (auto e = Unavailable()) return ReplyError(res, *e);
               auto out =
                   tokenize ? server::Tokenize(body, context) : server::Detokenize(body, context);
               if (auto* e = std::get_if<ApiError>(&out)) return ReplyError(res, *e);
               Reply(res, 200, std::get<json>(out));
             });
  }
  for (Route route : {Route::kChat, Route::kCompletions, Route::kGenerate}) {
    PostBody(http, std::string(server::RoutePath(route)),
             [this, route](const httplib::Request&, httplib::Response& res,
                           const std::string& body) { Generate(route, body, res); });
  }
  // SGLang's answers, as plain text: 200 when flushed, 400 with the reason while requests run.
  auto flush = [this](httplib::Response& res) {
    if (auto e = Unavailable()) return ReplyError(res, *e);
    const Status flushed = model.backend->FlushCache();
    res.status = flushed.ok() ? 200 : 400;
    res.set_content(flushed.ok() ? "Cache flushed.\nPlease check backend logs for more details. "
                                   "(When there are running or waiting requests, the operation "
                                   "will not be performed.)\n"
                                 : flushed.message() + "\n",
                    "text/plain; charset=utf-8");
  };
  http.Get("/flush_cache",
           [flush](const httplib::Request&, httplib::Response& res) { flush(res); });
  PostBody(
      http, "/flush_cache",
      [flush](const httplib::Request&, httplib::Response& res, const std::string&) { flush(res); });
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!options.enable_metrics) {
      return ReplyError(
          res, HttpRefusal(req, 404, "metrics are off: start the server with --enable-metrics"));
    }
    if (auto e = Unavailable()) return ReplyError(res, *e);
    res.set_content(metrics.Render(model.backend->Snapshot(), context.served_model_name),
                    "text/plain; version=0.0.4");
  });
  // A handler that throws answers 500 with the error object (httplib would put the exception's
  // text in a header).
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        ReplyError(res, server::ToApiError(Internal("the server failed on this request")));
      });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) return RefuseRoute(req, res);
    ReplyError(res, HttpRefusal(req, res.status, HttpReason(res.status)));
  });
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
  s.http.new_task_queue = [threads] { return new server::GrowingTaskQueue(threads); };
  s.http.set_payload_max_length(kMaxBodyBytes);
  s.Routes();
  // httplib's default options set SO_REUSEPORT, which lets a second server bind a port in use
  // (and share its connections) instead of failing: SO_REUSEADDR only.
  int listen_socket = -1;
  s.http.set_socket_options([&listen_socket](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_socket = sock;
  });
  const std::string& host = s.options.host;
  s.port = s.options.port == 0 ? s.http.bind_to_any_port(host)
                               : (s.http.bind_to_port(host, s.options.port) ? s.options.port : -1);
  // Its compiled-in backlog of 5 overflows when dozens of clients connect at once (a reset now and
  // then under load): listen again with the system's maximum.
  if (s.port >= 0) ::listen(listen_socket, SOMAXCONN);
  if (s.port < 0) {
    return CatalogError("CTXPAR-HTTP-011", {{"host", host},
                                            {"port", std::to_string(s.options.port)},
                                            {"detail", "the address is in use or not local"}});
  }
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  return Status::Ok();
}

int Server::port() const { return impl_->port; }

Status Server::Attach(ServingModel model) {
  Impl& s = *impl_;
  s.model = std::move(model);
  s.context.served_model_name =
      s.options.served_model_name.empty() ? s.model.config.model_path : s.options.served_model_name;
  s.context.tokenizer = s.model.tokenizer;
  s.context.context_length = s.model.desc.context_length;
  s.context.max_total_num_tokens = s.model.backend->Snapshot().max_total_num_tokens;
  Status status;
  if (s.model.tokenizer != nullptr) {
    Expected<ChatTemplate> tmpl = ChatTemplate::FromJinja(s.model.tokenizer->chat_template());
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

void Server::Wait() {
  Impl& s = *impl_;
  {
    std::unique_lock lock(s.active_mu);
    s.active_cv.wait(lock, [&] { return s.active == 0; });
  }
  s.http.stop();
  if (s.listener.joinable()) s.listener.join();
}

}  // namespace ctxpar
