// Runs a batch of requests through the engine under given flags and collects what each request
// received, for comparing speculative decoding (speculative_test, standalone_test) with plain
// decoding of the same requests. Ranks are threads of the in-process communicator.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine.h"
#include "ctxpar/launch.h"
#include "models/sequence_runner.h"

namespace ctxpar::testing {

using Flags = std::vector<std::pair<std::string, FieldValue>>;

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  int spec_verify_ct = 0;
  int spec_verify_tokens = 0;
  FinishReason finish = FinishReason::kNone;
};

struct RunResult {
  std::map<int, Outcome> out;  // by index in the request list
  EngineSnapshot stats;        // at the end, after the prefix cache was flushed
};

// The cancelled request of a run, if any: request `index` is cancelled once it has `after` tokens.
struct CancelAt {
  int index = -1;
  std::size_t after = 0;
};

// Submits every request on rank 0 of a tp-rank in-process group, runs until idle and flushes the
// prefix cache (so that stats.used_tokens counts pages that leaked).
inline RunResult RunRequests(const std::string& model, const std::vector<GenerateRequest>& requests,
                             int tp, const Flags& flags, CancelAt cancel, Status* status) {
  RunResult run;
  std::mutex mu;
  *status = RunInProcess(tp, [&](Communicator& comm) -> Status {
    Flags all = {{"threads", int64_t{1}}, {"tp_size", int64_t{tp}}};
    all.insert(all.end(), flags.begin(), flags.end());
    CTXPAR_ASSIGN_OR_RETURN(Launch launch, TestLaunch(model, all));
    CTXPAR_ASSIGN_OR_RETURN(auto engine,
                            Engine::Create(launch.config, *launch.source, comm, nullptr));
    Engine* e = engine.get();
    if (comm.rank() == 0) {
      for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
        auto ids = std::make_shared<uint64_t>(0);
        CTXPAR_ASSIGN_OR_RETURN(
            *ids, engine->Submit(requests[i], [&, i, ids, e](const RequestUpdate& u) {
              std::lock_guard<std::mutex> lock(mu);
              Outcome& o = run.out[i];
              o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
              o.logprobs.insert(o.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
              o.spec_verify_ct = u.spec_verify_ct;
              o.spec_verify_tokens = u.spec_verify_tokens;
              o.finish = u.finish;
              if (i == cancel.index && o.tokens.size() >= cancel.after) e->Cancel(*ids);
            }));
      }
    }
    CTXPAR_RETURN_IF_ERROR(engine->Run(Engine::RunUntil::kIdle));
    if (comm.rank() == 0) {
      CTXPAR_RETURN_IF_ERROR(engine->FlushCache());
      run.stats = engine->Snapshot();
    }
    return Status::Ok();
  });
  return run;
}

inline bool SameLogprobs(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].token != b[i].token || a[i].logprob != b[i].logprob || a[i].top != b[i].top) {
      return false;
    }
  }
  return true;
}

// A cancelled request stops once it has `after` tokens, a verify step possibly giving several at
// once: the tokens and log-probabilities both runs have agree, and both ended with kAbort.
inline void ExpectSameHead(const Outcome& a, const Outcome& b, std::size_t after) {
  EXPECT_EQ(a.finish, FinishReason::kAbort);
  EXPECT_EQ(b.finish, FinishReason::kAbort);
  const std::size_t common = std::min(a.tokens.size(), b.tokens.size());
  ASSERT_GE(common, after);
  auto head = [&](const Outcome& o) {
    return std::make_pair(
        std::vector<int32_t>(o.tokens.begin(), o.tokens.begin() + common),
        std::vector<TokenLogprob>(o.logprobs.begin(), o.logprobs.begin() + common));
  };
  EXPECT_EQ(head(a).first, head(b).first);
  EXPECT_TRUE(SameLogprobs(head(a).second, head(b).second));
}

}  // namespace ctxpar::testing
