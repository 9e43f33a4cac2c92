// `ctxpar serve [launch flags] [--host H] [--port P] [--api-key K] [--served-model-name N]
// [--enable-metrics]`: the OpenAI-compatible server (server.h) on the engine.
//
// The launch configuration goes through PrepareLaunch (as `generate` and `check --model-path`).
// With tp_size > 1 and no MPI job around it the command runs itself under `mpirun -np tp_size`
// (mpi_launch.h: this process stays mpirun's parent and passes SIGINT / SIGTERM on to the ranks
// as SIGUSR1 / SIGUSR2); rank 0 binds the port (before anything loads, so that a port in use is
// reported at once), serves HTTP and plans; every rank computes (Engine::Run until Stop). An
// error is printed once, by rank 0 (FinishRank).
//
// Logs, on stderr as SGLang's: the resolved configuration (server_args=...), the engine's KV
// capacity lines, then one ready line. SIGINT / SIGTERM: stop accepting, end the requests in
// flight with finish_reason "abort", exit 0 on every rank.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "ctxpar/chat_template.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/launch.h"
#include "ctxpar/server.h"
#include "error_report.h"
#include "launch_flags.h"
#include "mpi_launch.h"
#include "rank_watch.h"
#include "server/step_log.h"

namespace ctxpar::cli {
namespace {

int Fail(const Status& status) { return ReportBeforeWorld(status); }

sigset_t SignalSet(std::initializer_list<int> signals) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  return set;
}

void Log(std::string_view line) {
  std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  std::fflush(stderr);
}

// SGLang's first log line: every field of the resolved configuration, then the server's options.
std::string ServerArgsLine(const Launch& launch, const ServerOptions& o) {
  std::string line = "server_args=ServerArgs(";
  for (const FieldResolution& f : launch.resolved.fields()) {
    // The model path may come from CTXPAR_MODEL or the model cache rather than the flag.
    const std::string value =
        f.field->name == "model_path" ? PyRepr(launch.config.model_path) : FieldValueRepr(f.value);
    line += std::string(f.field->name) + "=" + value + ", ";
  }
  line += "host='" + o.host + "', port=" + std::to_string(o.port) + ", served_model_name='" +
          (o.served_model_name.empty() ? launch.config.model_path : o.served_model_name) +
          "', api_key=" + (o.api_key.empty() ? "None" : "'***'") +
          ", enable_metrics=" + (o.enable_metrics ? "True" : "False") +
          ", decode_log_interval=" + std::to_string(o.decode_log_interval) + ")";
  return line;
}

// Rank 0, when the engine can serve no more (a rank died, the watchdog fired): ends every open
// request with the error, answers 503 (/health too) for a moment so that probes see why, and
// exits; under mpirun the job then ends.
[[noreturn]] void EndOnFault(Server& server, const Status& fault) {
  constexpr auto kFlush = std::chrono::seconds(2);
  const auto began = std::chrono::steady_clock::now();
  Log("ctxpar serve: " + fault.message() + " (" + fault.error_id() + ")");
  server.Fail(fault);
  const bool flushed = server.WaitResponses(kFlush);
  Log(flushed ? "ctxpar serve: every open request was ended with that error; exiting"
              : "ctxpar serve: some responses could not be written in time; exiting");
  std::this_thread::sleep_until(began + kFlush);
  TellLauncherWhyRank0Ends(fault);
  std::_Exit(ExitStatusFor(fault));
}

// Rank 0: binds, tells the other ranks whether it could (they would otherwise wait in the
// engine's collectives), then loads, serves and stops on a signal.
Status RunRank(Communicator& world, Launch& launch, const ServerOptions& options,
               const sigset_t& signals) {
  const bool leader = world.rank() == 0;
  std::unique_ptr<Server> server;
  Status bound;
  if (leader) {
    Expected<std::unique_ptr<Server>> created = Server::Create(options);
    if (created.ok()) Log(ServerArgsLine(launch, options));
    bound = created.ok() ? (*created)->Start(ServerThreads(launch.config)) : created.status();
    // A template the operator named must render (CTXPAR-CHAT-004 / -002); a model that carries
    // none or one that fails only loses chat (Attach).
    const Tokenizer* tok = launch.source->tokenizer();
    if (bound.ok() && tok != nullptr && !launch.resolved.chat_template().empty()) {
      bound = ChatTemplate::ForTokenizer(*tok, launch.resolved.chat_template()).status();
    }
    if (bound.ok()) server = std::move(*created);
  }
  int32_t ok = bound.ok() ? 1 : 0;
  CTXPAR_RETURN_IF_ERROR(world.Broadcast(&ok, 1, DataType::kI32, 0));
  if (!ok) {
    return leader ? bound : Unavailable("rank 0 could not start the HTTP server");
  }
  EngineConfig engine_config = launch.config;
  engine_config.populate_kv_cache = true;
  Expected<std::unique_ptr<Engine>> engine =
      Engine::Create(engine_config, *launch.source, world, leader ? Log : nullptr);
  if (!engine.ok()) return engine.status();
  Expected<std::unique_ptr<RankWatch>> watch = RankWatch::Create(world);
  if (!watch.ok()) return watch.status();
  std::thread waiter;
  std::atomic<bool> run_ended{false};
  std::unique_ptr<EngineBackend> backend;
  if (leader) {
    backend = std::make_unique<EngineBackend>(**engine);
    ServingModel model{backend.get(), launch.source->tokenizer(), launch.source->desc(),
                       launch.config, launch.resolved};
    if (Status s = server->Attach(std::move(model)); !s.ok()) {
      Log("ctxpar serve: chat completions are off: " + s.message());
    }
    const bool ipv6 = options.host.find(':') != std::string::npos;
    Log("The server is fired up and ready to roll! Listening on http://" +
        (ipv6 ? "[" + options.host + "]" : options.host) + ":" + std::to_string(server->port()));
    Engine* e = engine->get();
    e->SetStepObserver(
        [e, log = std::make_shared<StepLog>(options.decode_log_interval, Log)](
            const StepRecord& step) { log->Step(step, e->Snapshot(), StepLog::Clock::now()); });
    Server* srv = server.get();
    e->OnFault([srv](const Status& fault) { srv->Fail(fault); });
    waiter = std::thread([e, srv, &signals, &run_ended, ranks = watch->get()] {
      const timespec now{0, 0};
      while (!run_ended.load()) {
        std::optional<Status> fault = ranks->Wait(std::chrono::milliseconds(100));
        if (!fault) {
          if (Status health = e->Health(); !health.ok()) fault = health;
        }
        if (fault) EndOnFault(*srv, *fault);
        const int signal = sigtimedwait(&signals, nullptr, &now);
        if (signal <= 0) continue;
        // Under mpirun the launcher forwards SIGINT / SIGTERM as SIGUSR1 / SIGUSR2.
        const int received = signal == SIGUSR1 ? SIGINT : signal == SIGUSR2 ? SIGTERM : signal;
        Log(std::string("ctxpar serve: ") + (received == SIGINT ? "SIGINT" : "SIGTERM") +
            ": no new request; ending the requests in flight");
        srv->BeginShutdown();
        e->Stop();
        return;
      }
    });
  }
  Status run = (*engine)->Run(Engine::RunUntil::kStopped);
  if (leader) {
    run_ended.store(true);
    waiter.join();
    server->BeginShutdown();
    server->Wait();
  }
  return run;
}

int RunServe(const std::vector<std::string>& args) {
  CLI::App app{"Serve the model over HTTP (OpenAI- and SGLang-compatible routes).", "ctxpar serve"};
  LaunchFlags flags;
  AddLaunchFlags(app, &flags);
  ServerOptions o;
  app.add_option("--host", o.host, "Address to listen on (default 127.0.0.1).");
  app.add_option("--port", o.port, "Port to listen on (default 30000; 0: any free port).");
  app.add_option("--api-key", o.api_key,
                 "Require 'Authorization: Bearer KEY' (not on /health*, /v1/models and "
                 "/metrics).");
  app.add_option("--served-model-name", o.served_model_name,
                 "The model name of the API (default: the model path).");
  app.add_flag("--enable-metrics", o.enable_metrics, "Serve Prometheus metrics on /metrics.");
  app.add_option("--http-timeout", o.http_timeout,
                 "Seconds within which a request's headers must arrive, and the longest pause in "
                 "its body or in a client's reading (default 10).");
  app.add_option("--max-connections-per-client", o.max_connections_per_client,
                 "Open connections one client address may hold (default 256; 429 beyond).");
  app.add_option("--decode-log-interval", o.decode_log_interval,
                 "Log a 'Decode batch.' line every this many decode steps (default 40; every "
                 "step that prefills logs a 'Prefill batch.' line).");
  Status status;
  if (int rc = ParseCommandLine(app, args, "serve", &status); rc >= 0) {
    return rc == kExitOk ? rc : Fail(status);
  }
  Expected<LaunchConfig> raw = ToLaunchConfig(flags);
  if (!raw.ok()) return Fail(raw.status());
  Expected<Launch> launch = PrepareLaunch(*raw);
  if (!launch.ok()) return Fail(launch.status());
  const int tp = launch->config.tp_size;
  if (tp > 1 && !UnderMpi()) {
    if (Expected<double> t = CollectiveTimeoutFromEnv(); !t.ok()) return Fail(t.status());
    return RunUnderMpirun("serve", tp, args);
  }
  // Every thread (MPI's, the HTTP pool, the engine's) inherits this mask, so the stop signals
  // (SIGUSR1 / SIGUSR2 are what the launcher passes on through mpirun) reach only rank 0's waiter
  // thread; the other ranks leave them pending and stop when rank 0's plan says so.
  const sigset_t signals = SignalSet({SIGINT, SIGTERM, SIGUSR1, SIGUSR2});
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return RunOnRanks(tp, [&](Communicator& world) { return RunRank(world, *launch, o, signals); });
}

}  // namespace

CTXPAR_REGISTER_COMMAND("serve", "serve the model over HTTP (OpenAI and SGLang routes)", RunServe);

}  // namespace ctxpar::cli
