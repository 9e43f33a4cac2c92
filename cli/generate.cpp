// `ctxpar generate [launch flags] PROMPT`: runs the model on the engine over tp_size ranks with
// decode context parallelism and prints what it generates.
//
// One prompt (text, or --input-ids) streams its text to stdout; --prompts-file submits every
// line at once (continuous batching) and prefixes each output line with the prompt's index and a
// tab. --print-ids prints the generated token ids instead of text. The launch configuration goes
// through PrepareLaunch (as `check --model-path` and `serve`) before any rank starts. With
// tp_size > 1 and no MPI job around it, the command runs itself under `mpirun -np tp_size`
// (mpi_launch.h: the user never types mpirun on one machine); under MPI every rank runs the
// engine, rank 0 prints, and an error is printed once (FinishRank). SIGINT / SIGTERM end the
// requests at the next token (signals.h): the line is ended and the exit status is 130 / 143.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "ctxpar/chat_template.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/launch.h"
#include "ctxpar/tokenizer.h"
#include "error_report.h"
#include "launch_flags.h"
#include "mpi_launch.h"
#include "rank_watch.h"
#include "signals.h"

namespace ctxpar::cli {
namespace {

struct GenerateOptions {
  std::vector<std::string> prompt;  // the positional words, joined by spaces
  std::string prompts_file;
  std::string input_ids;
  bool has_input_ids = false;               // --input-ids given, even empty
  std::vector<std::string> stop_token_ids;  // each a comma-separated list
  bool print_ids = false;
  bool chat = false;
  SamplingParams sampling;
  std::string seed;
  int warmup = 0;  // untimed runs of the prompts before the timed one
};

int Fail(const Status& status) { return ReportBeforeWorld(status); }

// A decimal integer in [0, 2^64): nothing else (no sign, exponent or fraction): CTXPAR-FLAG-002
// for other text, CTXPAR-FLAG-003 past the range.
Expected<uint64_t> ParseSeed(const std::string& text) {
  uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (char c : text) ok = ok && c >= '0' && c <= '9';
  if (ok) {
    for (char c : text) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) {
        ok = false;
        break;
      }
      v = v * 10 + d;
    }
  }
  if (!ok) {
    const std::string_view unsigned_part =
        text.starts_with('-') ? std::string_view(text).substr(1) : std::string_view(text);
    const bool integer = !unsigned_part.empty() &&
                         unsigned_part.find_first_not_of("0123456789") == std::string_view::npos;
    return CatalogError(integer ? "CTXPAR-FLAG-003" : "CTXPAR-FLAG-002",
                        {{"value", PyRepr(text)},
                         {"flag", "--seed"},
                         {"valid", "integers from 0 to 18446744073709551615"}});
  }
  return v;
}

Expected<std::vector<int32_t>> ParseIds(const std::string& text, const char* flag) {
  std::vector<int32_t> ids;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    const bool integer = !item.empty() && *end == '\0';
    if (!integer || errno != 0 || v < 0 || v > INT32_MAX) {
      return CatalogError(integer ? "CTXPAR-FLAG-003" : "CTXPAR-FLAG-002",
                          {{"value", PyRepr(item)},
                           {"flag", flag},
                           {"valid", "comma-separated token ids from 0 to 2147483647"}});
    }
    ids.push_back(static_cast<int32_t>(v));
    at = comma + 1;
  }
  return ids;
}

// The file's lines without their line ends (\n or \r\n) and without a UTF-8 byte order mark.
Expected<std::vector<std::string>> ReadPromptLines(const std::string& path) {
  auto fail = [&](const std::string& reason) {
    return CatalogError("CTXPAR-ENGINE-012", {{"file", PyRepr(path)}, {"reason", reason}});
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return fail("it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(std::strerror(errno));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lines.empty() && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    lines.push_back(std::move(line));
  }
  if (in.bad()) return fail(std::strerror(errno));
  if (lines.empty()) return fail("it holds no line");
  return lines;
}

// chat_template_file: --chat-template, "" for the model's own template.
Expected<std::vector<int32_t>> Encode(const ModelSource& model, const std::string& text, bool chat,
                                      const std::string& chat_template_file) {
  const Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) {
    return CatalogError("CTXPAR-ENGINE-013", {{"model", model.desc().architecture}});
  }
  // A raw prompt is the operator's whole text: control tokens written in it are tokens, as
  // llama-cli and /v1/completions read them. A chat message's are text (ChatTemplate).
  if (!chat) return tok->Encode(text, {.parse_special = true});
  CTXPAR_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::ForTokenizer(*tok, chat_template_file));
  const std::vector<ChatMessage> messages = {{"user", text}};
  return tmpl.Encode(*tok, messages, true);
}

// A prompt's error with the prompts file's line named (its message stays the catalog's text).
Status AtLine(const GenerateOptions& o, std::size_t i, Status status) {
  if (status.ok() || o.prompts_file.empty()) return status;
  const std::string prompt = "prompt " + std::to_string(i);
  const std::string line = "(line " + std::to_string(i + 1) + " of " + o.prompts_file + ")";
  // A message that names the prompt already (ENGINE-011) gets the line after that name.
  const std::string& message = status.message();
  return Status(status.code(),
                message.starts_with(prompt + " ")
                    ? prompt + " " + line + message.substr(prompt.size())
                    : prompt + " " + line + ": " + message,
                status.error_id());
}

Expected<std::vector<std::vector<int32_t>>> Prompts(const GenerateOptions& o,
                                                    const Launch& launch) {
  const ModelSource& model = *launch.source;
  const std::string chat_template = launch.resolved.chat_template();
  std::vector<std::vector<int32_t>> out;
  if (o.has_input_ids) {
    CTXPAR_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(o.input_ids, "--input-ids"));
    out.push_back(std::move(ids));
  } else if (!o.prompts_file.empty()) {
    CTXPAR_ASSIGN_OR_RETURN(std::vector<std::string> lines, ReadPromptLines(o.prompts_file));
    for (const std::string& line : lines) {
      CTXPAR_ASSIGN_OR_RETURN(std::vector<int32_t> ids, Encode(model, line, o.chat, chat_template));
      out.push_back(std::move(ids));
    }
  } else {
    std::string text;
    for (const std::string& w : o.prompt) text += (text.empty() ? "" : " ") + w;
    CTXPAR_ASSIGN_OR_RETURN(std::vector<int32_t> ids, Encode(model, text, o.chat, chat_template));
    out.push_back(std::move(ids));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) {
      return AtLine(o, i, CatalogError("CTXPAR-ENGINE-011", {{"index", std::to_string(i)}}));
    }
  }
  return out;
}

// Rank 0's printing: one stream as it comes, or lines prefixed with the prompt's index.
class Printer {
 public:
  Printer(bool indexed, bool ids) : indexed_(indexed), ids_(ids) {}
  void Update(std::size_t index, const RequestUpdate& u) {
    std::string& pending = pending_[index];
    if (ids_) {
      for (int32_t t : u.tokens) pending += (pending.empty() ? "" : " ") + std::to_string(t);
    } else {
      pending += u.text;
    }
    const std::string prefix = indexed_ ? std::to_string(index) + "\t" : "";
    if (!indexed_ && !ids_) {
      WriteOutput(pending);
      pending.clear();
    } else if (indexed_ && !ids_) {
      for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        WriteOutput(prefix + pending.substr(0, nl + 1));
        pending.erase(0, nl + 1);
      }
    }
    if (u.finish != FinishReason::kNone) {
      WriteOutput(prefix + pending + "\n");
      pending.clear();
    }
  }

 private:
  bool indexed_, ids_;
  std::map<std::size_t, std::string> pending_;
};

// Rank 0 submits every prompt (what a full queue refuses, again at the next update) and every
// rank runs the engine until the requests end; on_update(i, u) sees prompt i's updates. An
// aborted request fails the run, unless SIGINT / SIGTERM ended it (the caller reports that).
Status RunPrompts(Engine& engine, bool leader, const std::vector<std::vector<int32_t>>& prompts,
                  const SamplingParams& sampling,
                  const std::function<void(std::size_t, const RequestUpdate&)>& on_update) {
  Status failure;
  std::size_t next = 0;
  std::function<void()> submit_more;
  auto update = [&](std::size_t i, const RequestUpdate& u) {
    if (u.finish == FinishReason::kAbort && failure.ok() && StopRequested() == 0) {
      failure = Internal("request " + std::to_string(i) + " aborted: " + u.finish_detail);
    }
    on_update(i, u);
    if (StopRequested() != 0) {
      engine.Stop();  // every request ends at this step
    } else {
      submit_more();
    }
  };
  submit_more = [&] {
    for (; next < prompts.size() && failure.ok(); ++next) {
      const std::size_t i = next;
      Expected<uint64_t> id = engine.Submit({prompts[i], sampling, false},
                                            [&update, i](const RequestUpdate& u) { update(i, u); });
      if (id.ok()) continue;
      if (id.status().error_id() == "CTXPAR-ENGINE-007") return;
      engine.Stop();
      failure = id.status();
    }
  };
  if (leader) submit_more();
  CTXPAR_RETURN_IF_ERROR(engine.Run(Engine::RunUntil::kIdle));
  return failure;
}

Status RunRank(Communicator& world, const Launch& launch, const GenerateOptions& o) {
  const bool leader = world.rank() == 0;
  CTXPAR_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> prompts, Prompts(o, launch));
  CTXPAR_ASSIGN_OR_RETURN(
      std::unique_ptr<Engine> engine,
      Engine::Create(launch.config, *launch.source, world, [](std::string_view line) {
        std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
      }));
  // Rank 0 watches the other ranks: one that dies ends the command at once, named with its
  // host, rather than when mpirun gets to it (rank_watch.h).
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<RankWatch> watch, RankWatch::Create(world));
  // Declared after `watch`: its destructor stops and joins the thread before `watch` goes.
  std::jthread watcher;
  if (leader) {
    watcher = std::jthread([w = watch.get()](std::stop_token stop) {
      while (!stop.stop_requested()) {
        if (std::optional<Status> death = w->Wait(std::chrono::milliseconds(100))) {
          TellLauncherWhyRank0Ends(*death);
          std::_Exit(ReportError(*death));
        }
      }
    });
  }
  // Every prompt is checked (and with --allow-auto-truncate cut) before any runs, so that a bad
  // one stops the command before the others print anything.
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r{prompts[i], o.sampling, false};
    CTXPAR_RETURN_IF_ERROR(AtLine(o, i, engine->Prepare(r)));
    if (leader && r.prompt.size() < prompts[i].size()) {
      std::fprintf(stderr, "prompt %zu truncated from %zu to %zu tokens (--allow-auto-truncate)\n",
                   i + 1, prompts[i].size(), r.prompt.size());
    }
    prompts[i] = std::move(r.prompt);
  }
  // As llama-bench's warm-up run: the same requests, untimed and unprinted, then the prefix
  // cache emptied so that the timed run computes every prompt again.
  for (int w = 0; w < o.warmup; ++w) {
    CTXPAR_RETURN_IF_ERROR(
        RunPrompts(*engine, leader, prompts, o.sampling, [](std::size_t, const RequestUpdate&) {}));
    // A signal stops rank 0's engine: every rank then ends here, as rank 0 does.
    int32_t stop = leader ? StopRequested() : 0;
    CTXPAR_RETURN_IF_ERROR(world.Broadcast(&stop, 1, DataType::kI32, 0));
    if (stop != 0) return leader ? Interrupted(stop, 0) : Status::Ok();
    if (leader) CTXPAR_RETURN_IF_ERROR(engine->FlushCache());
  }
  // Prefill ends when every request has its first token; decode is what comes after (with one
  // prompt: the first token, then the rest). With a queue bound below the prompts, later prompts
  // prefill while earlier ones decode, so the summary also gives every generated token over the
  // whole run.
  using Clock = std::chrono::steady_clock;
  const EngineSnapshot before = engine->Snapshot();  // the warm-up's hits and verify steps
  const uint64_t cached_before = before.cached_tokens_total;
  const auto t0 = Clock::now();
  Clock::time_point all_first = t0;
  std::size_t started = 0;
  int64_t decoded = 0, generated = 0, prompt_tokens = 0;
  // A model without a tokenizer has no text to print: its ids, as --print-ids prints them.
  Printer printer(!o.prompts_file.empty(), o.print_ids || launch.source->tokenizer() == nullptr);
  for (const std::vector<int32_t>& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  Status failure =
      RunPrompts(*engine, leader, prompts, o.sampling, [&](std::size_t i, const RequestUpdate& u) {
        const auto n = static_cast<int64_t>(u.tokens.size());
        generated += n;
        if (started == prompts.size()) decoded += n;
        if (n > 0 && u.completion_tokens == n && ++started == prompts.size()) {
          all_first = Clock::now();
          decoded += n - 1;
        }
        printer.Update(i, u);
      });
  if (!leader) return failure;
  if (const int stop = StopRequested(); stop != 0) {
    return Interrupted(stop, static_cast<int>(decoded + static_cast<int64_t>(started)));
  }
  CTXPAR_RETURN_IF_ERROR(failure);
  const auto t1 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(all_first - t0).count();
  const double decode_s = std::chrono::duration<double>(t1 - all_first).count();
  const double total_s = std::chrono::duration<double>(t1 - t0).count();
  const EngineConfig& c = launch.config;
  std::fprintf(
      stderr,
      "ctxpar generate: tp %d dcp %d %s%s, %d thread(s)/rank, %zu request(s): prefill "
      "%lld tokens (%llu from the prefix cache) in %.3f s (%.1f tokens/s), decode %lld tokens in "
      "%.3f s (%.1f tokens/s); %lld generated in %.3f s (%.1f tokens/s)\n",
      c.tp_size, c.dcp_size, std::string(CombineBackendName(c.dcp_comm_backend)).c_str(),
      c.dcp_replicate_q_proj ? " replicated-q" : "", c.threads, prompts.size(),
      static_cast<long long>(prompt_tokens),
      static_cast<unsigned long long>(engine->Snapshot().cached_tokens_total - cached_before),
      prefill_s, prefill_s > 0 ? double(prompt_tokens) / prefill_s : 0.0,
      static_cast<long long>(decoded), decode_s,
      decoded > 0 && decode_s > 0 ? double(decoded) / decode_s : 0.0,
      static_cast<long long>(generated), total_s, total_s > 0 ? double(generated) / total_s : 0.0);
  if (c.speculative_algorithm != SpeculativeAlgorithm::kNone) {
    const EngineSnapshot after = engine->Snapshot();
    const uint64_t steps = after.spec_verify_steps_total - before.spec_verify_steps_total;
    const uint64_t tokens = after.spec_verify_tokens_total - before.spec_verify_tokens_total;
    const uint64_t drafts = after.spec_draft_tokens_total - before.spec_draft_tokens_total;
    std::fprintf(
        stderr,
        "ctxpar generate: speculative %s: %llu verify step(s), accept len %.2f, "
        "accept rate %.2f (%llu of %llu drafted tokens)\n",
        std::string(SpeculativeAlgorithmName(c.speculative_algorithm)).c_str(),
        static_cast<unsigned long long>(steps), steps > 0 ? double(tokens) / double(steps) : 0.0,
        drafts > 0 ? double(tokens - steps) / double(drafts) : 0.0,
        static_cast<unsigned long long>(tokens - steps), static_cast<unsigned long long>(drafts));
  }
  return Status::Ok();
}

int RunGenerate(const std::vector<std::string>& args) {
  CLI::App app{"Generate text with the model over tp_size ranks with DCP.", "ctxpar generate"};
  LaunchFlags flags;
  AddLaunchFlags(app, &flags);
  GenerateOptions o;
  SamplingParams& s = o.sampling;
  s.temperature = 0.0f;
  app.add_option("prompt", o.prompt,
                 "The prompt: raw text, in which control tokens such as <|im_start|> are read "
                 "as tokens, or with --chat the user message, which is all text.");
  app.add_option("--prompts-file", o.prompts_file,
                 "Submit every line of FILE as a prompt at once; output lines begin with the "
                 "prompt's index and a tab.");
  CLI::Option* input_ids =
      app.add_option("--input-ids", o.input_ids, "The prompt as comma-separated token ids.");
  app.add_flag("--print-ids", o.print_ids, "Print the generated token ids, space-separated.")
      ->disable_flag_override();
  app.add_flag("--chat", o.chat, "Wrap the prompt in the model's chat template.")
      ->disable_flag_override();
  app.add_option("--max-new-tokens", s.max_new_tokens, "Tokens to generate (>= 1).")
      ->capture_default_str();
  app.add_option("--temperature", s.temperature, "0 (the default) is greedy.");
  app.add_option("--top-p", s.top_p, "Nucleus sampling mass, in (0, 1].");
  app.add_option("--top-k", s.top_k, "Sample from the k most likely tokens (-1 or 0: all).");
  app.add_option("--min-p", s.min_p,
                 "Drop tokens below min_p times the most likely's probability.");
  app.add_option("--repetition-penalty", s.repetition_penalty, "Penalty of seen tokens (1: none).");
  app.add_option("--frequency-penalty", s.frequency_penalty, "In [-2, 2].");
  app.add_option("--presence-penalty", s.presence_penalty, "In [-2, 2].");
  app.add_option("--seed", o.seed, "Seed of the sampler, an integer in [0, 2^64).")
      ->type_name("INT");
  // One value per occurrence, so that a prompt after them stays the prompt.
  app.add_option("--stop", s.stop, "Stop at this text (repeatable); it is not printed.")
      ->allow_extra_args(false);
  app.add_option("--stop-token-ids", o.stop_token_ids,
                 "Stop at these token ids (comma-separated, repeatable).")
      ->allow_extra_args(false);
  app.add_option("--warmup", o.warmup,
                 "Run the prompts this many times first, untimed and unprinted, emptying the "
                 "prefix cache after each (as llama-bench's warm-up run): the summary then times "
                 "a process whose memory and caches are warm.")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_flag("--ignore-eos", s.ignore_eos,
               "Generate --max-new-tokens tokens even past an end-of-generation token.")
      ->disable_flag_override();
  Status status;
  if (int rc = ParseCommandLine(app, args, "generate", &status); rc >= 0) {
    return rc == kExitOk ? rc : Fail(status);
  }
  o.has_input_ids = input_ids->count() > 0;
  const int sources = !o.prompt.empty() + !o.prompts_file.empty() + o.has_input_ids;
  if (sources != 1) {
    return Fail(CatalogError(
        "CTXPAR-FLAG-005",
        {{"command", "generate"},
         {"detail", sources == 0 ? "a prompt, --prompts-file or --input-ids is required"
                                 : "give only one of a prompt, --prompts-file and --input-ids"}}));
  }
  if (o.chat && o.has_input_ids) {
    return Fail(
        CatalogError("CTXPAR-FLAG-005", {{"command", "generate"},
                                         {"detail",
                                          "--chat wraps a text prompt in the chat template; "
                                          "--input-ids are token ids already: give one of them"}}));
  }
  for (const std::string& list : o.stop_token_ids) {
    Expected<std::vector<int32_t>> ids = ParseIds(list, "--stop-token-ids");
    if (!ids.ok()) return Fail(ids.status());
    s.stop_token_ids.insert(s.stop_token_ids.end(), ids->begin(), ids->end());
  }
  if (s.max_new_tokens < 1) {
    return Fail(
        CatalogError("CTXPAR-FLAG-003", {{"value", PyRepr(std::to_string(s.max_new_tokens))},
                                         {"flag", "--max-new-tokens"},
                                         {"valid", "integers from 1 to 2147483647"}}));
  }
  if (!o.seed.empty()) {
    Expected<uint64_t> seed = ParseSeed(o.seed);
    if (!seed.ok()) return Fail(seed.status());
    s.seed = *seed;
  }
  Expected<LaunchConfig> raw = ToLaunchConfig(flags);
  if (!raw.ok()) return Fail(raw.status());
  Expected<Launch> launch = PrepareLaunch(*raw);
  if (!launch.ok()) return Fail(launch.status());
  if (Status v = ValidateSamplingParams(s, launch->source->desc().vocab_size); !v.ok()) {
    return Fail(v);
  }
  const int tp = launch->config.tp_size;
  if (tp > 1 && !UnderMpi()) {
    if (Expected<double> t = CollectiveTimeoutFromEnv(); !t.ok()) return Fail(t.status());
    return RunUnderMpirun("generate", tp, args);
  }
  return RunOnRanks(tp, [&](Communicator& world) {
    InstallStopHandlers(UnderMpi());
    return RunRank(world, *launch, o);
  });
}

}  // namespace

CTXPAR_REGISTER_COMMAND("generate", "generate text with the model over MPI ranks (DCP)",
                        RunGenerate);

}  // namespace ctxpar::cli
