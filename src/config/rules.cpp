// The handlers of the resolution pipeline and SGLang's rules, in the documented order.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <thread>

#include "ctxpar/config.h"
#include "ctxpar/dcp_rules.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar {
namespace {

constexpr std::string_view kDeepseekV4Hook = "validate_deepseek_v4_cp";
constexpr std::string_view kKimiK3Hook = "apply_kimi_k3_dcp_defaults";

// shm_a2a is an all-to-all backend too: SGLang's a2a/fi_a2a rules extend to it.
bool IsAllToAllBackend(std::string_view backend) {
  return backend == "a2a" || backend == "fi_a2a" || backend == "shm_a2a";
}

bool HasMnnvlFabric(const Platform& p) { return p.is_cuda() && p.sm >= 90 && p.mnnvl_fabric; }

std::string Int(int64_t v) { return std::to_string(v); }

Status HandleLegacyCpArgs(Resolution& r, const ResolveContext&) {
  ResolvingView cfg = r.view();
  constexpr std::string_view kSource = "_handle_legacy_cp_args";
  if (cfg.Bool("enable_nsa_prefill_context_parallel") && !r.raw().given("enable_prefill_cp")) {
    CTXPAR_RETURN_IF_ERROR(r.Declare(kSource, {{"enable_prefill_cp", true}}));
  }
  std::optional<std::string> mode = cfg.OptStr("nsa_prefill_cp_mode");
  if (mode && !r.raw().given("cp_strategy")) {
    std::string strategy = *mode == "round-robin-split" ? "interleave" : "zigzag";
    CTXPAR_RETURN_IF_ERROR(r.Declare(kSource, {{"cp_strategy", strategy}}));
  }
  return Status::Ok();
}

Status HandleDcpValidation(Resolution& r, const ResolveContext& ctx) {
  ResolvingView cfg = r.view();
  // The field's choices are the backend spellings, so the parse cannot fail on a resolved value.
  CTXPAR_ASSIGN_OR_RETURN(CombineBackend backend, ParseCombineBackend(cfg.dcp_comm_backend()));
  return CheckDcpRules(cfg.dcp_size(), backend, cfg.dcp_replicate_q_proj(), ctx.platform.is_cuda());
}

Status HandleParallelism(Resolution& r, const ResolveContext&) {
  ResolvingView cfg = r.view();
  if (cfg.enable_prefill_cp() && !cfg.cp_strategy()) return CatalogError("CTXPAR-CP-001", {});
  const int tp = cfg.tp_size();
  const int dcp = cfg.dcp_size();
  if (tp % cfg.attn_cp_size() != 0) return CatalogError("CTXPAR-CP-002", {});
  CTXPAR_RETURN_IF_ERROR(CheckDcpDividesTp(tp, dcp));
  const int attn_tp = tp / cfg.attn_dp_size() / cfg.attn_cp_size();
  if (attn_tp % dcp != 0) {
    return CatalogError("CTXPAR-LAYOUT-002",
                        {{"attn_tp_size", Int(attn_tp)}, {"dcp_size", Int(dcp)}});
  }
  return Status::Ok();
}

// SGLang's deepseek_v4_hook: prefill CP for DeepSeek-V4 is round-robin (interleave) only.
Status ValidateDeepseekV4Cp(Resolution& r) {
  ResolvingView cfg = r.view();
  if (!cfg.enable_prefill_cp()) return Status::Ok();
  if (cfg.cp_strategy() != "interleave") {
    return CatalogError("CTXPAR-DSV4-001", {{"strategy", FieldValueStr(cfg.Get("cp_strategy"))}});
  }
  CTXPAR_RETURN_IF_ERROR(r.Declare(kDeepseekV4Hook, {{"enable_dp_attention", true}}));
  CTXPAR_RETURN_IF_ERROR(r.Declare(kDeepseekV4Hook, {{"moe_dense_tp_size", int64_t{1}}}));
  CTXPAR_RETURN_IF_ERROR(
      r.Declare(kDeepseekV4Hook, {{"attn_cp_size", int64_t{cfg.tp_size() / cfg.dp_size()}}}));
  if (cfg.dp_size() != 1) return CatalogError("CTXPAR-DSV4-002", {});
  if (cfg.tp_size() > 8) return CatalogError("CTXPAR-DSV4-003", {});
  static constexpr std::string_view kSupported[] = {"none", "deepep", "megamoe", "mori"};
  const std::string backend = cfg.moe_a2a_backend();
  for (std::string_view s : kSupported) {
    if (s == backend) return Status::Ok();
  }
  return CatalogError("CTXPAR-DSV4-004", {{"supported_a2a_backends", PyTuple(kSupported)},
                                          {"moe_a2a_backend", PyRepr(backend)}});
}

// Kimi-K3 wants the all-to-all combine with replicated Q under DCP. The hook only fills in what
// the user left open, and never replicates Q over ag_rs, which DCP validation would reject.
Status ApplyKimiK3DcpDefaults(Resolution& r, const Platform& platform) {
  ResolvingView cfg = r.view();
  if (cfg.dcp_size() <= 1) return Status::Ok();
  if (!r.raw().given("dcp_comm_backend")) {
    CTXPAR_RETURN_IF_ERROR(r.Declare(
        kKimiK3Hook,
        {{"dcp_comm_backend", std::string(HasMnnvlFabric(platform) ? "fi_a2a" : "a2a")}}));
  }
  if (!cfg.dcp_replicate_q_proj_is_set() && IsAllToAllBackend(cfg.dcp_comm_backend())) {
    CTXPAR_RETURN_IF_ERROR(r.Declare(kKimiK3Hook, {{"dcp_replicate_q_proj", true}}));
  }
  return Status::Ok();
}

Status HandleModelSpecificAdjustments(Resolution& r, const ResolveContext& ctx) {
  constexpr std::string_view kSource = "_handle_model_specific_adjustments";
  ResolvingView cfg = r.view();
  if (ctx.model != nullptr && !ctx.model->architecture.empty()) {
    if (!cfg.IsSet("model_arch")) {
      CTXPAR_RETURN_IF_ERROR(r.Declare(kSource, {{"model_arch", ctx.model->architecture}}));
    } else if (cfg.model_arch() != ctx.model->architecture) {
      return CatalogError("CTXPAR-MODEL-001",
                          {{"given", cfg.model_arch()}, {"architecture", ctx.model->architecture}});
    }
  }
  const std::string arch = cfg.model_arch();
  if (arch == "DeepseekV4ForCausalLM") CTXPAR_RETURN_IF_ERROR(ValidateDeepseekV4Cp(r));
  if (arch == "KimiK3ForCausalLM") CTXPAR_RETURN_IF_ERROR(ApplyKimiK3DcpDefaults(r, ctx.platform));
  if (ctx.model == nullptr) return Status::Ok();
  if (ctx.model->num_attention_heads > 0) {
    CTXPAR_RETURN_IF_ERROR(CheckDcpDividesHeads(ctx.model->num_attention_heads, cfg.dcp_size()));
  }
  if (ctx.model->hook) CTXPAR_RETURN_IF_ERROR(ctx.model->hook(r, ctx));
  return Status::Ok();
}

Status HandlePlatformChecks(Resolution& r, const ResolveContext& ctx) {
  ResolvingView cfg = r.view();
  const std::string spec = ctx.platform.Spec();
  if (cfg.platform() != spec) {
    CTXPAR_RETURN_IF_ERROR(r.Declare("_handle_platform_checks", {{"platform", spec}}));
  }
  // A probed platform is this machine, which may only be where the launch is checked; the init
  // of generate/serve runs these checks on the machine that serves.
  if (ctx.platform.origin == PlatformOrigin::kProbe) return Status::Ok();
  CTXPAR_RETURN_IF_ERROR(CheckMoeBackendRuntime(cfg.moe_a2a_backend(), ctx.platform));
  if (cfg.dcp_comm_backend() == "fi_a2a") CTXPAR_RETURN_IF_ERROR(CheckFiA2aRuntime(ctx.platform));
  return Status::Ok();
}

// The CPU engine stores K/V in fp32, bf16 or fp8 (its attention kernels read those); fp4 no.
Status CheckCpuKvCacheDtype(std::string_view dtype) {
  if (dtype == "auto" || dtype == "bf16" || dtype == "bfloat16" || dtype == "fp8_e4m3" ||
      dtype == "fp8_e5m2") {
    return Status::Ok();
  }
  return CatalogError("CTXPAR-KV-003", {{"dtype", std::string(dtype)}});
}

// ctxpar's engine: the values SGLang derives from the GPU's memory get CPU defaults, and with a
// model known (a run, not a dry check) what the CPU engine cannot honour is refused.
Status HandleCpuEngine(Resolution& r, const ResolveContext& ctx) {
  constexpr std::string_view kSource = "_handle_cpu_engine";
  ResolvingView cfg = r.view();
  // Deterministic inference over DCP: interleave blocks of whole chunks, in pages of whole blocks.
  const bool exact_dcp = cfg.enable_deterministic_inference() && cfg.dcp_size() > 1;
  // The field's default, 1 (one token a block), is never whole chunks: it becomes one chunk.
  if (exact_dcp && cfg.dcp_kv_cache_interleave_size() == 1) {
    CTXPAR_RETURN_IF_ERROR(
        r.Declare(kSource, {{"dcp_kv_cache_interleave_size", int64_t{kDeterministicChunkKeys}}}));
  }
  if (!cfg.IsSet("page_size")) {
    const int64_t page = exact_dcp ? std::max(16, cfg.dcp_kv_cache_interleave_size()) : 16;
    CTXPAR_RETURN_IF_ERROR(r.Declare(kSource, {{"page_size", page}}));
  }
  if (!cfg.IsSet("chunked_prefill_size")) {
    CTXPAR_RETURN_IF_ERROR(r.Declare(kSource, {{"chunked_prefill_size", int64_t{2048}}}));
  }
  if (!cfg.IsSet("max_running_requests")) {
    CTXPAR_RETURN_IF_ERROR(r.Declare(kSource, {{"max_running_requests", int64_t{256}}}));
  }
  const int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  if (!cfg.IsSet("threads")) {
    // The cores this process may use (taskset, a cpuset), shared by the tp ranks.
    CTXPAR_RETURN_IF_ERROR(
        r.Declare(kSource, {{"threads", std::max<int64_t>(1, UsableCores() / cfg.tp_size())}}));
  }
  if (cfg.chunked_prefill_size() == 0) return CatalogError("CTXPAR-ENGINE-004", {});
  const int page = cfg.page_size(), interleave = cfg.dcp_kv_cache_interleave_size();
  if (page % interleave != 0) {
    return CatalogError("CTXPAR-KV-001",
                        {{"page_size", Int(page)}, {"interleave_size", Int(interleave)}});
  }
  if (cfg.enable_deterministic_inference() && cfg.dcp_size() > 1 &&
      interleave % kDeterministicChunkKeys != 0) {
    return CatalogError("CTXPAR-DCP-009", {{"interleave_size", Int(interleave)},
                                           {"chunk", Int(kDeterministicChunkKeys)}});
  }
  if (ctx.model == nullptr) return Status::Ok();
  if (!ctx.platform.is_cpu() && ctx.platform.origin != PlatformOrigin::kProbe) {
    return CatalogError("CTXPAR-ENGINE-001", {{"platform", ctx.platform.Spec()}});
  }
  if (cfg.dp_size() != 1)
    return CatalogError("CTXPAR-ENGINE-002", {{"dp_size", Int(cfg.dp_size())}});
  CTXPAR_RETURN_IF_ERROR(CheckCpuKvCacheDtype(cfg.kv_cache_dtype()));
  if (cfg.dtype() != "auto" && cfg.dtype() != "float32" && cfg.dtype() != "float") {
    return CatalogError("CTXPAR-DTYPE-001", {{"dtype", cfg.dtype()}});
  }
  if (cfg.threads() > hardware) {
    return CatalogError("CTXPAR-FLAG-007", {{"value", Int(cfg.threads())},
                                            {"flag", "--threads"},
                                            {"max", Int(hardware)},
                                            {"valid", "integers from 1 to " + Int(hardware)}});
  }
  CTXPAR_RETURN_IF_ERROR(CheckMoeBackendRuntime(cfg.moe_a2a_backend(), ctx.platform));
  if (cfg.dcp_comm_backend() == "fi_a2a") CTXPAR_RETURN_IF_ERROR(CheckFiA2aRuntime(ctx.platform));
  return Status::Ok();
}

// STANDALONE: a draft model, one chain of speculative_num_steps tokens. SGLang's chains
// (speculative_eagle_topk 1) verify speculative_num_steps + 1 rows, and it adjusts
// speculative_num_draft_tokens to that; its default is 5 steps (auto_choose_speculative_params).
Status HandleStandalone(Resolution& r) {
  constexpr std::string_view kSource = "_handle_speculative_decoding";
  constexpr int64_t kDefaultSteps = 5;
  ResolvingView cfg = r.view();
  if (!cfg.IsSet("speculative_draft_model_path") ||
      cfg.Str("speculative_draft_model_path").empty()) {
    return CatalogError("CTXPAR-SPEC-004", {});
  }
  if (cfg.IsSet("speculative_num_steps")) {
    return r.Declare(
        kSource, {{"speculative_num_draft_tokens", int64_t{cfg.Int("speculative_num_steps")} + 1}});
  }
  if (!cfg.IsSet("speculative_num_draft_tokens")) {
    return r.Declare(kSource, {{"speculative_num_draft_tokens", kDefaultSteps + 1}});
  }
  return Status::Ok();
}

// SGLang's _handle_speculative_decoding for NGRAM and STANDALONE, on ctxpar's engine: drafts are
// chains (docs/engine.md), from the request's own tokens or from a draft model, so what needs a
// trained draft head, a draft tree or the shared n-gram cache is refused rather than ignored.
// Opening the draft model and comparing its vocabulary wait for PrepareLaunch (CTXPAR-SPEC-006,
// CTXPAR-SPEC-007): the flags alone name a path only.
Status HandleSpeculativeDecoding(Resolution& r, const ResolveContext&) {
  constexpr std::string_view kSource = "_handle_speculative_decoding";
  ResolvingView cfg = r.view();
  const std::optional<std::string> algorithm = cfg.OptStr("speculative_algorithm");
  if (!algorithm) return Status::Ok();
  if (*algorithm == "STANDALONE") return HandleStandalone(r);
  if (*algorithm != "NGRAM") return CatalogError("CTXPAR-SPEC-001", {{"algorithm", *algorithm}});
  if (cfg.IsSet("speculative_draft_model_path")) {
    return CatalogError("CTXPAR-SPEC-005", {{"algorithm", *algorithm}});
  }
  auto unsupported = [](std::string option, std::string why) {
    return CatalogError("CTXPAR-SPEC-002",
                        {{"option", std::move(option)}, {"why", std::move(why)}});
  };
  const int max_breadth = cfg.IsSet("speculative_ngram_max_bfs_breadth")
                              ? cfg.Int("speculative_ngram_max_bfs_breadth")
                              : 1;
  const int min_breadth = cfg.Int("speculative_ngram_min_bfs_breadth");
  if (max_breadth > 1 || min_breadth > 1) {
    return unsupported(
        fmt::format("--speculative-ngram-{}-bfs-breadth {}", max_breadth > 1 ? "max" : "min",
                    std::max(max_breadth, min_breadth)),
        "a draft tree of several branches; ctxpar drafts one chain (breadth 1)");
  }
  if (cfg.Str("speculative_ngram_match_type") != "BFS") {
    return unsupported("--speculative-ngram-match-type PROB",
                       "drafts ranked by the shared n-gram cache's frequencies; ctxpar drafts "
                       "the most recent continuation of the longest match (BFS)");
  }
  const int min_window = cfg.Int("speculative_ngram_min_match_window_size");
  const int max_window = cfg.Int("speculative_ngram_max_match_window_size");
  if (min_window > max_window) {
    return CatalogError("CTXPAR-SPEC-003", {{"min", Int(min_window)}, {"max", Int(max_window)}});
  }
  if (!cfg.IsSet("speculative_ngram_max_bfs_breadth")) {
    CTXPAR_RETURN_IF_ERROR(r.Declare(kSource, {{"speculative_ngram_max_bfs_breadth", int64_t{1}}}));
  }
  if (!cfg.IsSet("speculative_num_draft_tokens")) {
    CTXPAR_RETURN_IF_ERROR(
        r.Declare(kSource, {{"speculative_num_draft_tokens", int64_t{max_window}}}));
  }
  return Status::Ok();
}

constexpr Handler kHandlers[] = {
    {"_handle_legacy_cp_args", &HandleLegacyCpArgs},
    {"_handle_dcp_validation", &HandleDcpValidation},
    {"_handle_parallelism", &HandleParallelism},
    {"_handle_model_specific_adjustments", &HandleModelSpecificAdjustments},
    {"_handle_platform_checks", &HandlePlatformChecks},
    {"_handle_cpu_engine", &HandleCpuEngine},
    {"_handle_speculative_decoding", &HandleSpeculativeDecoding},
};

struct MoeNeed {
  std::string_view backend;
  std::string_view requirement;
  bool (*runs_on)(const Platform&);
};

constexpr MoeNeed kMoeNeeds[] = {
    {"none", "", [](const Platform&) { return true; }},
    // ctxpar runs DeepEP's dispatch and combine on the CPU as all-to-all-v over the communicator.
    {"deepep", "an NVIDIA CUDA GPU or the CPU engine",
     [](const Platform& p) { return p.is_cuda() || p.is_cpu(); }},
    {"mooncake", "an NVIDIA CUDA GPU", [](const Platform& p) { return p.is_cuda(); }},
    {"nixl", "an NVIDIA CUDA GPU", [](const Platform& p) { return p.is_cuda(); }},
    {"mori", "an AMD ROCm GPU", [](const Platform& p) { return p.is_rocm(); }},
    {"ascend_fuseep", "a Huawei Ascend NPU, which ctxpar does not run on",
     [](const Platform&) { return false; }},
    {"flashinfer", "an NVIDIA CUDA GPU of SM90 or newer with MNNVL fabric memory",
     [](const Platform& p) { return HasMnnvlFabric(p); }},
    {"megamoe", "an NVIDIA CUDA GPU of SM90 or newer",
     [](const Platform& p) { return p.is_cuda() && p.sm >= 90; }},
};

}  // namespace

std::span<const Handler> DefaultHandlers() { return kHandlers; }

Status CheckMoeBackendRuntime(std::string_view moe_a2a_backend, const Platform& platform) {
  const MoeNeed* need = nullptr;
  std::vector<std::string_view> alternatives;
  for (const MoeNeed& n : kMoeNeeds) {
    if (n.backend == moe_a2a_backend) need = &n;
    if (n.runs_on(platform)) alternatives.push_back(n.backend);
  }
  if (need == nullptr) {
    const FieldSpec* field = FindField("moe_a2a_backend");
    return ParseFieldText(*field, field->flag, moe_a2a_backend).status();
  }
  if (need->runs_on(platform)) return Status::Ok();
  std::string alt;
  for (size_t i = 0; i < alternatives.size(); ++i) {
    if (i > 0) alt += i + 1 == alternatives.size() ? " or " : ", ";
    alt += alternatives[i];
  }
  return CatalogError("CTXPAR-MOE-001", {{"backend", std::string(moe_a2a_backend)},
                                         {"requirement", std::string(need->requirement)},
                                         {"platform", platform.Spec()},
                                         {"alternatives", alt}});
}

}  // namespace ctxpar
