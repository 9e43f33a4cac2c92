// PrepareLaunch: from the command line's raw configuration to everything a run needs, the same
// way for `ctxpar check --model-path`, `generate` and `serve`, so that they accept and refuse the
// same configurations.
//
// Steps: the platform (--platform, CTXPAR_PLATFORM or the probe), the model path (--model-path,
// else $CTXPAR_MODEL, else the default SmolLM2 file in the model cache), OpenModelSource, the
// resolution pipeline with the model's ModelInfo (its hook included), the typed EngineConfig,
// with --speculative-algorithm STANDALONE the draft model (opened and its vocabulary compared
// with the target's: CTXPAR-SPEC-006, CTXPAR-SPEC-007), and rank 0's KV pool plan (KvPoolFor),
// whose capacity is max_total_num_tokens.
//
// Thread safety: a function of its arguments and the environment.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ctxpar/config.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/model.h"
#include "ctxpar/platform.h"
#include "ctxpar/status.h"

namespace ctxpar {

struct Launch {
  Platform platform;
  std::unique_ptr<ModelSource> source;
  ResolvedConfig resolved;  // with the source of every value
  EngineConfig config;
  KvPoolOptions kv;                  // rank 0's pool
  int64_t max_total_num_tokens = 0;  // the full-attention group's tokens
  // The first sliding-window group's tokens (SGLang's swa_layer_tokens); 0: no window group.
  int64_t swa_max_total_num_tokens = 0;
};

// Where the model is read from when --model-path is not given: $CTXPAR_MODEL, else
// SmolLM2-135M-Instruct.Q4_1.gguf in $CTXPAR_MODEL_DIR, $XDG_CACHE_HOME/ctxpar/models or
// ~/.cache/ctxpar/models (where scripts/fetch-model.sh puts it).
std::string DefaultModelPath();

// The first failure of any step, with its catalog ID where it has one.
Expected<Launch> PrepareLaunch(const LaunchConfig& raw);

}  // namespace ctxpar
