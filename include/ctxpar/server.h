// Server: the OpenAI- and SGLang-compatible HTTP front door of `ctxpar serve`.
//
// Routes (SGLang's shapes; OpenAI's for /v1):
//   POST /v1/chat/completions, POST /v1/completions   streaming (SSE) and not
//   POST /generate                                    SGLang's native request
//   POST /tokenize, POST /detokenize, GET /tokenizer_info
//   POST /apply-template                              llama-server's: messages -> {"prompt"}
//   GET  /v1/models, GET /health (503 until Attach), GET /get_server_info
//   GET  /metrics                                     with enable_metrics (Prometheus text)
//   POST /flush_cache (GET too)                       empties the prefix cache: 200 and SGLang's
//                                                     text, 400 and why while requests run
// Errors are OpenAI's error object {"error": {"message", "type", "param", "code"}}; the message
// carries the catalog ID of errors that have one. With an api_key every route but /health and
// /v1/models wants "Authorization: Bearer <key>" (401 otherwise).
//
// Threads. The HTTP threads only parse, validate, queue (Backend::Submit) and write what the
// backend's update callbacks hand them through a per-request queue; the backend's own thread
// (the engine's Run) owns the model. Each request in flight holds one HTTP thread (which ends
// with it); connections are read by one I/O thread with deadlines (http_transport.h), so slow or
// idle clients hold no thread. A client that goes away has its requests cancelled, streaming or
// not.
//
// Life cycle: Create, Start (binds and answers /health with 503), Attach once the engine is
// loaded, BeginShutdown (new requests get 503; streams go on until their requests end, which
// Engine::Stop makes them do with finish_reason "abort"), Wait (then the socket closes).
//
// Thread safety: every method may be called from any thread; Attach once, before BeginShutdown.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ctxpar/config.h"
#include "ctxpar/engine.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/model.h"
#include "ctxpar/status.h"

namespace ctxpar {

class Tokenizer;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;               // 0: any free port (see Server::port)
  std::string api_key;            // empty: no authentication
  std::string served_model_name;  // empty: the model path
  bool enable_metrics = false;
  // Seconds within which a request's headers must arrive (and the longest wait for the body's
  // next bytes, for a keep-alive connection's next request, and for a write to progress).
  double http_timeout = 10.0;
  int max_connections_per_client = 256;  // open connections from one client address
  // A "Decode batch." log line every this many decode-only steps (SGLang's default; each step
  // that prefills logs a "Prefill batch." line: server/step_log.h).
  int decode_log_interval = 40;
};

// The most requests handled at once for a configuration (each on a thread of its own, which ends
// with it; 503 beyond): one per request that can be running or queued at once (each open stream
// holds one), plus a few for short routes; kMaxHttpThreads when the queue is unbounded.
inline constexpr int kMaxHttpThreads = 4096;
int ServerThreads(const EngineConfig& config);

// What the server needs of the engine. EngineBackend adapts an Engine; tests pass a fake.
// Submit, Cancel and Snapshot are called from the HTTP threads; callbacks arrive on the
// backend's thread and must not block (see engine.h).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Expected<uint64_t> Submit(GenerateRequest request, UpdateCallback on_update) = 0;
  virtual void Cancel(uint64_t id) = 0;
  virtual EngineSnapshot Snapshot() const = 0;
  // Empties the prefix cache (Engine::FlushCache); blocks until done or refused.
  virtual Status FlushCache() = 0;
  // Not OK while the backend cannot serve (a step stalled past the watchdog): /health says 503.
  virtual Status Health() const { return Status::Ok(); }
};

class EngineBackend final : public Backend {
 public:
  explicit EngineBackend(Engine& engine) : engine_(&engine) {}
  Expected<uint64_t> Submit(GenerateRequest request, UpdateCallback on_update) override {
    return engine_->Submit(std::move(request), std::move(on_update));
  }
  void Cancel(uint64_t id) override { engine_->Cancel(id); }
  EngineSnapshot Snapshot() const override { return engine_->Snapshot(); }
  Status FlushCache() override { return engine_->FlushCache(); }
  Status Health() const override { return engine_->Health(); }

 private:
  Engine* engine_;
};

// The loaded model as the routes see it. Pointers are not owned and must outlive the server.
struct ServingModel {
  Backend* backend = nullptr;
  const Tokenizer* tokenizer = nullptr;  // null: the model takes and returns token ids only
  ModelDesc desc;
  EngineConfig config;
  ResolvedConfig resolved;  // for /get_server_info: every field with its source
};

class Server {
 public:
  // Refuses options out of range (port, host, http_timeout, max_connections_per_client) with
  // CTXPAR-HTTP-009.
  static Expected<std::unique_ptr<Server>> Create(ServerOptions options);
  ~Server();

  // Binds host:port (a failure names them) and serves, handling at most `threads` requests at
  // once (ServerThreads).
  Status Start(int threads);
  // The port bound by Start (the chosen one when options.port was 0).
  int port() const;
  // Requests are served from now on; /health answers 200. The chat template (the file of
  // model.resolved's --chat-template, else the tokenizer's) is parsed here: when there is none or
  // it cannot be, the reason is returned (chat routes then answer 400), the rest works.
  Status Attach(ServingModel model);
  // Stops taking requests: new ones get 503 (CTXPAR-HTTP-010).
  void BeginShutdown();
  // The engine can serve no more (`cause`: a rank died, the watchdog fired). Every open request
  // ends now: a stream with a final event {"error": {...}} then [DONE], any other with 503 and
  // the cause's error object; new requests and /health get 503 too.
  void Fail(const Status& cause);
  // Waits up to `limit` until every generation request's response is written; true when done.
  bool WaitResponses(std::chrono::milliseconds limit);
  // After BeginShutdown: waits until every generation request's response is written, then closes
  // the listening socket and joins the HTTP threads.
  void Wait();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctxpar
