// The launch configuration: SGLang's fields, their resolution with provenance, and the rules.
//
// Resolution mirrors SGLang's ServerArgs pipeline (`resolving_view`, `declare_resolution`):
//   1. The raw input is snapshotted once in a LaunchConfig (value + "was it given" per field).
//   2. Handlers never write fields. Each declares (source, {field: value}) into an append-only
//      list (Resolution::Declare); declaring a name that is not a field fails and names the
//      source (CTXPAR-CONFIG-001).
//   3. A ResolvingView is read-only and live: a read walks the declarations newest-first and
//      falls back to the raw value. A ResolvedConfig is the frozen snapshot (last writer wins)
//      used after the pipeline, with the raw value, the final value and the source per field.
//
// The handlers run in this fixed order (DefaultHandlers()):
//   1. _handle_legacy_cp_args             --enable-nsa-prefill-context-parallel and
//                                         --nsa-prefill-cp-mode map onto enable_prefill_cp and
//                                         cp_strategy (round-robin-split = interleave,
//                                         in-seq-split = zigzag) unless those were given.
//   2. _handle_dcp_validation             the five DCP rules, CTXPAR-DCP-001..005.
//   3. _handle_parallelism                generic prefill CP (CTXPAR-CP-001/002) and the layout
//                                         (CTXPAR-LAYOUT-001/002).
//   4. _handle_model_specific_adjustments keyed by model_arch: DeepseekV4ForCausalLM runs
//                                         validate_deepseek_v4_cp (CTXPAR-DSV4-*),
//                                         KimiK3ForCausalLM runs apply_kimi_k3_dcp_defaults. With
//                                         a known model: --model-arch must match it
//                                         (CTXPAR-MODEL-001), CTXPAR-LAYOUT-003 (heads vs
//                                         dcp_size), then the model's own hook (ModelInfo::hook).
//   5. _handle_platform_checks            declares the platform; when the platform was named by
//                                         the user (--platform, CTXPAR_PLATFORM), also the init
//                                         checks: CTXPAR-MOE-001 and CTXPAR-DCP-006. A probed
//                                         platform skips them here.
//   6. _handle_cpu_engine                 ctxpar's CPU engine: page_size 16, chunked_prefill_size
//                                         2048, max_running_requests 256 and threads (usable
//                                         cores / tp_size) when unset; CTXPAR-ENGINE-004 and
//                                         CTXPAR-KV-001. With a known model (a run): a named
//                                         platform that is not the CPU (CTXPAR-ENGINE-001),
//                                         dp_size (CTXPAR-ENGINE-002), threads beyond the machine
//                                         (CTXPAR-FLAG-007), an fp8 / fp4 --kv-cache-dtype
//                                         (CTXPAR-KV-003), and the init checks of step 5 on any
//                                         platform.
//   7. _handle_speculative_decoding       --speculative-algorithm: NGRAM resolves
//                                         speculative_num_draft_tokens (unset: the max match
//                                         window) and max_bfs_breadth (unset: 1); STANDALONE
//                                         needs a draft model path (CTXPAR-SPEC-004) and resolves
//                                         speculative_num_draft_tokens to speculative_num_steps
//                                         + 1 (unset: 6); the other algorithms (CTXPAR-SPEC-001),
//                                         a draft path with NGRAM (CTXPAR-SPEC-005), draft trees,
//                                         PROB matching and the shared cache's capacity
//                                         (CTXPAR-SPEC-002) and a min window above the max
//                                         (CTXPAR-SPEC-003) are refused.
//
// Sources are the handler names above, the hook names, "user" (given on the command line and
// not overridden) or "default".
//
// Thread safety: all types are values; a ResolvingView must not outlive its Resolution.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "ctxpar/platform.h"
#include "ctxpar/status.h"

namespace ctxpar {

// A field value: unset (Python's None), an integer, a boolean, a string or a float.
using FieldValue = std::variant<std::monostate, int64_t, bool, std::string, double>;

// Python's repr() of a value: None, 4, True, 'a2a', 0.5, 1.0.
std::string FieldValueRepr(const FieldValue& value);
// Python's str() of a value: None, 4, True, a2a, 0.5, 1.0.
std::string FieldValueStr(const FieldValue& value);
// The value as JSON (null when unset), for any nlohmann::basic_json type: so that the config
// layer does not depend on the JSON library its callers use.
template <class Json>
Json FieldValueJson(const FieldValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::monostate>) {
          return nullptr;
        } else {
          return v;
        }
      },
      value);
}

enum class FieldType { kInt, kBool, kString, kFloat };

// One configuration field and its command-line spelling.
struct FieldSpec {
  std::string_view name;  // snake_case, as in SGLang's ServerArgs
  FieldType type;
  bool nullable;              // may be unset (None); tri-state for booleans
  FieldValue default_value;   // std::monostate when the default is None
  std::string_view flag;      // "--dcp-size"
  std::string_view alias;     // "--decode-context-parallel-size", or empty
  std::string_view negation;  // "--no-dcp-replicate-q-proj" for tri-state booleans, or empty
  std::vector<std::string_view> choices;  // strings: the valid values; empty means any
  int64_t min_value;                      // integers: the valid range
  int64_t max_value;
  std::string_view help;
  double min_float = 0.0;  // floats: the valid range, finite
  double max_float = 0.0;
};

// Every field, in a fixed order (the order `ctxpar check` prints them in).
std::span<const FieldSpec> ConfigFields();
// nullptr when `name` is not a field.
const FieldSpec* FindField(std::string_view name);

// Converts the text given to `flag` into the field's type: an integer within the range
// (CTXPAR-FLAG-002 not an integer, CTXPAR-FLAG-003 out of range), a finite float within the range
// (CTXPAR-FLAG-010 not a number, CTXPAR-FLAG-003 out of range) or one of the choices
// (CTXPAR-FLAG-001). Booleans accept true/false/1/0.
Expected<FieldValue> ParseFieldText(const FieldSpec& field, std::string_view flag,
                                    std::string_view text);

class Resolution;
struct ResolveContext;

// What a model file tells the configuration (known when a model is opened or named).
struct ModelInfo {
  std::string architecture;  // HF architecture string, e.g. "DeepseekV4ForCausalLM"
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  // The model's own rules (what its layout can serve), run by _handle_model_specific_adjustments
  // after SGLang's architecture hooks, under the source name `hook_name`: it refuses with a
  // catalog error or declares fields. Empty: the model adds no rule.
  std::string hook_name;
  std::function<Status(Resolution& resolution, const ResolveContext& context)> hook;
};

// The raw snapshot: each field's value and whether the user gave it.
class LaunchConfig {
 public:
  LaunchConfig();  // every field at its default, none given

  // Sets a field as given. Rejects an unknown name (CTXPAR-CONFIG-001 with source "user"), a
  // value of the wrong type and a value outside the field's choices or range (CTXPAR-FLAG-*).
  Status Set(std::string_view field, FieldValue value);
  bool given(std::string_view field) const;
  // The value (the default when not given); None for an unknown name.
  const FieldValue& raw(std::string_view field) const;

 private:
  friend class Resolution;
  std::vector<FieldValue> values_;
  std::vector<bool> given_;
};

// Typed getters shared by the live and the frozen view. Integers are ints (LaunchConfig keeps
// them in 32-bit range); an unset tri-state boolean reads false.
template <typename View>
class ConfigGetters {
 public:
  int tp_size() const { return Int("tp_size"); }
  int dp_size() const { return Int("dp_size"); }
  int dcp_size() const { return Int("dcp_size"); }
  std::string dcp_comm_backend() const { return Str("dcp_comm_backend"); }
  bool dcp_replicate_q_proj() const { return Bool("dcp_replicate_q_proj"); }
  bool dcp_replicate_q_proj_is_set() const { return IsSet("dcp_replicate_q_proj"); }
  int dcp_kv_cache_interleave_size() const { return Int("dcp_kv_cache_interleave_size"); }
  bool enable_prefill_cp() const { return Bool("enable_prefill_cp"); }
  std::optional<std::string> cp_strategy() const { return OptStr("cp_strategy"); }
  int attn_cp_size() const { return Int("attn_cp_size"); }
  std::string moe_a2a_backend() const { return Str("moe_a2a_backend"); }
  int ep_size() const { return Int("ep_size"); }
  std::optional<int> moe_dense_tp_size() const {
    if (!IsSet("moe_dense_tp_size")) return std::nullopt;
    return Int("moe_dense_tp_size");
  }
  bool enable_dp_attention() const { return Bool("enable_dp_attention"); }
  int page_size() const { return Int("page_size"); }
  std::string kv_cache_dtype() const { return Str("kv_cache_dtype"); }
  int64_t kv_cache_mib() const { return Int64("kv_cache_mib"); }
  std::optional<int64_t> max_total_tokens() const { return OptInt64("max_total_tokens"); }
  std::optional<int64_t> max_running_requests() const { return OptInt64("max_running_requests"); }
  std::optional<int64_t> max_queued_requests() const { return OptInt64("max_queued_requests"); }
  int chunked_prefill_size() const { return Int("chunked_prefill_size"); }
  int threads() const { return Int("threads"); }
  int64_t random_seed() const { return Int64("random_seed"); }
  bool llama_cpp_numerics() const { return Bool("llama_cpp_numerics"); }
  bool enable_deterministic_inference() const { return Bool("enable_deterministic_inference"); }
  std::string dtype() const { return Str("dtype"); }
  double schedule_conservativeness() const { return Float("schedule_conservativeness"); }
  bool disable_radix_cache() const { return Bool("disable_radix_cache"); }
  bool allow_auto_truncate() const { return Bool("allow_auto_truncate"); }
  std::string schedule_policy() const { return Str("schedule_policy"); }
  double swa_full_tokens_ratio() const { return Float("swa_full_tokens_ratio"); }
  double watchdog_timeout() const { return Float("watchdog_timeout"); }
  std::string model_path() const { return Str("model_path"); }  // "" when unset
  std::string model_arch() const { return Str("model_arch"); }  // "" when unset
  // A Jinja file that replaces the model's chat template; "" when unset.
  std::string chat_template() const { return Str("chat_template"); }
  std::optional<std::string> tool_call_parser() const { return OptStr("tool_call_parser"); }
  std::string platform() const { return Str("platform"); }  // a Platform::Spec()
  // The attention data-parallel size: dp_size with --enable-dp-attention, else 1.
  int attn_dp_size() const { return enable_dp_attention() ? dp_size() : 1; }

  bool IsSet(std::string_view name) const {
    return !std::holds_alternative<std::monostate>(Self().Get(name));
  }
  int Int(std::string_view name) const {
    FieldValue v = Self().Get(name);
    return std::holds_alternative<int64_t>(v) ? static_cast<int>(std::get<int64_t>(v)) : 0;
  }
  int64_t Int64(std::string_view name) const {
    FieldValue v = Self().Get(name);
    return std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v) : 0;
  }
  std::optional<int64_t> OptInt64(std::string_view name) const {
    if (!IsSet(name)) return std::nullopt;
    return Int64(name);
  }
  double Float(std::string_view name) const {
    FieldValue v = Self().Get(name);
    return std::holds_alternative<double>(v) ? std::get<double>(v) : 0.0;
  }
  bool Bool(std::string_view name) const {
    FieldValue v = Self().Get(name);
    return std::holds_alternative<bool>(v) && std::get<bool>(v);
  }
  std::string Str(std::string_view name) const {
    FieldValue v = Self().Get(name);
    return std::holds_alternative<std::string>(v) ? std::get<std::string>(v) : std::string();
  }
  std::optional<std::string> OptStr(std::string_view name) const {
    FieldValue v = Self().Get(name);
    if (!std::holds_alternative<std::string>(v)) return std::nullopt;
    return std::get<std::string>(v);
  }

 private:
  const View& Self() const { return static_cast<const View&>(*this); }
};

// The live, read-only view of a Resolution (SGLang's resolving_view).
class ResolvingView : public ConfigGetters<ResolvingView> {
 public:
  explicit ResolvingView(const Resolution& resolution) : resolution_(&resolution) {}
  // Newest declaration of `name`, else its raw value; None for an unknown name.
  FieldValue Get(std::string_view name) const;

 private:
  const Resolution* resolution_;
};

// One field after resolution, for printing: raw value, final value and who set it.
struct FieldResolution {
  const FieldSpec* field;
  FieldValue raw;
  FieldValue value;
  std::string source;  // a handler or hook name, "user" or "default"
  bool is_default() const { return value == field->default_value; }
};

// The frozen view after the pipeline (last writer wins). Read-only.
class ResolvedConfig : public ConfigGetters<ResolvedConfig> {
 public:
  ResolvedConfig() = default;
  FieldValue Get(std::string_view name) const;
  // Provenance of one field; nullptr for an unknown name.
  const FieldResolution* Provenance(std::string_view name) const;
  // Every field, in ConfigFields() order.
  const std::vector<FieldResolution>& fields() const { return fields_; }
  // The fields whose final value differs from their default, in ConfigFields() order.
  std::vector<FieldResolution> NonDefaultFields() const;

 private:
  friend class Resolution;
  std::vector<FieldResolution> fields_;
};

// One declaration: `source` declared `field` = `value`.
struct Declaration {
  std::string source;
  std::string field;
  FieldValue value;
};

// The raw snapshot plus the append-only list of declarations.
class Resolution {
 public:
  explicit Resolution(LaunchConfig raw) : raw_(std::move(raw)) {}

  // Appends one declaration per field, all or none: an unknown field is CTXPAR-CONFIG-001 and a
  // value of the wrong type CTXPAR-CONFIG-002, both naming `source` (kInternal: a handler bug).
  Status Declare(std::string_view source,
                 std::initializer_list<std::pair<std::string_view, FieldValue>> fields);
  ResolvingView view() const { return ResolvingView(*this); }
  ResolvedConfig Freeze() const;
  const LaunchConfig& raw() const { return raw_; }
  const std::vector<Declaration>& declarations() const { return declarations_; }

 private:
  friend class ResolvingView;
  LaunchConfig raw_;
  std::vector<Declaration> declarations_;
};

struct ResolveContext {
  const Platform& platform;
  const ModelInfo* model;  // may be null: the model is not known yet
};

using HandlerFn = Status (*)(Resolution& resolution, const ResolveContext& context);
struct Handler {
  std::string_view name;
  HandlerFn run;
};

// The pipeline's handlers in their documented order (see the top of this file).
std::span<const Handler> DefaultHandlers();

// The result of a run with what was resolved up to a failure, for printing.
struct ResolveOutcome {
  Status status;          // ok, or the first rule that failed
  ResolvedConfig config;  // the frozen view after the last handler that ran
};

// Runs `handlers` in order over `raw`; stops at the first failure.
ResolveOutcome RunPipeline(const LaunchConfig& raw, const ResolveContext& context,
                           std::span<const Handler> handlers);
// RunPipeline with DefaultHandlers(). When `model` is given and model_arch was not, its
// architecture is used for the model-specific step.
ResolveOutcome ResolveWithTrace(const LaunchConfig& raw, const Platform& platform,
                                const ModelInfo* model);
Expected<ResolvedConfig> Resolve(const LaunchConfig& raw, const Platform& platform,
                                 const ModelInfo* model);

// The platform a launch targets: --platform when given (CTXPAR-FLAG-006 when invalid), else
// CTXPAR_PLATFORM, else the probe.
Expected<Platform> PlatformForLaunch(const LaunchConfig& raw);

// Init-time check of the MoE all-to-all backend against the platform (CTXPAR-MOE-001,
// kFailedPrecondition): mori needs ROCm; deepep, mooncake and nixl need CUDA; megamoe needs CUDA
// SM90+; flashinfer needs CUDA SM90+ with MNNVL fabric; ascend_fuseep needs an Ascend NPU,
// which ctxpar does not run on. `none` runs everywhere.
Status CheckMoeBackendRuntime(std::string_view moe_a2a_backend, const Platform& platform);

}  // namespace ctxpar
