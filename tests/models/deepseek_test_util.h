// The tiny DeepSeek-V3 reference checkpoint (read in place; tests skip without it) and a runner
// of the DeepSeek model on in-process ranks, for the golden, layout-invariance and byte-counter
// tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/model.h"
#include "ctxpar/safetensors.h"
#include "ctxpar/sampling.h"
#include "ctxpar/thread_pool.h"
#include "models/deepseek.h"
#include "models/layers/compute_types.h"

namespace ctxpar::testing {

inline const std::string kDeepseekReference =
    std::string(CTXPAR_REFERENCE_DIR) + "/deepseek_v3_tiny";

#define CTXPAR_SKIP_WITHOUT_DEEPSEEK_REFERENCE()                                          \
  if (!std::filesystem::exists(::ctxpar::testing::kDeepseekReference + "/config.json")) { \
    GTEST_SKIP() << "the tiny DeepSeek-V3 reference checkpoint is not at "                \
                 << ::ctxpar::testing::kDeepseekReference;                                \
  }

// |logit - HF's float64 logit| at every prompt position. Measured worst on one rank 3.5e-6
// (logits have a standard deviation of 0.9); the reference itself rounds to fp32 in its RMSNorms,
// RoPE, softmax and router, and ctxpar computes in fp32 throughout, summing in other orders on
// other layouts.
constexpr double kGoldenLogitTolerance = 5e-5;

// The largest |a[i] - b[i]|; infinity when the sizes differ.
template <typename A, typename B>
double MaxAbsDiff(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  }
  return worst;
}

struct GoldenPrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;  // the reference's 32 greedy tokens
  std::vector<double> logits;   // [ids.size(), vocab], float64
};

inline std::vector<GoldenPrompt> ReadGoldenPrompts() {
  std::vector<GoldenPrompt> out;
  const auto meta = nlohmann::json::parse(std::ifstream(kDeepseekReference + "/golden.json"));
  auto golden = SafetensorsFile::Open(kDeepseekReference + "/golden.safetensors");
  EXPECT_TRUE(golden.ok()) << golden.status().ToString();
  for (std::size_t i = 0; i < meta["prompts"].size(); ++i) {
    GoldenPrompt p;
    p.ids = meta["prompts"][i]["ids"].get<std::vector<int32_t>>();
    p.greedy = meta["prompts"][i]["greedy_32"].get<std::vector<int32_t>>();
    const SafetensorsTensor* t = *golden->Find("logits_" + std::to_string(i));
    p.logits.resize(t->num_elements());
    EXPECT_TRUE(CopyElements(*t, 0, t->num_elements(), p.logits.data()).ok());
    out.push_back(std::move(p));
  }
  return out;
}

// A configuration built by hand (the model's hook is tested separately).
inline EngineConfig DeepseekConfig(int tp, int dcp = 1,
                                   CombineBackend backend = CombineBackend::kAgRs,
                                   bool replicate_q = false) {
  EngineConfig c;
  c.tp_size = tp;
  c.dcp_size = dcp;
  c.dcp_comm_backend = backend;
  c.dcp_replicate_q_proj = replicate_q;
  c.page_size = 16;
  c.kv_cache_mib = 8;
  c.max_running_requests = 4;
  c.threads = 1;
  return c;
}

struct SeqResult {
  std::vector<float> prompt_logits;  // [prompt length, vocab]: every prompt position's logits
  std::vector<int32_t> tokens;       // the greedy continuation
};

// One rank's view of a run: the sequences' results and what its communicators moved.
struct RankResult {
  std::vector<SeqResult> seqs;
  CommCounters tp, dcp, cp;
};

// Runs `prompts` together on this rank of `world` (config.tp_size ranks): each prompt is
// prefilled in chunks of at most `chunk` tokens (every position's logits kept), the chunks of a
// step in one batch, then all sequences decode `new_tokens` greedy tokens, one batch per step.
// Counters cover the forwards only.
inline Expected<RankResult> RunDeepseekRank(const ModelSource& source, const EngineConfig& config,
                                            Communicator& world,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            int new_tokens, int chunk = 1 << 20) {
  const int vocab = source.desc().vocab_size;
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> pool,
                          ThreadPool::Create(std::max(1, config.threads)));
  const std::unique_ptr<compute::Compute> compute = model::ComputeFor(config, pool.get());
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                          source.CreateModel(config, world, *compute));
  CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions pool_options,
                          KvPoolFor(config, source, world.rank() % config.dcp_size));
  CTXPAR_ASSIGN_OR_RETURN(KvPool kv, KvPool::Create(pool_options));
  const DeepseekGroups groups = GroupsOf(*model);
  world.ResetCounters();
  groups.dcp->ResetCounters();
  groups.cp->ResetCounters();
  RankResult out;
  out.seqs.resize(prompts.size());
  std::vector<int32_t> slots, last(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    CTXPAR_ASSIGN_OR_RETURN(int32_t slot, kv.AcquireSlot());
    slots.push_back(slot);
  }
  std::vector<float> logits;
  for (std::size_t off = 0;; off += chunk) {
    Batch b;
    std::vector<std::size_t> who;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      if (off >= prompts[i].size()) continue;
      const int n = static_cast<int>(std::min<std::size_t>(chunk, prompts[i].size() - off));
      CTXPAR_RETURN_IF_ERROR(kv.Reserve(slots[i], off + n));
      b.Add(slots[i], off, prompts[i].data() + off, n, true, true);
      who.push_back(i);
    }
    if (who.empty()) break;
    CTXPAR_RETURN_IF_ERROR(model->Forward(b, kv, logits));
    std::size_t row = 0;
    for (std::size_t k = 0; k < who.size(); ++k) {
      const int n = b.seqs[k].num_tokens;
      auto& pl = out.seqs[who[k]].prompt_logits;
      pl.insert(pl.end(), logits.begin() + row * vocab, logits.begin() + (row + n) * vocab);
      row += n;
      last[who[k]] = Greedy({logits.data() + (row - 1) * vocab, std::size_t(vocab)});
    }
  }
  for (int step = 0; step < new_tokens; ++step) {
    Batch b;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      out.seqs[i].tokens.push_back(last[i]);
      const int64_t pos = prompts[i].size() + step;
      CTXPAR_RETURN_IF_ERROR(kv.Reserve(slots[i], pos + 1));
      b.Add(slots[i], pos, &last[i], 1);
    }
    if (step + 1 == new_tokens) break;
    CTXPAR_RETURN_IF_ERROR(model->Forward(b, kv, logits));
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      last[i] = Greedy({logits.data() + i * vocab, std::size_t(vocab)});
    }
  }
  out.tp = world.counters();
  out.dcp = groups.dcp->counters();
  out.cp = groups.cp->counters();
  return out;
}

// RunDeepseekRank on config.tp_size in-process ranks; every rank's result, in rank order.
inline Expected<std::vector<RankResult>> RunDeepseek(
    const ModelSource& source, const EngineConfig& config,
    const std::vector<std::vector<int32_t>>& prompts, int new_tokens, int chunk = 1 << 20) {
  std::vector<RankResult> ranks(config.tp_size);
  Status st = RunInProcess(config.tp_size, [&](Communicator& world) -> Status {
    CTXPAR_ASSIGN_OR_RETURN(ranks[world.rank()],
                            RunDeepseekRank(source, config, world, prompts, new_tokens, chunk));
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return ranks;
}

}  // namespace ctxpar::testing
