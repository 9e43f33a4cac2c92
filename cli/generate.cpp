// `ctxpar generate [launch flags] PROMPT`: runs the Llama model of a GGUF file over tp_size
// ranks with decode context parallelism and streams the generated text.
//
// The launch configuration goes through the pipeline of `ctxpar check`, with the model's heads,
// before any rank starts. With tp_size > 1 and no MPI job around it, the command runs itself
// under `mpirun -np tp_size` (mpi_launch.h: the user never types mpirun on one machine); under
// MPI every rank runs the model, rank 0 prints, and an error is printed once (FinishRank).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "ctxpar/chat_template.h"
#include "ctxpar/combine.h"
#include "ctxpar/communicator.h"
#include "ctxpar/config.h"
#include "ctxpar/gguf.h"
#include "ctxpar/llama.h"
#include "ctxpar/sampler.h"
#include "ctxpar/tokenizer.h"
#include "error_report.h"
#include "launch_flags.h"
#include "model_file.h"
#include "mpi_launch.h"
#include "option_checks.h"
#include "signals.h"

namespace ctxpar::cli {
namespace {

struct GenerateOptions {
  std::string prompt;
  int max_new_tokens = 128;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  std::uint64_t seed = 0;
  bool chat = false;
  int threads = 0;
  bool llama_cpp_numerics = false;
  bool ignore_eos = false;
};

int Fail(const Status& status) { return ReportBeforeWorld(status); }

Expected<std::vector<int32_t>> PromptTokens(const Tokenizer& tok, const GenerateOptions& o) {
  if (!o.chat) return tok.Encode(o.prompt);
  CTXPAR_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::FromJinja(tok.chat_template()));
  const std::vector<ChatMessage> messages = {{"user", o.prompt}};
  return tmpl.Encode(tok, messages, true);
}

// Every rank runs this; rank 0 prints.
Status RunRank(Communicator& world, std::shared_ptr<const GgufFile> file, const LlamaParallel& par,
               const GenerateOptions& o) {
  const bool printer = world.rank() == 0;
  CTXPAR_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromGguf(*file));
  CTXPAR_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, PromptTokens(tok, o));
  if (prompt.empty()) return InvalidArgument("the prompt encodes to no token");
  LlamaParallel p = par;
  p.max_seq_len = static_cast<int>(prompt.size()) + o.max_new_tokens;
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::Create(file, world, p));
  CTXPAR_ASSIGN_OR_RETURN(
      Sampler sampler,
      Sampler::Create(
          {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed}));
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  CTXPAR_ASSIGN_OR_RETURN(std::vector<float> logits, model->Forward(prompt));
  const auto t1 = Clock::now();
  Utf8StreamDecoder stream(tok);
  int generated = 0;
  int stop = 0;
  while (generated < o.max_new_tokens) {
    CTXPAR_ASSIGN_OR_RETURN(stop, AgreeOnStop(world));
    if (stop != 0) break;
    // Every rank holds the same logits and the same seeded sampler, so they agree on the token.
    const int32_t next = sampler.Sample(logits);
    ++generated;
    if (!o.ignore_eos && tok.IsEndOfGeneration(next)) break;
    if (printer) {
      CTXPAR_ASSIGN_OR_RETURN(std::string text, stream.Push(next));
      WriteOutput(text);
    }
    if (generated == o.max_new_tokens) break;
    CTXPAR_ASSIGN_OR_RETURN(logits, model->Forward(std::span<const int32_t>(&next, 1)));
  }
  const auto t2 = Clock::now();
  if (printer) WriteOutput(stream.Finish() + "\n");
  if (stop != 0) return Interrupted(stop, generated);
  if (printer) {
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    const int decoded = generated > 0 ? generated - 1 : 0;  // forwards after the prefill
    std::fprintf(stderr,
                 "ctxpar generate: tp %d dcp %d %s%s, %d thread(s)/rank: prefill %zu tokens "
                 "in %.3f s (%.1f tokens/s), decode %d tokens in %.3f s (%.1f tokens/s)\n",
                 par.tp_size, par.dcp_size, par.dcp_comm_backend.c_str(),
                 par.replicate_q_proj ? " replicated-q" : "", par.num_threads, prompt.size(),
                 prefill_s, double(prompt.size()) / prefill_s, decoded, decode_s,
                 decoded > 0 ? decoded / decode_s : 0.0);
  }
  return Status::Ok();
}

int RunGenerate(const std::vector<std::string>& args) {
  CLI::App app{"Generate text with a Llama GGUF model over tp_size ranks with DCP.",
               "ctxpar generate"};
  LaunchFlags flags;
  AddLaunchFlags(app, &flags);
  GenerateOptions o;
  app.add_option("prompt", o.prompt, "The prompt (raw text, or the user message with --chat).")
      ->required();
  app.add_option("--max-new-tokens", o.max_new_tokens, "Tokens to generate (>= 1).");
  app.add_option("--temperature", o.temperature, "0 (the default) is greedy.");
  app.add_option("--top-p", o.top_p, "Nucleus sampling mass, in (0, 1].");
  app.add_option("--top-k", o.top_k, "Sample from the k most likely tokens (0: all).");
  app.add_option("--seed", o.seed, "Seed of the sampler.");
  app.add_flag("--chat", o.chat, "Wrap the prompt in the model's chat template.");
  app.add_option("--threads", o.threads,
                 "Threads per rank, at most the machine's hardware threads (0, the default: "
                 "cores / ranks).");
  app.add_flag("--ignore-eos", o.ignore_eos,
               "Generate --max-new-tokens tokens even past an end-of-generation token.");
  app.add_flag("--llama-cpp-numerics", o.llama_cpp_numerics,
               "Quantize activations to int8 before each matmul, as llama.cpp's CPU backend.");
  Status status;
  if (int rc = ParseCommandLine(app, args, "generate", &status); rc >= 0) {
    return rc == kExitOk ? rc : Fail(status);
  }
  if (o.max_new_tokens < 1) {
    return Fail(InvalidArgument("--max-new-tokens must be >= 1, but got " +
                                std::to_string(o.max_new_tokens)));
  }
  if (Status s = CheckThreads("--threads", o.threads, /*zero_means_default=*/true); !s.ok()) {
    return Fail(s);
  }
  if (Status s = ValidateSamplerConfig(
          {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed});
      !s.ok()) {
    return Fail(InvalidArgument("--" + s.message()));
  }
  Expected<LaunchConfig> raw = ToLaunchConfig(flags);
  if (!raw.ok()) return Fail(raw.status());
  Expected<Platform> platform = PlatformForLaunch(*raw);
  if (!platform.ok()) return Fail(platform.status());
  // The model's heads take part in the resolution (CTXPAR-LAYOUT-003), so the file is opened
  // first; the path itself may come from the flags, which need no model to parse.
  Expected<ResolvedConfig> pre = Resolve(*raw, *platform, nullptr);
  if (!pre.ok()) return Fail(pre.status());
  const std::string path = ModelPath(*pre);
  Expected<GgufFile> opened = OpenModelFile(path);
  if (!opened.ok()) return Fail(opened.status());
  auto file = std::make_shared<const GgufFile>(std::move(*opened));
  Expected<LlamaHparams> hp = ReadLlamaHparams(*file);
  if (!hp.ok()) return Fail(hp.status());
  ModelInfo info;
  info.architecture = hp->architecture == "llama" ? "LlamaForCausalLM" : hp->architecture;
  info.num_attention_heads = hp->num_heads;
  info.num_key_value_heads = hp->num_kv_heads;
  Expected<ResolvedConfig> config = Resolve(*raw, *platform, &info);
  if (!config.ok()) return Fail(config.status());
  Expected<CombineBackend> backend = ParseCombineBackend(config->dcp_comm_backend());
  if (!backend.ok()) return Fail(backend.status());
  if (Status s = CheckCombineBackendRunnable(*backend); !s.ok()) return Fail(s);

  LlamaParallel par;
  par.tp_size = config->tp_size();
  par.dcp_size = config->dcp_size();
  par.dcp_comm_backend = config->dcp_comm_backend();
  par.replicate_q_proj = config->dcp_replicate_q_proj();
  par.quantize_activations = o.llama_cpp_numerics;
  if (config->dp_size() != 1) {
    return Fail(
        Unimplemented("ctxpar generate runs one data-parallel replica: --dp-size must be "
                      "1, but got " +
                      std::to_string(config->dp_size())));
  }
  if (hp->num_kv_heads % par.tp_size != 0) {
    return Fail(InvalidArgument(
        "tp_size (" + std::to_string(par.tp_size) + ") must divide the model's KV heads (" +
        std::to_string(hp->num_kv_heads) + "): the attention projections are sharded by heads"));
  }
  if (int64_t{o.max_new_tokens} + 1 > hp->context_length) {
    return Fail(InvalidArgument("--max-new-tokens (" + std::to_string(o.max_new_tokens) +
                                ") exceeds the model's context length (" +
                                std::to_string(hp->context_length) + ")"));
  }
  par.num_threads = o.threads > 0 ? o.threads : std::max(1, HardwareThreads() / par.tp_size);

  if (par.tp_size > 1 && !UnderMpi()) {
    if (Expected<double> t = CollectiveTimeoutFromEnv(); !t.ok()) return Fail(t.status());
    return RunUnderMpirun("generate", par.tp_size, args);
  }
  std::unique_ptr<Communicator> world;
  if (UnderMpi()) {
    Expected<std::unique_ptr<Communicator>> mpi = MakeMpiWorld();
    if (!mpi.ok()) return Fail(mpi.status());
    world = std::move(*mpi);
    if (world->size() != par.tp_size) {
      return FinishRank(*world,
                        InvalidArgument("the MPI job has " + std::to_string(world->size()) +
                                        " ranks, but tp_size is " + std::to_string(par.tp_size)));
    }
  } else {
    world = std::move(MakeInProcessGroup(1)[0]);
  }
  InstallStopHandlers(UnderMpi());
  return FinishRank(*world, RunRank(*world, file, par, o));
}

}  // namespace

CTXPAR_REGISTER_COMMAND("generate", "generate text with a Llama GGUF model over MPI ranks (DCP)",
                        RunGenerate);

}  // namespace ctxpar::cli
