// EngineConfig: the resolved launch configuration, typed once (enums, integers, optionals), as
// the engine, the models and the server read it. Built from the frozen view of the resolution
// pipeline (config.h), after every rule has run there: building it checks no rule again, it only
// converts.
//
// Thread safety: a value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ctxpar/combine.h"
#include "ctxpar/config.h"
#include "ctxpar/dtype.h"
#include "ctxpar/platform.h"
#include "ctxpar/status.h"

namespace ctxpar {

enum class CpStrategy { kNone, kInterleave, kZigzag };
enum class MoeA2aBackend {
  kNone,
  kDeepep,
  kMooncake,
  kNixl,
  kMori,
  kAscendFuseep,
  kFlashinfer,
  kMegamoe,
};

// --schedule-policy: fcfs admits queued requests by arrival, lpm by longest cached prefix.
enum class SchedulePolicy { kFcfs, kLpm };

// --speculative-algorithm: drafts from the request's own tokens (NGRAM) or from a draft model
// (STANDALONE); kNone decodes one token per step.
enum class SpeculativeAlgorithm { kNone, kNgram, kStandalone };

// The --cp-strategy, --moe-a2a-backend and --speculative-algorithm spellings ("none" for kNone).
std::string_view CpStrategyName(CpStrategy strategy);
std::string_view MoeA2aBackendName(MoeA2aBackend backend);
std::string_view SpeculativeAlgorithmName(SpeculativeAlgorithm algorithm);

struct EngineConfig {
  std::string model_path;
  std::string model_arch;  // the architecture the model-specific step keyed on
  Platform platform;

  // Parallelism (the names of config.h's fields).
  int tp_size = 1;
  int dp_size = 1;
  int dcp_size = 1;
  CombineBackend dcp_comm_backend = CombineBackend::kAgRs;
  bool dcp_replicate_q_proj = false;  // resolved: an unset tri-state is false here
  int dcp_kv_cache_interleave_size = 1;
  bool enable_prefill_cp = false;
  CpStrategy cp_strategy = CpStrategy::kNone;
  int attn_cp_size = 1;
  MoeA2aBackend moe_a2a_backend = MoeA2aBackend::kNone;
  int ep_size = 1;
  std::optional<int> moe_dense_tp_size;
  bool enable_dp_attention = false;

  // Memory and scheduling.
  int page_size = 16;
  // kF32, kBF16, kF8E4M3 (fp8_e4m3, e4m3fn) or kF8E5M2; fp8 with a scale of 1. auto: kBF16 under
  // --dtype auto (without --llama-cpp-numerics), else kF32.
  DataType kv_cache_dtype = DataType::kF32;
  int64_t kv_cache_mib = 0;                 // KV memory budget per rank
  std::optional<int64_t> max_total_tokens;  // cap on the pool's tokens
  double swa_full_tokens_ratio = 0.8;       // window-group tokens per full-group token
  int max_running_requests = 0;
  std::optional<int> max_queued_requests;  // unset: no limit
  int chunked_prefill_size = 0;            // prefill tokens per step; -1: whole prompts
  double schedule_conservativeness = 1.0;  // admission's new_token_ratio starts at 0.7 x this
  bool disable_radix_cache = false;        // the prefix cache is on unless this is set
  // Back the KV pool's pages at start (KvPoolOptions::populate): ctxpar serve sets it, so that
  // no request pays for first touches and a pool the machine cannot hold fails at start.
  bool populate_kv_cache = false;
  bool allow_auto_truncate = false;  // cut prompts too long to run (Engine::Prepare)
  SchedulePolicy schedule_policy = SchedulePolicy::kFcfs;
  double watchdog_timeout = 300.0;  // seconds a step may run (Engine::Health)
  int threads = 0;                  // compute threads per rank
  uint64_t random_seed = 0;         // seed of requests that give none
  bool llama_cpp_numerics = false;  // int8 activations in the matmuls (GGUF models)
  bool int8_matmuls = false;        // --dtype auto: the matrix units' int8 path (GGUF models)
  // --enable-deterministic-inference: the exact merge of 16-key chunks (DcpOptions::exact).
  bool deterministic = false;

  // Speculative decoding (--speculative-algorithm; docs/engine.md): each decoding request
  // verifies the last token and up to speculative_num_draft_tokens - 1 drafted tokens in one step.
  SpeculativeAlgorithm speculative_algorithm = SpeculativeAlgorithm::kNone;
  int speculative_num_draft_tokens = 0;
  std::string speculative_draft_model_path;  // kStandalone: the draft model
  int ngram_min_match_window = 1;            // suffix lengths a draft matches, longest first
  int ngram_max_match_window = 12;
  int ngram_branch_length = 18;         // most tokens one match drafts
  int64_t ngram_capacity = 10'000'000;  // finished requests' tokens kept to draft from
};

// Converts a resolved configuration; fails only on a value outside its enum (a bug).
Expected<EngineConfig> MakeEngineConfig(const ResolvedConfig& config, const Platform& platform);

}  // namespace ctxpar
