// Gemma 3 270M across layouts: the greedy tokens of a short prompt are the same for tp 1, tp 4
// (its one KV head replicated on the four ranks), tp 4 / dcp 2 and tp 4 / dcp 4 (the head's
// tokens sharded over the DCP group) with every combine backend and replicated Q; and a
// sequence's logits are bit for bit the same alone or batched with another, whole or in prefill
// chunks. Ranks are threads (the in-process communicator). Skips when the model file is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/sampling.h"
#include "ctxpar/thread_pool.h"
#include "models/layers/compute_types.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

constexpr int kNewTokens = 6;

struct Config {
  int tp;
  int dcp;
  const char* backend;
  bool replicate_q;
  const char* kv_cache_dtype = "auto";
};

const Config kConfigs[] = {
    {4, 1, "ag_rs", false}, {4, 2, "a2a", true},      {4, 4, "ag_rs", false},
    {4, 4, "a2a", false},   {4, 4, "shm_a2a", false},
};

class Gemma3Invariance : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::Gemma3ModelPath();
    if (!std::filesystem::exists(path_)) {
      GTEST_SKIP() << "no Gemma 3 model at " << path_
                   << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
    }
    std::ifstream in(std::string(CTXPAR_TEST_DATA_DIR) + "/gemma3/golden.json");
    const nlohmann::json golden = nlohmann::json::parse(in);
    prompt_ = golden.at("prompts").at(0).at("prompt_ids").get<std::vector<int32_t>>();
  }

  Expected<Launch> LaunchFor(const Config& c) const {
    return testing::TestLaunch(path_, {{"tp_size", int64_t{c.tp}},
                                       {"dcp_size", int64_t{c.dcp}},
                                       {"dcp_comm_backend", std::string(c.backend)},
                                       {"dcp_replicate_q_proj", c.replicate_q},
                                       {"kv_cache_dtype", std::string(c.kv_cache_dtype)},
                                       {"threads", int64_t{1}}});
  }

  std::vector<int32_t> Generate(const Config& c, Status* status) const {
    std::vector<int32_t> tokens;
    std::mutex mu;
    *status = RunInProcess(c.tp, [&](Communicator& comm) -> Status {
      CTXPAR_ASSIGN_OR_RETURN(Launch launch, LaunchFor(c));
      CTXPAR_ASSIGN_OR_RETURN(testing::SequenceRunner model,
                              testing::SequenceRunner::Create(*launch.source, launch.config, comm));
      CTXPAR_ASSIGN_OR_RETURN(std::vector<float> logits, model.Forward(prompt_));
      std::vector<int32_t> out;
      for (int i = 0; i < kNewTokens; ++i) {
        const int32_t next = Greedy(logits);
        out.push_back(next);
        CTXPAR_ASSIGN_OR_RETURN(logits, model.Forward(std::span<const int32_t>(&next, 1)));
      }
      std::lock_guard<std::mutex> lock(mu);
      if (comm.rank() == 0) tokens = out;
      return Status::Ok();
    });
    return tokens;
  }

  // The prompt's last logits three ways on one pool of two slots: whole and alone, in chunks of
  // 3, and whole in one batch with another sequence (a decode row of it and a prefill).
  void CheckBatchAndChunks(const Config& c) const {
    std::vector<std::vector<float>> got(3);
    const Status st = RunInProcess(c.tp, [&](Communicator& comm) -> Status {
      CTXPAR_ASSIGN_OR_RETURN(Launch launch, LaunchFor(c));
      CTXPAR_ASSIGN_OR_RETURN(auto threads, ThreadPool::Create(1));
      const auto compute = model::ComputeFor(launch.config, threads.get());
      CTXPAR_ASSIGN_OR_RETURN(auto model,
                              launch.source->CreateModel(launch.config, comm, *compute));
      CTXPAR_ASSIGN_OR_RETURN(KvPoolOptions o, KvPoolFor(launch.config, *launch.source,
                                                         comm.rank() % launch.config.dcp_size));
      o.max_slots = 2;
      CTXPAR_ASSIGN_OR_RETURN(KvPool pool, KvPool::Create(o));
      const int32_t n = static_cast<int32_t>(prompt_.size());
      std::vector<std::vector<float>> out(3);
      auto run = [&](const Batch& b, std::vector<float>& logits) -> Status {
        for (const BatchSeq& s : b.seqs) {
          CTXPAR_RETURN_IF_ERROR(pool.Reserve(s.slot, s.pos0 + s.num_tokens));
        }
        return model->Forward(b, pool, logits);
      };
      CTXPAR_ASSIGN_OR_RETURN(int32_t a, pool.AcquireSlot());
      Batch whole;
      whole.Add(a, 0, prompt_.data(), n);
      CTXPAR_RETURN_IF_ERROR(run(whole, out[0]));
      CTXPAR_RETURN_IF_ERROR(pool.ReleaseSlot(a));
      CTXPAR_ASSIGN_OR_RETURN(a, pool.AcquireSlot());
      for (int32_t p = 0; p < n; p += 3) {
        Batch chunk;
        chunk.Add(a, p, prompt_.data() + p, std::min(3, n - p), p + 3 >= n);
        CTXPAR_RETURN_IF_ERROR(run(chunk, out[1]));
      }
      // Slot a now holds the prompt: one decode row of it beside the prompt's prefill in slot b.
      CTXPAR_ASSIGN_OR_RETURN(int32_t b, pool.AcquireSlot());
      const int32_t next = prompt_[1];
      Batch mixed;
      mixed.Add(a, n, &next, 1);
      mixed.Add(b, 0, prompt_.data(), n);
      std::vector<float> both;
      CTXPAR_RETURN_IF_ERROR(run(mixed, both));
      const std::size_t vocab = both.size() / 2;
      out[2].assign(both.begin() + vocab, both.end());
      std::lock_guard<std::mutex> lock(mu_);
      if (comm.rank() == 0) got = out;
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_FALSE(got[0].empty());
    EXPECT_TRUE(got[1] == got[0]) << "chunked prefill differs, tp " << c.tp << " dcp " << c.dcp;
    EXPECT_TRUE(got[2] == got[0]) << "batched prefill differs, tp " << c.tp << " dcp " << c.dcp;
  }

  std::string path_;
  std::vector<int32_t> prompt_;
  mutable std::mutex mu_;
};

TEST_F(Gemma3Invariance, GreedyTokensAcrossLayoutsAndBackends) {
  Status st;
  const std::vector<int32_t> base = Generate({1, 1, "ag_rs", false}, &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(base.size(), std::size_t(kNewTokens));
  for (const Config& c : kConfigs) {
    const std::vector<int32_t> got = Generate(c, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(got, base) << "tp " << c.tp << " dcp " << c.dcp << " " << c.backend
                         << (c.replicate_q ? " replicated Q" : "");
  }
}

// fp8 KV (both formats): tp 2 / dcp 2 (a2a, ag_rs) give tp 1's greedy tokens.
TEST_F(Gemma3Invariance, GreedyTokensWithFp8Kv) {
  for (const char* dtype : {"fp8_e4m3", "fp8_e5m2"}) {
    Status st;
    const std::vector<int32_t> base = Generate({1, 1, "ag_rs", false, dtype}, &st);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (const Config& c : {Config{2, 2, "a2a", false, dtype}, Config{2, 2, "ag_rs", false, dtype},
                            Config{2, 2, "a2a", true, dtype}}) {
      const std::vector<int32_t> got = Generate(c, &st);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(got, base) << "tp " << c.tp << " dcp " << c.dcp << " " << c.backend << " " << dtype
                           << (c.replicate_q ? " replicated Q" : "");
    }
  }
}

TEST_F(Gemma3Invariance, BatchedAndChunkedEqualAloneAndWhole) {
  CheckBatchAndChunks({1, 1, "ag_rs", false});
  CheckBatchAndChunks({4, 2, "a2a", false});
}

}  // namespace
}  // namespace ctxpar
