#include "ctxpar/engine_config.h"

#include <fmt/format.h>

namespace ctxpar {

namespace {

template <typename Enum, std::size_t N>
Expected<Enum> ParseChoice(std::string_view field, std::string_view value, const Enum (&all)[N],
                           std::string_view (*name)(Enum)) {
  for (Enum e : all) {
    if (name(e) == value) return e;
  }
  return Internal(fmt::format("MakeEngineConfig: {} has no value '{}'", field, value));
}

}  // namespace

std::string_view CpStrategyName(CpStrategy strategy) {
  switch (strategy) {
    case CpStrategy::kNone:
      return "none";
    case CpStrategy::kInterleave:
      return "interleave";
    case CpStrategy::kZigzag:
      return "zigzag";
  }
  return "?";
}

std::string_view MoeA2aBackendName(MoeA2aBackend backend) {
  switch (backend) {
    case MoeA2aBackend::kNone:
      return "none";
    case MoeA2aBackend::kDeepep:
      return "deepep";
    case MoeA2aBackend::kMooncake:
      return "mooncake";
    case MoeA2aBackend::kNixl:
      return "nixl";
    case MoeA2aBackend::kMori:
      return "mori";
    case MoeA2aBackend::kAscendFuseep:
      return "ascend_fuseep";
    case MoeA2aBackend::kFlashinfer:
      return "flashinfer";
    case MoeA2aBackend::kMegamoe:
      return "megamoe";
  }
  return "?";
}

std::string_view SpeculativeAlgorithmName(SpeculativeAlgorithm algorithm) {
  switch (algorithm) {
    case SpeculativeAlgorithm::kNone:
      return "none";
    case SpeculativeAlgorithm::kNgram:
      return "NGRAM";
    case SpeculativeAlgorithm::kStandalone:
      return "STANDALONE";
  }
  return "?";
}

Expected<EngineConfig> MakeEngineConfig(const ResolvedConfig& c, const Platform& platform) {
  static constexpr CpStrategy kStrategies[] = {CpStrategy::kNone, CpStrategy::kInterleave,
                                               CpStrategy::kZigzag};
  static constexpr MoeA2aBackend kMoe[] = {MoeA2aBackend::kNone,       MoeA2aBackend::kDeepep,
                                           MoeA2aBackend::kMooncake,   MoeA2aBackend::kNixl,
                                           MoeA2aBackend::kMori,       MoeA2aBackend::kAscendFuseep,
                                           MoeA2aBackend::kFlashinfer, MoeA2aBackend::kMegamoe};
  EngineConfig e;
  e.model_path = c.model_path();
  e.model_arch = c.model_arch();
  e.platform = platform;
  e.tp_size = c.tp_size();
  e.dp_size = c.dp_size();
  e.dcp_size = c.dcp_size();
  CTXPAR_ASSIGN_OR_RETURN(e.dcp_comm_backend, ParseCombineBackend(c.dcp_comm_backend()));
  e.dcp_replicate_q_proj = c.dcp_replicate_q_proj();
  e.dcp_kv_cache_interleave_size = c.dcp_kv_cache_interleave_size();
  e.enable_prefill_cp = c.enable_prefill_cp();
  CTXPAR_ASSIGN_OR_RETURN(
      e.cp_strategy,
      ParseChoice("cp_strategy", c.cp_strategy().value_or("none"), kStrategies, &CpStrategyName));
  e.attn_cp_size = c.attn_cp_size();
  CTXPAR_ASSIGN_OR_RETURN(e.moe_a2a_backend, ParseChoice("moe_a2a_backend", c.moe_a2a_backend(),
                                                         kMoe, &MoeA2aBackendName));
  e.ep_size = c.ep_size();
  e.moe_dense_tp_size = c.moe_dense_tp_size();
  e.enable_dp_attention = c.enable_dp_attention();
  e.page_size = c.page_size();
  const std::string kv_dtype = c.kv_cache_dtype();
  if (kv_dtype == "bf16" || kv_dtype == "bfloat16") {
    e.kv_cache_dtype = DataType::kBF16;
  } else if (kv_dtype == "fp8_e4m3") {
    e.kv_cache_dtype = DataType::kF8E4M3;
  } else if (kv_dtype == "fp8_e5m2") {
    e.kv_cache_dtype = DataType::kF8E5M2;
  } else if (kv_dtype != "auto") {
    return Internal(fmt::format(
        "MakeEngineConfig: kv_cache_dtype {} must have been refused by _handle_cpu_engine",
        kv_dtype));
  } else if (c.dtype() == "auto" && !c.llama_cpp_numerics()) {
    // SGLang's auto is the model's data type: the fast path's products are 16-bit or narrower
    // (and llama.cpp's cache is f16), float32 keeps fp32.
    e.kv_cache_dtype = DataType::kBF16;
  }
  e.kv_cache_mib = c.kv_cache_mib();
  e.max_total_tokens = c.max_total_tokens();
  e.swa_full_tokens_ratio = c.swa_full_tokens_ratio();
  e.max_running_requests = static_cast<int>(c.max_running_requests().value_or(0));
  if (auto q = c.max_queued_requests()) e.max_queued_requests = static_cast<int>(*q);
  e.chunked_prefill_size = c.chunked_prefill_size();
  e.schedule_conservativeness = c.schedule_conservativeness();
  e.disable_radix_cache = c.disable_radix_cache();
  e.allow_auto_truncate = c.allow_auto_truncate();
  e.schedule_policy = c.schedule_policy() == "lpm" ? SchedulePolicy::kLpm : SchedulePolicy::kFcfs;
  e.watchdog_timeout = c.watchdog_timeout();
  e.threads = c.threads();
  e.random_seed = static_cast<uint64_t>(c.random_seed());
  e.llama_cpp_numerics = c.llama_cpp_numerics();
  e.int8_matmuls = c.dtype() == "auto";
  e.deterministic = c.enable_deterministic_inference();
  if (const std::string algorithm = c.Str("speculative_algorithm"); !algorithm.empty()) {
    static constexpr SpeculativeAlgorithm kAlgorithms[] = {SpeculativeAlgorithm::kNgram,
                                                           SpeculativeAlgorithm::kStandalone};
    CTXPAR_ASSIGN_OR_RETURN(
        e.speculative_algorithm,
        ParseChoice("speculative_algorithm", algorithm, kAlgorithms, &SpeculativeAlgorithmName));
    e.speculative_num_draft_tokens = c.Int("speculative_num_draft_tokens");
    e.speculative_draft_model_path = c.Str("speculative_draft_model_path");
  }
  if (e.speculative_algorithm == SpeculativeAlgorithm::kNgram) {
    e.ngram_min_match_window = c.Int("speculative_ngram_min_match_window_size");
    e.ngram_max_match_window = c.Int("speculative_ngram_max_match_window_size");
    e.ngram_branch_length = c.Int("speculative_ngram_branch_length");
    e.ngram_capacity = c.Int("speculative_ngram_capacity");
  }
  if (e.page_size < 1 || e.max_running_requests < 1 || e.threads < 1) {
    return Internal(fmt::format(
        "MakeEngineConfig: page_size ({}), max_running_requests ({}) and threads ({}) must have "
        "been resolved to >= 1 by _handle_cpu_engine",
        e.page_size, e.max_running_requests, e.threads));
  }
  return e;
}

}  // namespace ctxpar
