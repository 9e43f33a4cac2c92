// One sequence through the model seam (Model::Forward on a one-sequence Batch, a KvPool slot):
// what the model tests need to compare a forward with references, and a launch configuration
// resolved as generate resolves it (the model's hook included).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/config.h"
#include "ctxpar/engine.h"
#include "ctxpar/launch.h"
#include "ctxpar/model.h"
#include "ctxpar/thread_pool.h"
#include "models/layers/compute_types.h"

namespace ctxpar::testing {

// The flags of a run, as `--flag value` pairs, resolved against the model with PrepareLaunch.
inline Expected<Launch> TestLaunch(const std::string& model_path,
                                   const std::vector<std::pair<std::string, FieldValue>>& fields) {
  LaunchConfig raw;
  CTXPAR_RETURN_IF_ERROR(raw.Set("model_path", model_path));
  for (const auto& [name, value] : fields) CTXPAR_RETURN_IF_ERROR(raw.Set(name, value));
  return PrepareLaunch(raw);
}

class SequenceRunner {
 public:
  // Collective over `world` (config.tp_size ranks).
  static Expected<SequenceRunner> Create(const ModelSource& source, const EngineConfig& config,
                                         Communicator& world) {
    SequenceRunner r;
    CTXPAR_ASSIGN_OR_RETURN(r.threads_, ThreadPool::Create(config.threads));
    r.compute_ = model::ComputeFor(config, r.threads_.get());
    CTXPAR_ASSIGN_OR_RETURN(r.model_, source.CreateModel(config, world, *r.compute_));
    CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions o,
                            KvPoolFor(config, source, world.rank() % config.dcp_size));
    o.max_slots = 1;
    o.allocator = r.compute_.get();
    CTXPAR_ASSIGN_OR_RETURN(KvPool pool, KvPool::Create(o));
    r.pool_ = std::make_unique<KvPool>(std::move(pool));
    CTXPAR_ASSIGN_OR_RETURN(r.slot_, r.pool_->AcquireSlot());
    return r;
  }

  // Appends tokens and returns the logits of the last one.
  Expected<std::vector<float>> Forward(std::span<const int32_t> tokens) {
    Batch batch;
    batch.Add(slot_, length_, tokens.data(), static_cast<int32_t>(tokens.size()));
    CTXPAR_RETURN_IF_ERROR(pool_->Reserve(slot_, length_ + batch.num_tokens()));
    std::vector<float> logits;
    CTXPAR_RETURN_IF_ERROR(model_->Forward(batch, *pool_, logits));
    length_ += batch.num_tokens();
    return logits;
  }
  Status Reset() {
    CTXPAR_RETURN_IF_ERROR(pool_->ReleaseSlot(slot_));
    CTXPAR_ASSIGN_OR_RETURN(slot_, pool_->AcquireSlot());
    length_ = 0;
    return Status::Ok();
  }

 private:
  std::unique_ptr<ThreadPool> threads_;
  std::unique_ptr<compute::Compute> compute_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvPool> pool_;
  int32_t slot_ = 0;
  int64_t length_ = 0;
};

inline std::string ModelPath() { return DefaultModelPath(); }

// Gemma 3 270M: CTXPAR_GEMMA3_MODEL (scripts/test.sh sets it from scripts/fetch-model.sh gemma3),
// else the file beside the default model.
inline std::string Gemma3ModelPath() {
  if (const char* p = std::getenv("CTXPAR_GEMMA3_MODEL"); p != nullptr && *p != '\0') return p;
  const std::string dir = DefaultModelPath();
  return dir.substr(0, dir.find_last_of('/') + 1) + "gemma-3-270m-q4_k_m.gguf";
}

}  // namespace ctxpar::testing
