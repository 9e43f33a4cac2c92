// Engine: many requests at once over one model and one KV pool per rank (continuous batching),
// the loop that `ctxpar generate` and `ctxpar serve` drive.
//
// Ranks. Every rank of the TP group (the MPI job, or one process) creates an Engine and calls
// Run. Rank 0 is the leader: it takes requests (Submit / Cancel, from any thread), plans each
// step (scheduler.h: which requests decode, which prefill chunks run, which are retracted),
// broadcasts the plan, runs its share of the forward, samples and delivers the updates. The
// other ranks receive each plan, apply its KV pool operations in the same order and run their
// share of the forward; they never see a request. Submit, Cancel and the updates exist on rank 0
// only (Submit on another rank is FailedPrecondition).
//
// Requests. A request is a prompt of token ids, sampling parameters (sampling.h) and whether its
// prompt's log-probabilities are wanted. Its updates arrive through its callback, on the thread
// that runs Run, in order: zero or more updates with new tokens, then exactly one with
// finish != kNone (stop: EOS, a stop token or a stop string; length: max_new_tokens or the
// context; abort: cancelled, the engine stopped, or a fault). The callback must not block or call
// Run; it may call Submit and Cancel.
//
// Prefix cache: on unless config.disable_radix_cache; a prompt's longest cached prefix (whole
// pages of page_size * dcp_size tokens, at most all but its last token) is not computed again. By
// batch invariance the logits are those the request would have computed itself.
//
// Nothing is lost: a request retracted for lack of KV pages returns to the queue and resumes by
// prefilling its prompt and the tokens it had generated; by batch invariance (batch.h) its
// output is the one it would have had without the retraction.
//
// Speculative decoding (config.speculative_algorithm, docs/engine.md): before each step the leader
// drafts the next tokens of every decoding request, from its own tokens (NGRAM: n-gram lookup) or
// with a draft model (STANDALONE: config.speculative_draft_model_path, loaded on rank 0 alone at
// tp 1 / dcp 1, with a KV pool of its own of at most max_total_num_tokens tokens within
// config.kv_cache_mib), and the step verifies them as extra rows of the request; the sampler
// accepts drafts while they equal what it samples, so tokens and log-probabilities are those of
// plain decoding whatever was drafted, and the KV pages of rejected drafts are given back on
// every rank.
//
// Thread safety: Submit, Cancel, Stop and Snapshot are safe from any thread; Run is called by one
// thread per rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/model.h"
#include "ctxpar/sampling.h"
#include "ctxpar/status.h"

namespace ctxpar {

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids, at least one
  SamplingParams sampling;
  // The log-probability of every prompt token given the tokens before it (the first has none),
  // with sampling.top_logprobs_num alternatives: what an OpenAI completion with echo returns.
  bool return_prompt_logprobs = false;
};

enum class FinishReason { kNone, kStop, kLength, kAbort };
// "stop", "length", "abort" ("" for kNone): OpenAI's and SGLang's finish_reason.
std::string_view FinishReasonName(FinishReason reason);

struct RequestUpdate {
  uint64_t id = 0;
  std::vector<int32_t> tokens;         // output tokens new since the last update
  std::vector<TokenLogprob> logprobs;  // one per new token, with sampling.return_logprob
  std::string text;                    // their text, when the model has a tokenizer
  // With return_prompt_logprobs, once, in the first update: one entry per prompt token (the
  // first empty).
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string finish_detail;  // kStop: the matched stop string ("" on a token); kAbort: why
  std::optional<int32_t> matched_token;  // kStop on a stop_token_ids entry or an end token
  int prompt_tokens = 0;                 // the request's totals so far (OpenAI usage)
  int completion_tokens = 0;
  // Prompt tokens whose KV came from the prefix cache at the request's first admission.
  int cached_tokens = 0;
  // Speculative decoding (--speculative-algorithm): the request's decode steps so far, each a
  // verify step (SGLang's spec_verify_ct), and the output tokens they gave (1 + the accepted
  // drafts each; spec_verify_tokens / spec_verify_ct is SGLang's accept length).
  int spec_verify_ct = 0;
  int spec_verify_tokens = 0;
};

using UpdateCallback = std::function<void(const RequestUpdate& update)>;

// One step as the scheduler planned it (scheduler.h): what each request fed and who was
// retracted. `ctxpar plan` simulates the scheduler and records the same, so the two can be
// compared on one trace.
struct StepRecord {
  struct Entry {
    uint64_t id = 0;  // the request (Submit's id)
    int64_t pos0 = 0;
    int32_t num_tokens = 0;
    int32_t drafts = 0;  // of them, drafted tokens a verify step checks (speculative decoding)
    bool operator==(const Entry&) const = default;
  };
  std::vector<Entry> batch;
  std::vector<uint64_t> retracted;
  bool operator==(const StepRecord&) const = default;
};

// What the engine is doing, for /metrics and /get_server_info.
struct EngineSnapshot {
  int running = 0;                   // requests holding KV
  int queued = 0;                    // waiting for admission (new or retracted)
  int64_t max_total_num_tokens = 0;  // the pool's token capacity
  // Tokens whose pages are in use (page-rounded), cached pages no running request uses excluded.
  int64_t used_tokens = 0;
  double token_usage = 0.0;          // used / max
  uint64_t retractions = 0;          // requests retracted so far
  uint64_t prompt_tokens_total = 0;  // prompt tokens prefilled (re-prefills not counted)
  uint64_t cached_tokens_total = 0;  // of those, the ones the prefix cache held
  int64_t cache_tokens = 0;          // tokens of the pages the prefix cache owns (page-rounded)
  uint64_t generation_tokens_total = 0;
  // Speculative decoding: verify steps of requests and the output tokens they gave
  // (sglang:spec_accept_length is their ratio).
  uint64_t spec_verify_steps_total = 0;
  uint64_t spec_verify_tokens_total = 0;
  uint64_t spec_draft_tokens_total = 0;  // the drafted tokens those steps verified
  uint64_t requests_finished = 0;
  int max_running_requests = 0;
  int chunked_prefill_size = 0;
  int context_length = 0;
};

// The KV pool a rank gets for `config` and the model: pages of config.page_size tokens, as many
// as config.kv_cache_mib MiB hold (capped by max_total_tokens), kTiles16 where the page allows
// it, and max_slots = min(max_running_requests, num_pages) (a running request holds a page).
// With the model's window groups (KvSpec::groups), the budget is shared as SGLang's hybrid pools
// share it: window_pages hold config.swa_full_tokens_ratio tokens per token of num_pages.
// CTXPAR-KV-002 when the budget holds no page, CTXPAR-KV-005 when max_total_tokens is below one
// page, CTXPAR-KV-004 when the pool would exceed the machine's memory or 2^31 pages.
// max_total_num_tokens is the result's num_pages * page_size * dcp_size (KvPool::GroupTokens).
Expected<KvPoolOptions> KvPoolFor(const EngineConfig& config, const ModelSource& source,
                                  int dcp_rank);
// KvPoolFor's arithmetic for a model's KvSpec, without the check against this machine's memory
// (CTXPAR-KV-004's 2^31 pages and RAM): the pool of a rank of any machine, for the planner.
Expected<KvPoolOptions> KvPoolShape(const EngineConfig& config, const KvSpec& spec,
                                    const ModelDesc& desc, int dcp_rank);

class Engine {
 public:
  enum class RunUntil {
    kIdle,     // return when no request is left (generate: submit everything, then Run)
    kStopped,  // serve until Stop()
  };

  // Collective over `world` (tp_size ranks): creates the thread pool, the model (source's
  // CreateModel) and the KV pool sized by config.kv_cache_mib (capped by max_total_tokens); with
  // STANDALONE, on rank 0, the draft model and its pool (CTXPAR-SPEC-006 / -007 as PrepareLaunch
  // gives them, which refuses such a launch line first on every rank). `log` receives the start-up
  // lines (SGLang's "KV Cache is allocated. #tokens: ..." and "max_total_num_tokens=..."); it may
  // be null. `world` and `source` must outlive the engine.
  static Expected<std::unique_ptr<Engine>> Create(const EngineConfig& config,
                                                  const ModelSource& source, Communicator& world,
                                                  std::function<void(std::string_view)> log);
  ~Engine();

  // Rank 0. Queues a request; its id is returned at once and `on_update` will receive its
  // updates. Refused: invalid sampling parameters (CTXPAR-SAMPLING-*), an empty prompt or a
  // token outside the vocabulary, a prompt plus max_new_tokens that cannot fit the context or
  // the KV pool (CTXPAR-ENGINE-*, with the counts), stop strings without a tokenizer, a full
  // queue (kUnavailable), or an engine that has stopped.
  Expected<uint64_t> Submit(GenerateRequest request, UpdateCallback on_update);
  // Any rank. What Submit would refuse in the request itself (all but a full queue and a stopped
  // engine), without queuing it: a caller with many requests checks them all first. Past the
  // context (CTXPAR-ENGINE-005), a prompt of max_req_input_len() tokens or more is refused with
  // SGLang's text (CTXPAR-ENGINE-016), then a request larger than the pool (CTXPAR-ENGINE-006).
  Status Validate(const GenerateRequest& request) const;
  // Any rank. With config.allow_auto_truncate, cuts a prompt too long to run to its first
  // tokens (as SGLang does, leaving room for max_new_tokens in the context and the pool, and
  // under max_req_input_len()); then Validate. Submit calls it.
  Status Prepare(GenerateRequest& request) const;
  // SGLang's max_req_input_len: min(context length, max_total_num_tokens) - 1 - 5.
  int64_t max_req_input_len() const;
  // Rank 0. Ends the request with finish kAbort and frees its pages at the next step; unknown or
  // finished ids are ignored.
  void Cancel(uint64_t id);
  // Rank 0. Makes Run return after ending every request with kAbort.
  void Stop();
  // Rank 0, while another thread runs Run(kStopped) or between Run calls: empties the prefix
  // cache (SGLang's /flush_cache) and NGRAM's n-gram cache shared across requests, and returns
  // once the engine has; between Runs, the next Run's
  // first plan drops the pages on the other ranks. Refused with CTXPAR-ENGINE-015 while any
  // request runs or waits, CTXPAR-ENGINE-008 once the engine has stopped. Ok with the cache off.
  Status FlushCache();

  // Every rank. Runs steps until `until` (rank 0 decides; the others follow its plans). After
  // kIdle, requests submitted later run in the next Run call. A failure of a collective or the
  // model ends every request with kAbort and is returned; the engine then takes no request.
  Status Run(RunUntil until);

  // Rank 0. Not OK (CTXPAR-ENGINE-014, naming the step's requests) while the step in flight has
  // run longer than config.watchdog_timeout seconds: SGLang's watchdog, read by the server for
  // /health and to end itself.
  Status Health() const;
  // Rank 0, before Run. `handler` is called on Run's thread when a collective or the model fails,
  // before the requests are aborted (the server then ends their responses with the error).
  void OnFault(std::function<void(const Status&)> handler);
  // Rank 0, before Run: `observer` sees every step's plan, on the thread that runs Run.
  void SetStepObserver(std::function<void(const StepRecord&)> observer);

  EngineSnapshot Snapshot() const;
  const ModelDesc& model_desc() const;
  const EngineConfig& config() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctxpar
