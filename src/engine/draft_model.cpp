// The STANDALONE drafter (drafter.h): a draft model on the leader, with a KV pool of its own.
#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compute/compute.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "engine/drafter.h"

namespace ctxpar::engine {

namespace {

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<ModelSource> source,
               std::vector<std::unique_ptr<Communicator>> world, std::unique_ptr<Model> model,
               KvPool pool, int chunk)
      : source_(std::move(source)),
        world_(std::move(world)),
        model_(std::move(model)),
        pool_(std::move(pool)),
        chunk_(chunk) {}

  Status Draft(std::span<const DraftWant> wants) override;

  void Forget(uint64_t id) override {
    auto it = tracks_.find(id);
    if (it == tracks_.end()) return;
    // The slot is this pool's own: releasing it cannot fail.
    (void)pool_.ReleaseSlot(it->second.slot);
    tracks_.erase(it);
  }

 private:
  // What the draft pool holds of a request: the KV of its first `len` tokens, then that of `fed`,
  // the drafts of the last call that were fed back (the last draft never is), at positions
  // len, len + 1, ...: the target accepts some of them, and the rest are truncated next call.
  struct Track {
    int32_t slot = -1;
    int64_t len = 0;
    std::vector<int32_t> fed;
  };
  // A request of this call: `k` drafts to decode (0: its catch-up continues next call).
  struct Job {
    SeqState* seq;
    Track* track;
    int k;
  };

  // Positions [t.len, t.len + feed) and the k - 1 drafts after them fit the draft pool; false
  // (the track is gone) when it has no free slot or page.
  Expected<bool> Room(SeqState& s, Track& t, int64_t feed, int k);
  // Runs `batch` and appends the greedy token of each logits row to the draft of the jobs that
  // decode (those with k > step).
  Status Decode(const Batch& batch, std::span<const Job> jobs, int step);

  // Declared first, destroyed last: the model reads the source's mapping and the communicator.
  std::unique_ptr<ModelSource> source_;
  std::vector<std::unique_ptr<Communicator>> world_;
  std::unique_ptr<Model> model_;
  KvPool pool_;
  int chunk_;  // most tokens a request catches up per call (<= 0: no limit)
  std::unordered_map<uint64_t, Track> tracks_;
  std::vector<float> logits_;
};

Expected<bool> ModelDrafter::Room(SeqState& s, Track& t, int64_t feed, int k) {
  Status room = Status::Ok();
  if (t.slot < 0) {
    Expected<int32_t> slot = pool_.AcquireSlot();
    if (slot.ok()) t.slot = *slot;
    room = slot.status();
  }
  // A window group keeps what the first position fed sees; the drafts after it stay in reach of
  // a truncation back to any accepted prefix.
  if (room.ok()) room = pool_.Slide(t.slot, t.len);
  if (room.ok()) room = pool_.Reserve(t.slot, t.len + feed + std::max(0, k - 1));
  if (room.ok()) return true;
  if (room.code() != StatusCode::kOutOfRange) return room;
  // Its pages go to the requests that fit; it catches up from the start when there is room.
  if (t.slot >= 0) (void)pool_.ReleaseSlot(t.slot);
  tracks_.erase(s.id);
  return false;
}

Status ModelDrafter::Decode(const Batch& batch, std::span<const Job> jobs, int step) {
  CTXPAR_RETURN_IF_ERROR(model_->Forward(batch, pool_, logits_));
  const int vocab = source_->desc().vocab_size;
  int64_t row = 0;
  for (const Job& j : jobs) {
    if (j.k <= step) continue;
    const float* logits = logits_.data() + row++ * vocab;
    j.seq->draft.push_back(static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits));
  }
  return Status::Ok();
}

Status ModelDrafter::Draft(std::span<const DraftWant> wants) {
  std::vector<Job> jobs;
  Batch batch;
  for (const DraftWant& w : wants) {
    SeqState& s = *w.seq;
    s.draft.clear();
    const auto n = static_cast<int64_t>(s.tokens.size());
    Track& t = tracks_[s.id];
    if (t.slot >= 0) {
      // Keep the fed drafts the target accepted, but feed the last token again at least: its row
      // gives the first draft.
      int64_t kept = std::min(t.len, n - 1);
      for (int32_t token : t.fed) {
        if (kept >= n - 1 || s.tokens[kept] != token) break;
        ++kept;
      }
      t.len = kept;
      t.fed.clear();
      CTXPAR_RETURN_IF_ERROR(pool_.Truncate(t.slot, t.len));
    }
    // A long catch-up (the prompt, on a request's first draft) runs in prefill chunks, a step's
    // worth each; the request drafts once it is caught up.
    const int64_t missing = n - t.len;
    const bool caught_up = chunk_ <= 0 || missing <= chunk_;
    const int64_t feed = caught_up ? missing : chunk_;
    const int k = caught_up ? w.max_tokens : 0;
    CTXPAR_ASSIGN_OR_RETURN(const bool room, Room(s, t, feed, k));
    if (!room) continue;
    batch.Add(t.slot, t.len, s.tokens.data() + t.len, static_cast<int32_t>(feed), k > 0);
    t.len += feed;
    jobs.push_back({&s, &t, k});
  }
  if (jobs.empty()) return Status::Ok();
  CTXPAR_RETURN_IF_ERROR(Decode(batch, jobs, 0));
  // Draft i + 1 follows draft i, fed at position len + i; all requests of a step in one forward.
  int most = 0;
  for (const Job& j : jobs) most = std::max(most, j.k);
  for (int step = 1; step < most; ++step) {
    batch = Batch{};
    for (const Job& j : jobs) {
      if (j.k <= step) continue;
      batch.Add(j.track->slot, j.track->len + step - 1, &j.seq->draft.back(), 1);
    }
    CTXPAR_RETURN_IF_ERROR(Decode(batch, jobs, step));
  }
  for (const Job& j : jobs) {
    if (j.k > 1) j.track->fed.assign(j.seq->draft.begin(), j.seq->draft.end() - 1);
  }
  return Status::Ok();
}

}  // namespace

Expected<std::unique_ptr<Drafter>> MakeModelDrafter(const EngineConfig& config,
                                                    const ModelSource& target, int64_t max_tokens,
                                                    compute::Compute& compute) {
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> source, OpenDraftModel(config, target));
  // The target's configuration on one rank: no tensor, context or expert parallelism.
  EngineConfig c = config;
  c.model_path = config.speculative_draft_model_path;
  c.model_arch = source->info().architecture;
  c.tp_size = 1;
  c.dcp_size = 1;
  c.dcp_comm_backend = CombineBackend::kAgRs;
  c.dcp_replicate_q_proj = false;
  c.dcp_kv_cache_interleave_size = 1;
  c.enable_prefill_cp = false;
  c.cp_strategy = CpStrategy::kNone;
  c.attn_cp_size = 1;
  c.moe_a2a_backend = MoeA2aBackend::kNone;
  c.ep_size = 1;
  c.moe_dense_tp_size.reset();
  c.enable_dp_attention = false;
  c.max_total_tokens = max_tokens;
  c.speculative_algorithm = SpeculativeAlgorithm::kNone;
  std::vector<std::unique_ptr<Communicator>> world = MakeInProcessGroup(1);
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, source->CreateModel(c, *world[0], compute));
  CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions options, KvPoolFor(c, *source, 0));
  options.allocator = &compute;
  CTXPAR_ASSIGN_OR_RETURN(KvPool pool, KvPool::Create(options));
  return std::unique_ptr<Drafter>(new ModelDrafter(std::move(source), std::move(world),
                                                   std::move(model), std::move(pool),
                                                   config.chunked_prefill_size));
}

}  // namespace ctxpar::engine
