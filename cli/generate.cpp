// `ctxpar generate [launch flags] PROMPT`: runs the model on the engine over tp_size ranks with
// decode context parallelism and prints what it generates.
//
// One prompt (text, or --input-ids) streams its text to stdout; --prompts-file submits every
// line at once (continuous batching) and prefixes each output line with the prompt's index and a
// tab. --print-ids prints the generated token ids instead of text. The launch configuration goes
// through PrepareLaunch (as `check --model-path` and `serve`) before any rank starts. With
// tp_size > 1 and no MPI job around it, the command re-executes itself under `mpirun -np
// tp_size`; under MPI every rank runs the engine and rank 0 prints.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "ctxpar/chat_template.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/launch.h"
#include "ctxpar/tokenizer.h"
#include "launch_flags.h"

namespace ctxpar::cli {
namespace {

struct GenerateOptions {
  std::vector<std::string> prompt;  // the positional words, joined by spaces
  std::string prompts_file;
  std::string input_ids;
  bool print_ids = false;
  bool chat = false;
  SamplingParams sampling;
  std::string seed;
};

int Fail(const Status& status) {
  std::fprintf(stderr, "%s\n", status.message().c_str());
  if (!status.error_id().empty()) {
    std::fprintf(stderr, "run: ctxpar explain %s\n", status.error_id().c_str());
  }
  return status.code() == StatusCode::kInternal || status.code() == StatusCode::kUnavailable
             ? kExitInternal
             : kExitInvalid;
}

bool UnderMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

// Replaces this process by `mpirun -np n <this binary> generate <args>`; returns only on failure.
int SelfLaunch(int n, const std::vector<std::string>& args) {
  const char* mpirun = std::getenv("CTXPAR_MPIRUN");
  std::string launcher = mpirun != nullptr && *mpirun != '\0' ? mpirun : "mpirun";
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
  std::vector<char> self(4096);
  const ssize_t len = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (len <= 0) {
    std::fprintf(stderr, "ctxpar generate: cannot find its own executable to start %d ranks\n", n);
    return kExitInternal;
  }
  std::vector<std::string> argv = {launcher, "-np", std::to_string(n),
                                   std::string(self.data(), len), "generate"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::fflush(nullptr);
  execvp(cargv[0], cargv.data());
  std::fprintf(stderr,
               "ctxpar generate: cannot run '%s' to start %d ranks (tp_size %d needs MPI; "
               "apt-get install -y openmpi-bin, or set CTXPAR_MPIRUN)\n",
               launcher.c_str(), n, n);
  return kExitInternal;
}

// A decimal integer in [0, 2^64): nothing else (no sign, exponent or fraction).
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
    return InvalidArgument("--seed must be an integer in [0, 18446744073709551615], but got '" +
                           text + "'");
  }
  return v;
}

Expected<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
      return InvalidArgument("--input-ids takes comma-separated token ids (integers >= 0), but got '" +
                             item + "' in '" + text + "'");
    }
    ids.push_back(static_cast<int32_t>(v));
    at = comma + 1;
  }
  return ids;
}

Expected<std::vector<int32_t>> Encode(const Tokenizer* tok, const std::string& text, bool chat) {
  if (tok == nullptr) {
    return InvalidArgument("this model has no tokenizer: give the prompt as --input-ids");
  }
  if (!chat) return tok->Encode(text);
  CTXPAR_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::FromJinja(tok->chat_template()));
  const std::vector<ChatMessage> messages = {{"user", text}};
  EncodeOptions enc;
  enc.parse_special = true;
  return tok->Encode(tmpl.Apply(messages, true), enc);
}

Expected<std::vector<std::vector<int32_t>>> Prompts(const GenerateOptions& o,
                                                    const Tokenizer* tok) {
  std::vector<std::vector<int32_t>> out;
  if (!o.input_ids.empty()) {
    CTXPAR_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIds(o.input_ids));
    out.push_back(std::move(ids));
  } else if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    if (!in) return InvalidArgument("--prompts-file: cannot read " + o.prompts_file);
    for (std::string line; std::getline(in, line);) {
      CTXPAR_ASSIGN_OR_RETURN(std::vector<int32_t> ids, Encode(tok, line, o.chat));
      out.push_back(std::move(ids));
    }
    if (out.empty()) return InvalidArgument("--prompts-file " + o.prompts_file + " has no line");
  } else {
    std::string text;
    for (const std::string& w : o.prompt) text += (text.empty() ? "" : " ") + w;
    CTXPAR_ASSIGN_OR_RETURN(std::vector<int32_t> ids, Encode(tok, text, o.chat));
    out.push_back(std::move(ids));
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) {
      return InvalidArgument("prompt " + std::to_string(i) + " encodes to no token");
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
    if (!indexed_ && !ids_) {
      std::fwrite(pending.data(), 1, pending.size(), stdout);
      std::fflush(stdout);
      pending.clear();
    } else if (indexed_ && !ids_) {
      for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
        std::printf("%zu\t%s\n", index, pending.substr(0, nl).c_str());
        pending.erase(0, nl + 1);
      }
    }
    if (u.finish != FinishReason::kNone) {
      if (indexed_) {
        std::printf("%zu\t%s\n", index, pending.c_str());
      } else {
        std::printf("%s\n", pending.c_str());
      }
      pending.clear();
      std::fflush(stdout);
    }
  }

 private:
  bool indexed_, ids_;
  std::map<std::size_t, std::string> pending_;
};

Status RunRank(Communicator& world, const Launch& launch, const GenerateOptions& o) {
  const bool leader = world.rank() == 0;
  CTXPAR_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> prompts,
                          Prompts(o, launch.source->tokenizer()));
  CTXPAR_ASSIGN_OR_RETURN(
      std::unique_ptr<Engine> engine,
      Engine::Create(launch.config, *launch.source, world, [](std::string_view line) {
        std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
      }));
  // Prefill ends when every request has its first token; decode is what comes after (with one
  // prompt: the first token, then the rest).
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Clock::time_point all_first = t0;
  std::size_t started = 0;
  int64_t decoded = 0, prompt_tokens = 0;
  Printer printer(!o.prompts_file.empty(), o.print_ids);
  Status failure;
  if (leader) {
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      prompt_tokens += static_cast<int64_t>(prompts[i].size());
      GenerateRequest request{prompts[i], o.sampling, false};
      Expected<uint64_t> id = engine->Submit(std::move(request), [&, i](const RequestUpdate& u) {
        const auto n = static_cast<int64_t>(u.tokens.size());
        if (started == prompts.size()) decoded += n;
        if (n > 0 && u.completion_tokens == n && ++started == prompts.size()) {
          all_first = Clock::now();
          decoded += n - 1;
        }
        if (u.finish == FinishReason::kAbort && failure.ok()) {
          failure = Internal("request " + std::to_string(i) + " aborted: " + u.finish_detail);
        }
        printer.Update(i, u);
      });
      if (!id.ok()) {
        engine->Stop();
        failure = id.status();
        break;
      }
    }
  }
  CTXPAR_RETURN_IF_ERROR(engine->Run(Engine::RunUntil::kIdle));
  if (!leader) return Status::Ok();
  CTXPAR_RETURN_IF_ERROR(failure);
  const auto t1 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(all_first - t0).count();
  const double decode_s = std::chrono::duration<double>(t1 - all_first).count();
  const EngineConfig& c = launch.config;
  std::fprintf(stderr,
               "ctxpar generate: tp %d dcp %d %s%s, %d thread(s)/rank, %zu request(s): prefill "
               "%lld tokens in %.3f s (%.1f tokens/s), decode %lld tokens in %.3f s (%.1f "
               "tokens/s)\n",
               c.tp_size, c.dcp_size, std::string(CombineBackendName(c.dcp_comm_backend)).c_str(),
               c.dcp_replicate_q_proj ? " replicated-q" : "", c.threads, prompts.size(),
               static_cast<long long>(prompt_tokens), prefill_s,
               prefill_s > 0 ? double(prompt_tokens) / prefill_s : 0.0,
               static_cast<long long>(decoded), decode_s,
               decoded > 0 && decode_s > 0 ? double(decoded) / decode_s : 0.0);
  return Status::Ok();
}

int RunGenerate(const std::vector<std::string>& args) {
  CLI::App app{"Generate text with the model over tp_size ranks with DCP.", "ctxpar generate"};
  LaunchFlags flags;
  AddLaunchFlags(app, &flags);
  GenerateOptions o;
  SamplingParams& s = o.sampling;
  s.temperature = 0.0f;
  app.add_option("prompt", o.prompt, "The prompt (raw text, or the user message with --chat).");
  app.add_option("--prompts-file", o.prompts_file,
                 "Submit every line of FILE as a prompt at once; output lines begin with the "
                 "prompt's index and a tab.");
  app.add_option("--input-ids", o.input_ids, "The prompt as comma-separated token ids.");
  app.add_flag("--print-ids", o.print_ids, "Print the generated token ids, space-separated.");
  app.add_flag("--chat", o.chat, "Wrap the prompt in the model's chat template.");
  app.add_option("--max-new-tokens", s.max_new_tokens, "Tokens to generate (>= 1).");
  app.add_option("--temperature", s.temperature, "0 (the default) is greedy.");
  app.add_option("--top-p", s.top_p, "Nucleus sampling mass, in (0, 1].");
  app.add_option("--top-k", s.top_k, "Sample from the k most likely tokens (-1 or 0: all).");
  app.add_option("--min-p", s.min_p, "Drop tokens below min_p times the most likely's probability.");
  app.add_option("--repetition-penalty", s.repetition_penalty, "Penalty of seen tokens (1: none).");
  app.add_option("--frequency-penalty", s.frequency_penalty, "In [-2, 2].");
  app.add_option("--presence-penalty", s.presence_penalty, "In [-2, 2].");
  app.add_option("--seed", o.seed, "Seed of the sampler, an integer in [0, 2^64).");
  app.add_option("--stop", s.stop, "Stop at this text (repeatable); it is not printed.");
  app.add_option("--stop-token-ids", s.stop_token_ids, "Stop at these token ids.")->delimiter(',');
  app.add_flag("--ignore-eos", s.ignore_eos,
               "Generate --max-new-tokens tokens even past an end-of-generation token.");
  Status status;
  if (int rc = ParseCommandLine(app, args, "generate", &status); rc >= 0) {
    return rc == kExitOk ? rc : Fail(status);
  }
  const int sources = !o.prompt.empty() + !o.prompts_file.empty() + !o.input_ids.empty();
  if (sources != 1) {
    return Fail(InvalidArgument(
        "ctxpar generate needs exactly one of a PROMPT, --prompts-file or --input-ids (a prompt "
        "that begins with '-' goes after --)"));
  }
  if (s.max_new_tokens < 1) {
    return Fail(InvalidArgument("--max-new-tokens must be >= 1, but got " +
                                std::to_string(s.max_new_tokens)));
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
  if (tp > 1 && !UnderMpi()) return SelfLaunch(tp, args);
  std::unique_ptr<Communicator> world;
  if (UnderMpi()) {
    Expected<std::unique_ptr<Communicator>> mpi = MakeMpiWorld();
    if (!mpi.ok()) return Fail(mpi.status());
    world = std::move(*mpi);
    if (world->size() != tp) {
      return Fail(InvalidArgument("the MPI job has " + std::to_string(world->size()) +
                                  " ranks, but tp_size is " + std::to_string(tp)));
    }
  } else {
    world = std::move(MakeInProcessGroup(1)[0]);
  }
  Status run = RunRank(*world, *launch, o);
  return run.ok() ? kExitOk : Fail(run);
}

}  // namespace

CTXPAR_REGISTER_COMMAND("generate", "generate text with the model over MPI ranks (DCP)",
                        RunGenerate);

}  // namespace ctxpar::cli
