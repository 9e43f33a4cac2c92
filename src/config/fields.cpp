// The field table, value formatting and parsing, and the raw LaunchConfig snapshot.
#include <fmt/format.h>

#include <charconv>
#include <climits>
#include <cmath>
#include <optional>
#include <string>

#include "config/fields_internal.h"
#include "ctxpar/config.h"
#include "ctxpar/error_catalog.h"

namespace ctxpar {
namespace {

constexpr int64_t kIntMin = INT32_MIN;
constexpr int64_t kIntMax = INT32_MAX;

FieldSpec IntField(std::string_view name, FieldValue def, std::string_view flag, int64_t min,
                   std::string_view help, std::string_view alias = {}) {
  return {name,
          FieldType::kInt,
          std::holds_alternative<std::monostate>(def),
          std::move(def),
          flag,
          alias,
          {},
          {},
          min,
          kIntMax,
          help};
}

FieldSpec StrField(std::string_view name, FieldValue def, std::string_view flag,
                   std::vector<std::string_view> choices, std::string_view help,
                   std::string_view alias = {}) {
  return {name,
          FieldType::kString,
          std::holds_alternative<std::monostate>(def),
          std::move(def),
          flag,
          alias,
          {},
          std::move(choices),
          0,
          0,
          help};
}

FieldSpec FloatField(std::string_view name, double def, std::string_view flag, double min,
                     double max, std::string_view help) {
  FieldSpec f{name, FieldType::kFloat, false, def, flag, {}, {}, {}, 0, 0, help};
  f.min_float = min;
  f.max_float = max;
  return f;
}

FieldSpec BoolField(std::string_view name, std::string_view flag, std::string_view help) {
  return {name, FieldType::kBool, false, false, flag, {}, {}, {}, 0, 0, help};
}

const std::vector<FieldSpec>& Table() {
  static const std::vector<FieldSpec> fields = [] {
    std::vector<FieldSpec> f;
    f.push_back(
        StrField("model_path", {}, "--model-path", {}, "Path of the model weights.", "--model"));
    f.push_back(StrField("model_arch", {}, "--model-arch", {},
                         "HF architecture of the model, e.g. DeepseekV4ForCausalLM."));
    f.push_back(StrField("chat_template", {}, "--chat-template", {},
                         "A Jinja chat template file that replaces the model's "
                         "tokenizer.chat_template (chat requests, generate --chat)."));
    f.push_back(StrField("tool_call_parser", {}, "--tool-call-parser",
                         {"qwen25", "qwen", "hermes", "llama3", "mistral"},
                         "Parse the tool calls of chat completions in this model family's "
                         "format (qwen25 = qwen = hermes: <tool_call> JSON; llama3: JSON; "
                         "mistral: [TOOL_CALLS])."));
    f.push_back(StrField("platform", {}, "--platform", {},
                         "Target platform instead of the probe: cpu, rocm, cuda:smXY, "
                         "cuda:smXY+mnnvl (also CTXPAR_PLATFORM)."));
    f.push_back(IntField("tp_size", int64_t{1}, "--tp-size", 1, "Tensor parallel size.",
                         "--tensor-parallel-size"));
    f.push_back(IntField("dp_size", int64_t{1}, "--dp-size", 1, "Data parallel size.",
                         "--data-parallel-size"));
    // dcp_size has no range of its own: _handle_dcp_validation owns the `>= 1` rule and its text.
    f.push_back(IntField("dcp_size", int64_t{1}, "--dcp-size", kIntMin,
                         "Decode context parallel size.", "--decode-context-parallel-size"));
    f.push_back(StrField("dcp_comm_backend", std::string("ag_rs"), "--dcp-comm-backend",
                         {"ag_rs", "a2a", "fi_a2a", "shm_a2a"},
                         "How DCP ranks combine partial attention."));
    f.push_back({"dcp_replicate_q_proj",
                 FieldType::kBool,
                 true,
                 {},
                 "--dcp-replicate-q-proj",
                 {},
                 "--no-dcp-replicate-q-proj",
                 {},
                 0,
                 0,
                 "Replicate the Q projection over the DCP group (unset: the model decides)."});
    f.push_back(IntField("dcp_kv_cache_interleave_size", int64_t{1},
                         "--dcp-kv-cache-interleave-size", 1,
                         "Consecutive tokens per DCP rank in the KV cache."));
    f.push_back(BoolField("enable_deterministic_inference", "--enable-deterministic-inference",
                          "Attention whose bits do not depend on the layout: partials of "
                          "64-key chunks merged exactly (docs/dcp.md); with --dcp-size > 1 "
                          "the interleave size must be a multiple of 64 (unset: 64)."));
    f.push_back(BoolField("enable_prefill_cp", "--enable-prefill-cp",
                          "Enable prefill context parallelism."));
    f.push_back(StrField("cp_strategy", {}, "--cp-strategy", {"interleave", "zigzag"},
                         "How prefill CP splits the prompt."));
    f.push_back(IntField("attn_cp_size", int64_t{1}, "--attn-cp-size", 1,
                         "Attention context parallel size."));
    f.push_back(BoolField("enable_nsa_prefill_context_parallel",
                          "--enable-nsa-prefill-context-parallel",
                          "Legacy spelling of --enable-prefill-cp."));
    f.push_back(StrField("nsa_prefill_cp_mode", {}, "--nsa-prefill-cp-mode",
                         {"round-robin-split", "in-seq-split"},
                         "Legacy spelling of --cp-strategy (interleave, zigzag)."));
    f.push_back(StrField(
        "moe_a2a_backend", std::string("none"), "--moe-a2a-backend",
        {"none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe"},
        "MoE all-to-all backend."));
    f.push_back(IntField("ep_size", int64_t{1}, "--ep-size", 1, "Expert parallel size.",
                         "--expert-parallel-size"));
    f.push_back(IntField("moe_dense_tp_size", {}, "--moe-dense-tp-size", 1,
                         "TP size of the dense MLP layers of a MoE model."));
    f.push_back(BoolField("enable_dp_attention", "--enable-dp-attention",
                          "Data-parallel attention (attention DP size = dp_size)."));
    f.push_back(IntField("page_size", {}, "--page-size", 1,
                         "Tokens per KV page on each rank (unset: 16, the tile of the CPU "
                         "attention kernels)."));
    f.push_back(StrField("kv_cache_dtype", std::string("auto"), "--kv-cache-dtype",
                         {"auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"},
                         "Data type of the KV cache (auto: the model's, bf16 under --dtype auto "
                         "and fp32 under float32 on ctxpar's CPU engine; bf16 halves fp32's KV "
                         "memory of a token, fp8_e4m3 and fp8_e5m2 quarter it)."));
    f.push_back(IntField("kv_cache_mib", int64_t{1024}, "--kv-cache-mib", 1,
                         "KV cache memory per rank, in MiB."));
    f.push_back(
        IntField("max_total_tokens", {}, "--max-total-tokens", 1,
                 "Cap on the tokens the KV pool holds (unset: what --kv-cache-mib holds)."));
    f.push_back(FloatField("swa_full_tokens_ratio", 0.8, "--swa-full-tokens-ratio", 0.01, 1.0,
                           "Tokens of the sliding-window layers' KV pool per token of the "
                           "full-attention layers' pool (models with window layers only)."));
    f.push_back(IntField("max_running_requests", {}, "--max-running-requests", 1,
                         "Requests that hold KV at once (unset: 256)."));
    f.push_back(FloatField("schedule_conservativeness", 1.0, "--schedule-conservativeness", 0.01,
                           100.0,
                           "How much of each running request's remaining tokens admission "
                           "reserves (new_token_ratio starts at min(0.7 x this, 1))."));
    f.push_back(BoolField("disable_radix_cache", "--disable-radix-cache",
                          "Turn the prefix cache off: every prompt is computed from its first "
                          "token."));
    f.push_back(BoolField("allow_auto_truncate", "--allow-auto-truncate",
                          "Keep the first tokens of a prompt too long for the context or the KV "
                          "pool instead of refusing it."));
    f.push_back(StrField("schedule_policy", std::string("fcfs"), "--schedule-policy",
                         {"fcfs", "lpm"},
                         "Admission order: fcfs (arrival) or lpm (longest cached prefix first)."));
    f.push_back(FloatField("watchdog_timeout", 300.0, "--watchdog-timeout", 0.1, 1e6,
                           "Seconds an engine step may run: a longer one ends the server, with a "
                           "message naming what was running (SGLang's watchdog)."));
    f.push_back(IntField("max_queued_requests", {}, "--max-queued-requests", 1,
                         "Requests waiting for admission before new ones are refused (unset: no "
                         "limit)."));
    f.push_back(IntField("chunked_prefill_size", {}, "--chunked-prefill-size", -1,
                         "Prefill tokens per step; -1 prefills whole prompts (unset: 2048)."));
    f.push_back(IntField("threads", {}, "--threads", 1,
                         "Compute threads per rank (unset: the cores this process may use, "
                         "divided among the ranks)."));
    f.push_back(BoolField("llama_cpp_numerics", "--llama-cpp-numerics",
                          "Quantize activations to int8 before each matmul, as llama.cpp's CPU "
                          "backend does (GGUF models)."));
    f.push_back(StrField("dtype", std::string("float32"), "--dtype",
                         {"auto", "half", "float16", "bfloat16", "float", "float32"},
                         "Data type of the matmuls of GGUF models: float32 (and float) is fp32 on "
                         "FMA units, the default; auto quantizes activations to int8 per 32 (to "
                         "bf16 for F16 and BF16 weights) and runs the products on the CPU's "
                         "matrix units (AMX, AVX-512 or AVX VNNI, AVX512-BF16), faster but not "
                         "transformers-exact, and layout-invariant only "
                         "with --enable-deterministic-inference (docs/model.md); "
                         "half, float16 and bfloat16 are refused on the CPU engine."));
    f.push_back(IntField("random_seed", {}, "--random-seed", 0,
                         "Seed of the requests that give none (unset: 0)."));
    // Speculative decoding: SGLang's spellings and defaults, except max_bfs_breadth (unset: 1,
    // as ctxpar drafts chains; SGLang's 10 grows trees). _handle_speculative_decoding refuses
    // what is not implemented.
    f.push_back(StrField("speculative_algorithm", {}, "--speculative-algorithm",
                         {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"},
                         "Speculative decoding: NGRAM drafts from the request's own tokens, "
                         "STANDALONE with a smaller draft model (the others are refused)."));
    f.push_back(StrField("speculative_draft_model_path", {}, "--speculative-draft-model-path", {},
                         "The draft model of STANDALONE: a GGUF file or HF checkpoint with the "
                         "target model's vocabulary.",
                         "--speculative-draft-model"));
    f.push_back(IntField("speculative_num_steps", {}, "--speculative-num-steps", 1,
                         "STANDALONE: draft model steps per verify step (the draft is one chain: "
                         "speculative_num_draft_tokens becomes this plus one)."));
    f.push_back(IntField("speculative_num_draft_tokens", {}, "--speculative-num-draft-tokens", 1,
                         "Rows of a verify step: the last token and up to this minus one drafted "
                         "tokens (unset with NGRAM: the max match window; with STANDALONE: "
                         "speculative_num_steps + 1, 6 without it)."));
    f.push_back(IntField("speculative_ngram_min_match_window_size", int64_t{1},
                         "--speculative-ngram-min-match-window-size", 1,
                         "Shortest suffix of the sequence that an n-gram draft matches."));
    f.push_back(IntField("speculative_ngram_max_match_window_size", int64_t{12},
                         "--speculative-ngram-max-match-window-size", 1,
                         "Longest suffix of the sequence that an n-gram draft matches."));
    f.push_back(IntField("speculative_ngram_min_bfs_breadth", int64_t{1},
                         "--speculative-ngram-min-bfs-breadth", 1,
                         "Fewest branches of a draft tree (ctxpar drafts chains: 1)."));
    f.push_back(IntField("speculative_ngram_max_bfs_breadth", {},
                         "--speculative-ngram-max-bfs-breadth", 1,
                         "Most branches of a draft tree (unset: 1; ctxpar drafts chains)."));
    f.push_back(StrField("speculative_ngram_match_type", std::string("BFS"),
                         "--speculative-ngram-match-type", {"BFS", "PROB"},
                         "How a draft follows its match: BFS (the most recent continuation)."));
    f.push_back(IntField("speculative_ngram_branch_length", int64_t{18},
                         "--speculative-ngram-branch-length", 1, "Most tokens one match drafts."));
    f.push_back(IntField("speculative_ngram_capacity", int64_t{10 * 1000 * 1000},
                         "--speculative-ngram-capacity", 1,
                         "Tokens of finished requests kept to draft from when a request's own "
                         "tokens draft nothing (SGLang's n-gram cache shared across requests)."));
    return f;
  }();
  return fields;
}

int IndexOf(std::string_view name) {
  const auto& table = Table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string ValidValues(const FieldSpec& field) {
  if (field.type == FieldType::kBool) return "true, false";
  if (field.type == FieldType::kFloat) {
    return "numbers from " + FieldValueStr(field.min_float) + " to " +
           FieldValueStr(field.max_float);
  }
  if (field.type == FieldType::kInt) {
    // A field without a lower bound of its own (dcp_size) leaves `>= 1` to its rule, which keeps
    // SGLang's text; the range stated here is what the user can give, not INT32_MIN.
    const int64_t min = field.min_value == kIntMin ? 1 : field.min_value;
    return "integers from " + std::to_string(min) + " to " + std::to_string(field.max_value);
  }
  std::string out;
  for (std::string_view c : field.choices) {
    if (!out.empty()) out += ", ";
    out += c;
  }
  return out;
}

const char* TypeName(FieldType type) {
  switch (type) {
    case FieldType::kInt:
      return "an integer";
    case FieldType::kBool:
      return "a boolean";
    case FieldType::kString:
      return "a string";
    case FieldType::kFloat:
      return "a number";
  }
  return "a value";
}

bool HasType(const FieldSpec& field, const FieldValue& value) {
  if (std::holds_alternative<std::monostate>(value)) return field.nullable;
  switch (field.type) {
    case FieldType::kInt:
      return std::holds_alternative<int64_t>(value);
    case FieldType::kBool:
      return std::holds_alternative<bool>(value);
    case FieldType::kString:
      return std::holds_alternative<std::string>(value);
    case FieldType::kFloat:
      return std::holds_alternative<double>(value);
  }
  return false;
}

// Choices and range; the type is already right.
Status CheckDomain(const FieldSpec& field, std::string_view flag, const FieldValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) {
    if (*i < field.min_value || *i > field.max_value) {
      return CatalogError("CTXPAR-FLAG-003", {{"value", PyRepr(std::to_string(*i))},
                                              {"flag", std::string(flag)},
                                              {"valid", ValidValues(field)}});
    }
  }
  if (const auto* d = std::get_if<double>(&value)) {
    if (!(*d >= field.min_float && *d <= field.max_float)) {
      return CatalogError("CTXPAR-FLAG-003", {{"value", PyRepr(FieldValueStr(*d))},
                                              {"flag", std::string(flag)},
                                              {"valid", ValidValues(field)}});
    }
  }
  if (const auto* s = std::get_if<std::string>(&value); s && !field.choices.empty()) {
    for (std::string_view c : field.choices) {
      if (c == *s) return Status::Ok();
    }
    return CatalogError(
        "CTXPAR-FLAG-001",
        {{"value", PyRepr(*s)}, {"flag", std::string(flag)}, {"valid", ValidValues(field)}});
  }
  return Status::Ok();
}

// The text of a number as Python's int() and float() read it: surrounding whitespace and one
// leading '+' dropped, underscores between two digits (PEP 515: 1_000) removed. nullopt when an
// underscore stands anywhere else, which Python refuses too.
std::optional<std::string> PythonNumberText(std::string_view t) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t first = t.find_first_not_of(kSpace);
  t = first == std::string_view::npos ? std::string_view() : t.substr(first);
  t = t.substr(0, t.find_last_not_of(kSpace) + 1);
  if (!t.empty() && t.front() == '+') {
    t.remove_prefix(1);
    if (!t.empty() && (t.front() == '+' || t.front() == '-')) return std::nullopt;
  }
  auto digit = [&](size_t i) { return i < t.size() && t[i] >= '0' && t[i] <= '9'; };
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '_') {
      out += t[i];
    } else if (i == 0 || !digit(i - 1) || !digit(i + 1)) {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace

std::string FieldValueRepr(const FieldValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) return PyRepr(*s);
  return FieldValueStr(value);
}

std::string FieldValueStr(const FieldValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "True" : "False";
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* d = std::get_if<double>(&value)) {
    if (!std::isfinite(*d)) return std::isnan(*d) ? "nan" : (*d > 0 ? "inf" : "-inf");
    // Python's repr: the shortest text that reads back, with ".0" on integral values.
    std::string text = fmt::format("{}", *d);
    if (text.find_first_of(".eE") == std::string::npos) text += ".0";
    return text;
  }
  return "None";
}

std::span<const FieldSpec> ConfigFields() { return Table(); }

const FieldSpec* FindField(std::string_view name) {
  int i = IndexOf(name);
  return i < 0 ? nullptr : &Table()[i];
}

Expected<FieldValue> ParseFieldText(const FieldSpec& field, std::string_view flag,
                                    std::string_view text) {
  switch (field.type) {
    case FieldType::kString: {
      FieldValue value = std::string(text);
      CTXPAR_RETURN_IF_ERROR(CheckDomain(field, flag, value));
      return value;
    }
    case FieldType::kBool: {
      if (text == "true" || text == "True" || text == "1") return FieldValue(true);
      if (text == "false" || text == "False" || text == "0") return FieldValue(false);
      return CatalogError(
          "CTXPAR-FLAG-001",
          {{"value", PyRepr(text)}, {"flag", std::string(flag)}, {"valid", ValidValues(field)}});
    }
    case FieldType::kFloat: {
      // inf and nan read as Python reads them, then are refused as out of range.
      const std::string t = PythonNumberText(text).value_or("");
      double v = 0.0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
        return CatalogError(
            "CTXPAR-FLAG-010",
            {{"value", PyRepr(text)}, {"flag", std::string(flag)}, {"valid", ValidValues(field)}});
      }
      FieldValue value = v;
      CTXPAR_RETURN_IF_ERROR(CheckDomain(field, flag, value));
      return value;
    }
    case FieldType::kInt: {
      // Decimal digits after an optional '-', and nothing else.
      const std::string t = PythonNumberText(text).value_or("");
      bool digits = !t.empty() && t != "-";
      for (size_t i = (!t.empty() && t.front() == '-') ? 1 : 0; i < t.size(); ++i) {
        digits = digits && t[i] >= '0' && t[i] <= '9';
      }
      if (!digits) {
        return CatalogError(
            "CTXPAR-FLAG-002",
            {{"value", PyRepr(text)}, {"flag", std::string(flag)}, {"valid", ValidValues(field)}});
      }
      int64_t v = 0;
      auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec != std::errc() || end != t.data() + t.size() || v < field.min_value ||
          v > field.max_value) {
        return CatalogError(
            "CTXPAR-FLAG-003",
            {{"value", PyRepr(text)}, {"flag", std::string(flag)}, {"valid", ValidValues(field)}});
      }
      return FieldValue(v);
    }
  }
  return Internal("unreachable field type");
}

LaunchConfig::LaunchConfig() : given_(Table().size(), false) {
  for (const FieldSpec& f : Table()) values_.push_back(f.default_value);
}

Status LaunchConfig::Set(std::string_view field, FieldValue value) {
  int i = IndexOf(field);
  if (i < 0) {
    return CatalogError("CTXPAR-CONFIG-001", {{"source", "user"}, {"field", PyRepr(field)}});
  }
  const FieldSpec& spec = Table()[i];
  if (!HasType(spec, value)) {
    return CatalogError("CTXPAR-CONFIG-002", {{"source", "user"},
                                              {"field", std::string(field)},
                                              {"value", FieldValueRepr(value)},
                                              {"type", TypeName(spec.type)}});
  }
  CTXPAR_RETURN_IF_ERROR(CheckDomain(spec, spec.flag, value));
  values_[i] = std::move(value);
  given_[i] = true;
  return Status::Ok();
}

bool LaunchConfig::given(std::string_view field) const {
  int i = IndexOf(field);
  return i >= 0 && given_[i];
}

const FieldValue& LaunchConfig::raw(std::string_view field) const {
  static const FieldValue kNone;
  int i = IndexOf(field);
  return i < 0 ? kNone : values_[i];
}

bool FieldAcceptsType(const FieldSpec& field, const FieldValue& value) {
  return HasType(field, value);
}
const char* FieldTypeName(FieldType type) { return TypeName(type); }

}  // namespace ctxpar
