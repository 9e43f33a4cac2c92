#include "ctxpar/engine.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "ctxpar/detokenizer.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/thread_pool.h"
#include "ctxpar/tokenizer.h"
#include "engine/draft_record.h"
#include "engine/drafter.h"
#include "engine/plan_codec.h"
#include "engine/scheduler.h"
#include "models/layers/compute_types.h"

namespace ctxpar {

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// 0 when unknown.
double PhysicalMemoryGib() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? double(pages) * double(size) / double(kMiB * 1024) : 0.0;
}

// A request on the leader.
struct Request {
  engine::SeqState seq;
  SamplingParams sampling;
  UpdateCallback callback;
  std::optional<RequestSampler> sampler;
  std::optional<Detokenizer> detokenizer;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  bool prompt_logprobs_sent = true;
  bool prompt_counted = false;
  int spec_verify_ct = 0;      // decode steps under speculative decoding
  int spec_verify_tokens = 0;  // the tokens those steps gave
  engine::DraftRecord drafts;  // sets its draft lengths
  RequestUpdate update;        // what this step adds
};

// The request's seed when it gives none: the engine's, mixed with the request id (splitmix64).
uint64_t DefaultSeed(uint64_t random_seed, uint64_t id) {
  uint64_t z = random_seed + 0x9E3779B97F4A7C15ull * (id + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "";
}

Expected<KvPoolOptions> KvPoolShape(const EngineConfig& config, const KvSpec& spec,
                                    const ModelDesc& desc, int dcp_rank) {
  KvPoolOptions o;
  o.num_layers = spec.num_layers;
  o.num_kv_heads = spec.num_kv_heads;
  o.head_dim_k = spec.head_dim_k;
  o.head_dim_v = spec.head_dim_v;
  o.v_in_k = spec.v_in_k;
  o.dtype = spec.dtype;
  o.groups = spec.groups;
  o.page_size = config.page_size;
  o.format =
      !spec.v_in_k && config.page_size % 16 == 0 ? KvPageFormat::kTiles16 : KvPageFormat::kRows;
  o.dcp_size = config.dcp_size;
  o.dcp_rank = dcp_rank;
  o.interleave_size = config.dcp_kv_cache_interleave_size;
  const int64_t page_tokens = int64_t{config.page_size} * config.dcp_size;
  o.max_pages_per_slot = static_cast<int>((desc.context_length + page_tokens - 1) / page_tokens);
  // SGLang's hybrid pools: the window groups hold swa_full_tokens_ratio tokens per token of the
  // full ones, and the two share the budget. Bytes per full page: the full groups' pages, and
  // the window pages that come with one.
  int64_t full_bytes = 0, window_bytes = 0, window_page_tokens = page_tokens;
  const std::vector<KvGroupSpec> groups = KvPool::GroupsOf(o);
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t bytes = KvPool::PageBytes(o, static_cast<int>(g));
    if (groups[g].window == 0) {
      full_bytes += bytes;
    } else {
      window_bytes += bytes;
      if (!groups[g].dcp_sharded) window_page_tokens = config.page_size;
    }
  }
  const double window_per_full =
      window_bytes == 0
          ? 0.0
          : config.swa_full_tokens_ratio * double(page_tokens) / double(window_page_tokens);
  const double page_bytes = double(full_bytes) + window_per_full * double(window_bytes);
  o.num_pages = window_bytes == 0
                    ? config.kv_cache_mib * kMiB / full_bytes
                    : static_cast<int64_t>(double(config.kv_cache_mib * kMiB) / page_bytes);
  if (config.max_total_tokens) {
    if (*config.max_total_tokens < page_tokens) {
      return CatalogError("CTXPAR-KV-005", {{"tokens", std::to_string(*config.max_total_tokens)},
                                            {"page_tokens", std::to_string(page_tokens)},
                                            {"page_size", std::to_string(config.page_size)},
                                            {"dcp_size", std::to_string(config.dcp_size)}});
    }
    o.num_pages = std::min(o.num_pages, *config.max_total_tokens / page_tokens);
  }
  o.window_pages =
      window_bytes == 0 ? 0 : static_cast<int64_t>(double(o.num_pages) * window_per_full);
  if (o.num_pages < 1 || (window_bytes > 0 && o.window_pages < 1)) {
    return CatalogError("CTXPAR-KV-002",
                        {{"mib", std::to_string(config.kv_cache_mib)},
                         {"pages", std::to_string(std::max<int64_t>(0, o.num_pages))},
                         {"page_size", std::to_string(config.page_size)},
                         {"model", desc.architecture},
                         {"page_mib", fmt::format("{:.3f}", page_bytes / kMiB)},
                         {"layers", std::to_string(spec.num_layers)},
                         {"min_pages", "1"}});
  }
  // A running request holds at least one page, so more slots than pages could never run.
  o.max_slots = static_cast<int>(
      std::min<int64_t>(config.max_running_requests,
                        window_bytes == 0 ? o.num_pages : std::min(o.num_pages, o.window_pages)));
  return o;
}

Expected<KvPoolOptions> KvPoolFor(const EngineConfig& config, const ModelSource& source,
                                  int dcp_rank) {
  CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions o,
                          KvPoolShape(config, source.KvSpecFor(config), source.desc(), dcp_rank));
  // Bytes of the pool, and of one full page with the window pages that come with it.
  double pool_bytes = 0;
  const std::vector<KvGroupSpec> groups = KvPool::GroupsOf(o);
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t pages = groups[g].window == 0 ? o.num_pages : o.window_pages;
    pool_bytes += double(pages) * double(KvPool::PageBytes(o, static_cast<int>(g)));
  }
  const double page_bytes = pool_bytes / double(o.num_pages);
  o.populate = config.populate_kv_cache;
  // Unless populated, pages are touched as requests fill them, so an oversized pool would start
  // and fail later, when the machine runs out of memory; a block table addresses pages with
  // int32.
  const double pool_gib = pool_bytes / double(kMiB * 1024);
  // The ranks of one machine share its memory: under MPI the launcher says how many there are;
  // before one (check, or the launcher itself) every rank of the TP group will run here.
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int local_ranks = std::max(1, local != nullptr ? std::atoi(local) : config.tp_size);
  const double ram_gib = PhysicalMemoryGib() / local_ranks;
  if (o.num_pages > std::numeric_limits<int32_t>::max() || (ram_gib > 0 && pool_gib > ram_gib)) {
    // A budget of at most this many MiB passes both checks.
    const int64_t max_mib =
        std::min<int64_t>(int64_t(std::numeric_limits<int32_t>::max() * page_bytes / kMiB),
                          ram_gib > 0 ? int64_t(ram_gib * 1024) : INT64_MAX);
    return CatalogError(
        "CTXPAR-KV-004",
        {{"pages", std::to_string(o.num_pages)},
         {"gib", fmt::format("{:.1f}", pool_gib)},
         {"limit", o.num_pages > std::numeric_limits<int32_t>::max()
                       ? std::string("the 2^31 pages a block table addresses")
                       : fmt::format("this machine's {:.1f} GiB of memory per rank", ram_gib)},
         {"max_mib", std::to_string(max_mib)}});
  }
  return o;
}

struct Engine::Impl {
  EngineConfig config;
  const ModelSource* source = nullptr;
  Communicator* world = nullptr;
  std::unique_ptr<ThreadPool> threads;
  std::unique_ptr<compute::Compute> compute;  // the model's and the drafter's, on `threads`
  std::unique_ptr<Model> model;
  std::optional<KvPool> kv;
  std::optional<engine::Scheduler> scheduler;
  std::unique_ptr<engine::Drafter> drafter;  // the leader's, with speculative decoding
  std::vector<int32_t> eos;
  std::vector<float> logits;

  // Shared with Submit / Cancel / Stop / Snapshot.
  mutable std::mutex mu;
  std::condition_variable wake;
  std::deque<std::unique_ptr<Request>> inbox;
  std::vector<uint64_t> cancels;
  bool stop = false;
  bool stopped = false;
  bool in_run = false;  // the leader's Run is in progress
  // A POST /flush_cache waiting for the engine thread's answer (flush_result).
  bool flush_asked = false;
  std::optional<Status> flush_result;
  std::condition_variable flushed;
  uint64_t next_id = 1;
  EngineSnapshot stats;

  std::map<uint64_t, std::unique_ptr<Request>> requests;  // the leader's live requests
  // The step in flight on the leader, for Health: when it began (nullopt between steps) and what
  // it runs; under mu.
  std::optional<std::chrono::steady_clock::time_point> step_began;
  std::string step_what;
  std::function<void(const Status&)> on_fault;
  std::function<void(const StepRecord&)> observer;

  bool leader() const { return world->rank() == 0; }
  Status Lead(RunUntil until);
  Status Follow();
  Status Execute(const engine::WirePlan& plan);
  void Absorb(bool* stop_now);
  void Finish(Request& r, FinishReason reason, std::string detail);
  void Deliver(Request& r);
  void AbortAll(const std::string& why);
  Status Sample(const engine::StepPlan& plan);
  // Samples the next token of `r` from `row` into its update and finishes the request where plain
  // decoding would (a stop, max_new_tokens); true when it finished (it is gone then).
  Expected<bool> Emit(Request& r, std::span<const float> row);
  // Drafts the next tokens of every decoding request (speculative decoding).
  Status Draft();
  void Publish();
  void PublishLocked();  // mu held
  void BeginStep(const engine::StepPlan& step);
  void EndStep();
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Expected<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config,
                                                 const ModelSource& source, Communicator& world,
                                                 std::function<void(std::string_view)> log) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->source = &source;
  impl->world = &world;
  CTXPAR_ASSIGN_OR_RETURN(impl->threads, ThreadPool::Create(config.threads));
  impl->compute = model::ComputeFor(config, impl->threads.get());
  CTXPAR_ASSIGN_OR_RETURN(impl->model, source.CreateModel(config, world, *impl->compute));
  CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions kv,
                          KvPoolFor(config, source, world.rank() % config.dcp_size));
  kv.allocator = impl->compute.get();
  if (kv.populate && log && world.rank() == 0) {
    // Seconds a GiB on a VM whose host backs memory lazily: say what the wait is.
    log(fmt::format("KV cache: backing the pool's pages (--kv-cache-mib {}) now",
                    config.kv_cache_mib));
  }
  const auto pool_start = std::chrono::steady_clock::now();
  CTXPAR_ASSIGN_OR_RETURN(KvPool pool, KvPool::Create(kv));
  const double pool_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - pool_start).count();
  impl->kv.emplace(std::move(pool));
  impl->config.max_running_requests = kv.max_slots;
  impl->scheduler.emplace(
      engine::SchedulerOptions{kv.max_slots, config.chunked_prefill_size,
                               config.schedule_conservativeness, !config.disable_radix_cache,
                               config.schedule_policy},
      &*impl->kv);
  const bool radix_cache = impl->scheduler->cache() != nullptr;
  if (world.rank() == 0 && config.speculative_algorithm == SpeculativeAlgorithm::kNgram) {
    impl->drafter = engine::MakeNgramDrafter(
        {config.ngram_min_match_window, config.ngram_max_match_window, config.ngram_branch_length},
        config.ngram_capacity);
  }
  if (world.rank() == 0 && config.speculative_algorithm == SpeculativeAlgorithm::kStandalone) {
    CTXPAR_ASSIGN_OR_RETURN(
        impl->drafter, engine::MakeModelDrafter(impl->config, source, impl->kv->capacity_tokens(),
                                                *impl->compute));
  }
  impl->eos = source.desc().eos_token_ids;
  EngineSnapshot& s = impl->stats;
  s.max_total_num_tokens = impl->kv->capacity_tokens();
  s.max_running_requests = kv.max_slots;
  s.chunked_prefill_size = config.chunked_prefill_size;
  s.context_length = source.desc().context_length;
  if (log && world.rank() == 0) {
    const KvPool& pool = *impl->kv;
    // SGLang's hybrid pools log both groups' tokens, then each pool its allocation.
    if (const int w = KvPool::FirstWindowGroup(kv); w >= 0) {
      log(fmt::format("Use sliding window memory pool. full_layer_tokens={}, swa_layer_tokens={}",
                      pool.capacity_tokens(0), pool.capacity_tokens(w)));
    }
    const double k_share =
        double(kv.head_dim_k) / (kv.head_dim_k + (kv.v_in_k ? 0 : kv.head_dim_v));
    for (int g = 0; g < pool.num_groups(); ++g) {
      const double gb = double(KvPool::PageBytes(kv, g)) * pool.num_pages(g) / 1e9;
      log(fmt::format("KV Cache is allocated. #tokens: {}, K size: {:.2f} GB, V size: {:.2f} GB",
                      pool.capacity_tokens(g), gb * k_share, gb * (1 - k_share)));
    }
    if (kv.populate) log(fmt::format("KV cache pages backed in {:.2f} s", pool_seconds));
    log(fmt::format(
        "max_total_num_tokens={}, chunked_prefill_size={}, max_running_requests={}, "
        "context_len={}, page_size={}, dcp_size={}, threads={}, radix_cache={}",
        s.max_total_num_tokens, config.chunked_prefill_size, kv.max_slots, s.context_length,
        config.page_size, config.dcp_size, config.threads, radix_cache ? "on" : "off"));
    if (!radix_cache && !config.disable_radix_cache) {
      log(fmt::format(
          "Prefix cache off: a KV layer group is not sharded by DCP, so its pages hold {} "
          "positions where group 0's hold {}, and the radix cache needs pages of one size",
          config.page_size, int64_t{config.page_size} * config.dcp_size));
    }
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

int64_t Engine::max_req_input_len() const {
  const int64_t max_req_len =
      std::min<int64_t>(impl_->source->desc().context_length, impl_->kv->capacity_tokens()) - 1;
  return max_req_len - 5;
}

Status Engine::Prepare(GenerateRequest& request) const {
  const Impl& m = *impl_;
  if (m.config.allow_auto_truncate) {
    const int64_t room =
        std::min<int64_t>(m.source->desc().context_length, m.kv->capacity_tokens()) -
        request.sampling.max_new_tokens;
    const int64_t keep = std::min(max_req_input_len() - 1, room);
    if (keep >= 1 && static_cast<int64_t>(request.prompt.size()) > keep) {
      request.prompt.resize(static_cast<std::size_t>(keep));
    }
  }
  return Validate(request);
}

Status Engine::Validate(const GenerateRequest& request) const {
  const Impl& m = *impl_;
  const ModelDesc& desc = m.source->desc();
  const std::vector<int32_t>& prompt = request.prompt;
  if (prompt.empty()) return CatalogError("CTXPAR-ENGINE-011", {{"index", "0"}});
  for (std::size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= desc.vocab_size) {
      return CatalogError("CTXPAR-ENGINE-010", {{"index", std::to_string(i)},
                                                {"token", std::to_string(prompt[i])},
                                                {"vocab", std::to_string(desc.vocab_size)}});
    }
  }
  CTXPAR_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling, desc.vocab_size));
  if (!request.sampling.stop.empty() && m.source->tokenizer() == nullptr) {
    return CatalogError("CTXPAR-ENGINE-009", {{"model", desc.architecture}});
  }
  const int64_t needed = static_cast<int64_t>(prompt.size()) + request.sampling.max_new_tokens;
  const std::initializer_list<CatalogArg> counts = {
      {"needed", std::to_string(needed)},
      {"prompt", std::to_string(prompt.size())},
      {"max_new", std::to_string(request.sampling.max_new_tokens)}};
  if (needed > desc.context_length) {
    std::vector<CatalogArg> args(counts);
    args.push_back({"context", std::to_string(desc.context_length)});
    return CatalogError("CTXPAR-ENGINE-005", args);
  }
  // With auto-truncate, Prepare has cut what a cut can fit; what is left is too large whatever
  // the prompt (CTXPAR-ENGINE-006 says so with the counts).
  if (!m.config.allow_auto_truncate && static_cast<int64_t>(prompt.size()) >= max_req_input_len()) {
    return CatalogError("CTXPAR-ENGINE-016", {{"prompt", std::to_string(prompt.size())},
                                              {"max", std::to_string(max_req_input_len())}});
  }
  if (needed > m.kv->capacity_tokens()) {
    std::vector<CatalogArg> args(counts);
    args.push_back({"capacity", std::to_string(m.kv->capacity_tokens())});
    return CatalogError("CTXPAR-ENGINE-006", args);
  }
  const int64_t chunk = m.config.chunked_prefill_size < 0
                            ? needed
                            : std::min<int64_t>(needed, m.config.chunked_prefill_size);
  for (int g = 1; g < m.kv->num_groups(); ++g) {
    const int window = m.kv->group(g).window;
    const int64_t pages = m.kv->PeakPages(g, needed, chunk);
    if (window > 0 && pages > m.kv->num_pages(g)) {
      return CatalogError(
          "CTXPAR-KV-006",
          {{"needed", std::to_string(pages * m.kv->capacity_tokens(g) / m.kv->num_pages(g))},
           {"window", std::to_string(window)},
           {"chunk", std::to_string(chunk)},
           {"capacity", std::to_string(m.kv->capacity_tokens(g))}});
    }
  }
  return Status::Ok();
}

Expected<uint64_t> Engine::Submit(GenerateRequest request, UpdateCallback on_update) {
  Impl& m = *impl_;
  if (!m.leader()) return FailedPrecondition("Engine::Submit: only rank 0 takes requests");
  CTXPAR_RETURN_IF_ERROR(Prepare(request));
  auto r = std::make_unique<Request>();
  r->sampling = std::move(request.sampling);
  r->seq.tokens = std::move(request.prompt);
  r->seq.prompt_len = static_cast<int32_t>(r->seq.tokens.size());
  r->seq.max_new_tokens = r->sampling.max_new_tokens;
  r->seq.want_prompt_logits = request.return_prompt_logprobs;
  if (request.return_prompt_logprobs) {
    r->prompt_logprobs.resize(r->seq.tokens.size());
    r->prompt_logprobs_sent = false;
  }
  r->callback = std::move(on_update);
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.stop || m.stopped) return CatalogError("CTXPAR-ENGINE-008", {});
  const int queued = m.stats.queued + static_cast<int>(m.inbox.size());
  if (m.config.max_queued_requests && queued >= *m.config.max_queued_requests) {
    return CatalogError("CTXPAR-ENGINE-007",
                        {{"queued", std::to_string(queued)},
                         {"limit", std::to_string(*m.config.max_queued_requests)}});
  }
  r->seq.id = m.next_id++;
  const uint64_t id = r->seq.id;
  const uint64_t seed = r->sampling.seed.value_or(DefaultSeed(m.config.random_seed, id));
  r->sampler.emplace(r->sampling, r->seq.tokens, seed);
  if (const Tokenizer* tok = m.source->tokenizer()) {
    r->detokenizer.emplace(*tok, r->sampling.stop, !r->sampling.skip_special_tokens,
                           r->sampling.no_stop_trim);
  }
  r->update.id = id;
  m.inbox.push_back(std::move(r));
  m.wake.notify_all();
  return id;
}

void Engine::Cancel(uint64_t id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->cancels.push_back(id);
  impl_->wake.notify_all();
}

Status Engine::FlushCache() {
  Impl& m = *impl_;
  if (!m.leader()) return FailedPrecondition("Engine::FlushCache: only rank 0 takes requests");
  std::unique_lock<std::mutex> lock(m.mu);
  if (m.stop || m.stopped) return CatalogError("CTXPAR-ENGINE-008", {});
  const int busy = m.stats.running + m.stats.queued + static_cast<int>(m.inbox.size());
  if (busy > 0) {
    return CatalogError("CTXPAR-ENGINE-015",
                        {{"queued", std::to_string(m.stats.queued + int(m.inbox.size()))},
                         {"running", std::to_string(m.stats.running)}});
  }
  if (!m.in_run) {
    // No engine thread to ask: nothing runs or waits (checked above), so the scheduler is idle.
    (void)m.scheduler->FlushCache();
    if (m.drafter) m.drafter->Clear();
    m.PublishLocked();
    return Status::Ok();
  }
  m.flush_asked = true;
  m.flush_result.reset();
  m.wake.notify_all();
  m.flushed.wait(lock, [&] { return m.flush_result.has_value() || m.stopped; });
  if (!m.flush_result) return CatalogError("CTXPAR-ENGINE-008", {});
  return *std::exchange(m.flush_result, std::nullopt);
}

void Engine::Stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stop = true;
  impl_->wake.notify_all();
}

void Engine::SetStepObserver(std::function<void(const StepRecord&)> observer) {
  impl_->observer = std::move(observer);
}

EngineSnapshot Engine::Snapshot() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

const ModelDesc& Engine::model_desc() const { return impl_->source->desc(); }
const EngineConfig& Engine::config() const { return impl_->config; }

void Engine::OnFault(std::function<void(const Status&)> handler) {
  impl_->on_fault = std::move(handler);
}

Status Engine::Health() const {
  const Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.step_began) return Status::Ok();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - *m.step_began).count();
  if (seconds <= m.config.watchdog_timeout) return Status::Ok();
  return CatalogError("CTXPAR-ENGINE-014",
                      {{"seconds", fmt::format("{:.1f}", seconds)},
                       {"limit", fmt::format("{:g}", m.config.watchdog_timeout)},
                       {"running", m.step_what}});
}

Status Engine::Run(RunUntil until) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.in_run = true;
  }
  Status status = m.leader() ? m.Lead(until) : m.Follow();
  if (!status.ok() && m.leader() && m.on_fault) m.on_fault(status);
  if (!status.ok() && m.leader()) m.AbortAll(status.message());
  std::lock_guard<std::mutex> lock(m.mu);
  m.in_run = false;
  // After kIdle the engine takes requests for a next Run; after a stop or a fault it does not.
  m.stopped = m.stop || !status.ok();
  m.flushed.notify_all();
  return status;
}

Status Engine::Impl::Execute(const engine::WirePlan& plan) {
  for (const engine::PoolOp& op : plan.ops) {
    if (!leader()) CTXPAR_RETURN_IF_ERROR(engine::ApplyPoolOp(*kv, op));
  }
  if (plan.batch.seqs.empty()) return Status::Ok();
  return model->Forward(plan.batch, *kv, logits);
}

Status Engine::Impl::Follow() {
  for (;;) {
    engine::WirePlan plan;
    CTXPAR_RETURN_IF_ERROR(engine::BroadcastPlan(*world, &plan));
    // The last plan of a Run carries the releases (and cache drops) of the requests that ended
    // it: a next Run starts from the same pool on every rank.
    CTXPAR_RETURN_IF_ERROR(Execute(plan));
    if (plan.stop) return Status::Ok();
  }
}

// Takes the new requests and cancellations; waits while there is nothing to do.
void Engine::Impl::Absorb(bool* stop_now) {
  std::unique_lock<std::mutex> lock(mu);
  wake.wait(lock, [&] {
    return stop || flush_asked || !inbox.empty() || !cancels.empty() || !requests.empty();
  });
  *stop_now = stop;
  if (flush_asked) {
    flush_asked = false;
    const int running = scheduler->running(), queued = scheduler->queued();
    flush_result = inbox.empty() && scheduler->FlushCache()
                       ? Status::Ok()
                       : CatalogError("CTXPAR-ENGINE-015",
                                      {{"queued", std::to_string(queued + int(inbox.size()))},
                                       {"running", std::to_string(running)}});
    if (flush_result->ok() && drafter) drafter->Clear();
    PublishLocked();  // /metrics shows the empty cache once the flush has answered
    flushed.notify_all();
  }
  while (!inbox.empty()) {
    std::unique_ptr<Request> r = std::move(inbox.front());
    inbox.pop_front();
    scheduler->Enqueue(&r->seq);
    requests.emplace(r->seq.id, std::move(r));
  }
  std::vector<uint64_t> ids = std::exchange(cancels, {});
  lock.unlock();
  for (uint64_t id : ids) {
    if (auto it = requests.find(id); it != requests.end()) {
      Finish(*it->second, FinishReason::kAbort, "cancelled");
    }
  }
}

Status Engine::Impl::Lead(RunUntil until) {
  for (;;) {
    bool stop_now = false;
    if (until == RunUntil::kIdle && requests.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      stop_now = inbox.empty();
    }
    if (!stop_now) Absorb(&stop_now);
    if (stop_now) {
      AbortAll("the engine stopped");
      Publish();
      engine::WirePlan bye{true, scheduler->TakePendingOps(), {}};
      return engine::BroadcastPlan(*world, &bye);
    }
    if (drafter) CTXPAR_RETURN_IF_ERROR(Draft());
    CTXPAR_ASSIGN_OR_RETURN(engine::StepPlan step, scheduler->Plan());
    if (drafter) {
      for (const engine::SeqState* s : step.retracted) drafter->Forget(s->id);
    }
    if (observer) observer(engine::RecordStep(step));
    // The step's view (admitted, queued, pages) holds while it runs, which may take seconds.
    Publish();
    BeginStep(step);
    engine::WirePlan wire{false, step.ops, step.batch};
    CTXPAR_RETURN_IF_ERROR(engine::BroadcastPlan(*world, &wire));
    CTXPAR_RETURN_IF_ERROR(Execute(wire));
    CTXPAR_RETURN_IF_ERROR(scheduler->Commit(step));
    CTXPAR_RETURN_IF_ERROR(Sample(step));
    EndStep();
    Publish();
  }
}

Status Engine::Impl::Draft() {
  std::vector<engine::DraftWant> wants;
  std::vector<Request*> decoding;  // drafting this step or not
  for (auto& [id, r] : requests) {
    engine::SeqState& s = r->seq;
    if (!engine::Drafts(s)) continue;
    const int budget = r->drafts.Length(s, config.speculative_num_draft_tokens);
    s.draft.clear();
    if (budget > 0) wants.push_back({&s, budget});
    decoding.push_back(r.get());
  }
  CTXPAR_RETURN_IF_ERROR(drafter->Draft(wants));
  for (Request* r : decoding) r->drafts.Drafted(!r->seq.draft.empty());
  return Status::Ok();
}

Expected<bool> Engine::Impl::Emit(Request& r, std::span<const float> row) {
  const int32_t token = r.sampler->Sample(row);
  r.seq.tokens.push_back(token);
  r.update.tokens.push_back(token);
  if (r.sampling.return_logprob) {
    r.update.logprobs.push_back(ComputeLogprob(row, token, r.sampling.top_logprobs_num));
  }
  std::optional<FinishReason> done;
  const auto& stops = r.sampling.stop_token_ids;
  const bool end_token =
      std::find(stops.begin(), stops.end(), token) != stops.end() ||
      (!r.sampling.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end());
  // A stop token's text is trimmed like a stop string's (SGLang's trim_matched_stop).
  if (r.detokenizer && (!end_token || r.sampling.no_stop_trim)) {
    CTXPAR_ASSIGN_OR_RETURN(std::string text, r.detokenizer->Push(token));
    r.update.text += text;
    if (r.detokenizer->stopped()) {
      done = FinishReason::kStop;
      r.update.finish_detail = r.detokenizer->matched_stop();
    }
  }
  if (!done && end_token) {
    done = FinishReason::kStop;
    r.update.matched_token = token;
  }
  if (!done && r.seq.output_len() >= r.seq.max_new_tokens) done = FinishReason::kLength;
  if (!done) return false;
  Finish(r, *done, std::move(r.update.finish_detail));
  return true;
}

Status Engine::Impl::Sample(const engine::StepPlan& plan) {
  const int vocab = source->desc().vocab_size;
  int64_t row = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated = 0, verify_steps = 0, verify_tokens = 0,
           draft_tokens = 0;
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const BatchSeq& b = plan.batch.seqs[i];
    Request& r = *requests.at(plan.seqs[i]->id);
    const int32_t rows = plan.batch.LogitRows(i);
    auto logit_row = [&](int64_t k) {
      return std::span<const float>(logits.data() + k * vocab, vocab);
    };
    const auto drafted = static_cast<int32_t>(r.seq.draft.size());
    if (b.all_logits && drafted == 0) {
      for (int32_t t = 0; t < b.num_tokens; ++t) {
        const int64_t next = b.pos0 + t + 1;
        if (next < r.seq.prompt_len) {
          r.prompt_logprobs[next] =
              ComputeLogprob(logit_row(row + t), r.seq.tokens[next], r.sampling.top_logprobs_num);
        }
      }
    }
    // Commit counted a verify step's first token only: the step ends the sequence's tokens.
    const bool ends = b.pos0 + b.num_tokens - drafted == static_cast<int64_t>(r.seq.tokens.size());
    if (ends && rows > 0) {
      if (!r.prompt_counted) {
        r.prompt_counted = true;
        prompt_tokens += r.seq.prompt_len;
        cached_tokens += r.seq.cached_tokens;
      }
      if (r.seq.output_len() >= r.seq.max_new_tokens) {
        Finish(r, FinishReason::kLength, "");
        row += rows;
        continue;
      }
      // Row k's token is the one plain decoding samples after the k drafts before it, which the
      // step assumed: the drafts hold while each equals the token sampled before it, and the row
      // after the last one that holds gives one more token. The sampler draws once per token, so
      // seeded sampling gives plain decoding's tokens too.
      // Under speculative decoding every decode step is a verify step (of zero drafts or more).
      const bool verify = drafter != nullptr && i < plan.decode_seqs;
      verify_steps += verify;
      r.spec_verify_ct += verify;
      int32_t emitted = 0;
      bool finished = false;
      for (int32_t k = 0; k <= drafted && !finished; ++k) {
        ++emitted;
        r.spec_verify_tokens += verify;
        CTXPAR_ASSIGN_OR_RETURN(finished, Emit(r, logit_row(row + rows - 1 - drafted + k)));
        if (!finished && k < drafted && r.seq.tokens.back() != r.seq.draft[k]) break;
      }
      generated += emitted;
      verify_tokens += verify ? emitted : 0;
      draft_tokens += verify ? drafted : 0;
      if (!finished) {
        if (drafted > 0) {
          r.drafts.Verified(emitted - 1, drafted);
          CTXPAR_RETURN_IF_ERROR(scheduler->Accept(&r.seq, emitted - 1));
        }
        Deliver(r);
      }
    }
    row += rows;
  }
  std::lock_guard<std::mutex> lock(mu);
  stats.prompt_tokens_total += prompt_tokens;
  stats.cached_tokens_total += cached_tokens;
  stats.generation_tokens_total += generated;
  stats.spec_verify_steps_total += verify_steps;
  stats.spec_verify_tokens_total += verify_tokens;
  stats.spec_draft_tokens_total += draft_tokens;
  return Status::Ok();
}

void Engine::Impl::Deliver(Request& r) {
  RequestUpdate& u = r.update;
  if (!r.prompt_logprobs_sent) {
    u.prompt_logprobs = std::move(r.prompt_logprobs);
    r.prompt_logprobs_sent = true;
  }
  u.prompt_tokens = r.seq.prompt_len;
  u.cached_tokens = r.seq.cached_tokens;
  u.completion_tokens = r.seq.output_len();
  u.spec_verify_ct = r.spec_verify_ct;
  u.spec_verify_tokens = r.spec_verify_tokens;
  if (r.callback) r.callback(u);
  const uint64_t id = u.id;
  u = RequestUpdate{};
  u.id = id;
}

void Engine::Impl::Finish(Request& r, FinishReason reason, std::string detail) {
  // A failed release means the slot was not the pool's: the ranks' pools have diverged, which
  // the next plan's replay reports.
  (void)scheduler->Remove(&r.seq);
  if (drafter) {
    drafter->Learn(r.seq.tokens);
    drafter->Forget(r.seq.id);
  }
  if (r.detokenizer && !r.detokenizer->stopped()) r.update.text += r.detokenizer->Finish();
  r.update.finish = reason;
  r.update.finish_detail = std::move(detail);
  Deliver(r);
  {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.requests_finished;
  }
  requests.erase(r.seq.id);
}

void Engine::Impl::AbortAll(const std::string& why) {
  while (!requests.empty()) Finish(*requests.begin()->second, FinishReason::kAbort, why);
  std::deque<std::unique_ptr<Request>> left;
  {
    std::lock_guard<std::mutex> lock(mu);
    left.swap(inbox);
  }
  for (auto& r : left) {
    r->update.finish = FinishReason::kAbort;
    r->update.finish_detail = why;
    if (r->callback) r->callback(r->update);
  }
}

// What the watchdog's message names: the step's requests and tokens.
void Engine::Impl::BeginStep(const engine::StepPlan& step) {
  constexpr std::size_t kNamed = 8;
  std::string ids;
  for (std::size_t i = 0; i < step.seqs.size() && i < kNamed; ++i) {
    ids += (i == 0 ? "" : ", ") + std::to_string(step.seqs[i]->id);
  }
  if (step.seqs.size() > kNamed) ids += ", ...";
  std::string what = step.seqs.empty()
                         ? std::string("a step of KV pool operations only")
                         : fmt::format("a step of {} request(s) (ids {}) over {} token(s)",
                                       step.seqs.size(), ids, step.batch.tokens.size());
  std::lock_guard<std::mutex> lock(mu);
  step_began = std::chrono::steady_clock::now();
  step_what = std::move(what);
}

void Engine::Impl::EndStep() {
  std::lock_guard<std::mutex> lock(mu);
  step_began.reset();
}

void Engine::Impl::Publish() {
  std::lock_guard<std::mutex> lock(mu);
  PublishLocked();
}

void Engine::Impl::PublishLocked() {
  stats.running = scheduler->running();
  stats.queued = scheduler->queued();
  const int64_t page_tokens = int64_t{config.page_size} * config.dcp_size;
  // As SGLang counts them: pages the cache could evict are not in use.
  stats.used_tokens =
      (kv->num_pages() - kv->free_pages() - scheduler->evictable_pages()) * page_tokens;
  stats.cache_tokens = scheduler->cached_pages() * page_tokens;
  stats.token_usage = double(stats.used_tokens) / double(stats.max_total_num_tokens);
  stats.retractions = scheduler->retractions();
}

}  // namespace ctxpar
