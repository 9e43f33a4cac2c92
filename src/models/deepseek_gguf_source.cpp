// DeepSeek-V3 from GGUF (general.architecture deepseek2, as llama.cpp's convert_hf_to_gguf.py
// writes DeepseekV3ForCausalLM): the deepseek2.* keys read into the DeepseekV3Config the HF path
// reads from config.json, and the tensors mapped to the HF weights the model reads
// (DeepseekWeights), dequantized to fp32 at load. The source, the rules and the network are the
// HF path's (deepseek_source.cpp, deepseek.cpp).
//
// The converter writes kv_b_proj [H * (nope + v), kv_lora_rank] split per head: attn_k_b
// (ggml ne [nope, kv_lora_rank, H]: each head's W_UK transposed) and attn_v_b (ne [kv_lora_rank,
// v, H]: W_UV). kv_b_proj is reassembled from them exactly (copies of dequantized values), and the
// absorbed form's W_UK^T is transposed back from it. The routed experts are one tensor per
// projection (ffn_*_exps, expert e the e-th [rows, cols] block), the router's correction bias is
// exp_probs_b.bias.
//
// Refused (catalog IDs, before compute): a router other than sigmoid (expert_gating_func 2; a
// file without the key is DeepSeek-V2's softmax to llama.cpp), no q LoRA (V2-Lite's attn_q),
// RoPE scaling (YaRN), a KV head count other than 1, keys the model does not read and tensors it
// would not read (model::CheckGgufKeys, model::CheckGgufTensors), and every rule of the HF path
// (FindDeepseekConfigFault, CheckDeepseekTensors).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ctxpar/gguf_hparams.h"
#include "models/deepseek.h"
#include "models/layers/gguf_weights.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr std::string_view kArch = "deepseek2";

// The keys under "deepseek2." that ReadDeepseek2Config reads.
constexpr std::string_view kReadKeys[] = {"context_length",
                                          "embedding_length",
                                          "feed_forward_length",
                                          "block_count",
                                          "vocab_size",
                                          "attention.head_count",
                                          "attention.head_count_kv",
                                          "attention.key_length",
                                          "attention.value_length",
                                          "attention.key_length_mla",
                                          "attention.value_length_mla",
                                          "attention.q_lora_rank",
                                          "attention.kv_lora_rank",
                                          "attention.layer_norm_rms_epsilon",
                                          "rope.freq_base",
                                          "rope.dimension_count",
                                          "rope.scaling.type",
                                          "rope.scaling.factor",
                                          "rope.scaling.original_context_length",
                                          "rope.scaling.yarn_log_multiplier",
                                          "rope.scaling.yarn_beta_fast",
                                          "rope.scaling.yarn_beta_slow",
                                          "leading_dense_block_count",
                                          "expert_count",
                                          "expert_used_count",
                                          "expert_shared_count",
                                          "expert_feed_forward_length",
                                          "expert_weights_scale",
                                          "expert_weights_norm",
                                          "expert_gating_func",
                                          "expert_group_count",
                                          "expert_group_used_count"};

// llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID and _SOFTMAX.
constexpr int kSigmoidGating = 2;
constexpr int kSoftmaxGating = 1;

// The GGUF key of each config.json key that FindDeepseekConfigFault may name.
constexpr std::pair<std::string_view, std::string_view> kFaultKeys[] = {
    {"qk_rope_head_dim", "rope.dimension_count"},
    {"kv_lora_rank", "attention.kv_lora_rank"},
    {"n_group", "expert_group_count"},
    {"topk_group", "expert_group_used_count"},
    {"num_experts_per_tok", "expert_used_count"},
    {"first_k_dense_replace", "leading_dense_block_count"},
    {"routed_scaling_factor", "expert_weights_scale"},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon"}};

// RoPE scaling: none, or YaRN as transformers runs DeepSeek's (the network's HF table). The
// converter writes yarn_log_multiplier as 0.1 * mscale_all_dim and no mscale; llama.cpp takes
// mscale equal to mscale_all_dim for this architecture (both 1 in DeepSeek-V3, 0.707 in V2-Lite),
// so cos and sin keep their size and q . k scales by mscale_all_dim's mscale squared.
Status ReadYarn(const GgufFile& f, const std::string& a, DeepseekV3Config& c) {
  const std::string type_key = a + "rope.scaling.type";
  if (f.Find(type_key) == nullptr) return Status::Ok();
  Expected<std::string> type = f.GetString(type_key);
  if (!type.ok()) return type.status();
  if (*type == "none") return Status::Ok();
  if (*type != "yarn") {
    return HparamError(f, type_key, *type, "ctxpar runs DeepSeek's RoPE unscaled or with YaRN");
  }
  DeepseekV3Config::Yarn y;
  CTXPAR_ASSIGN_OR_RETURN(
      const float factor,
      ReadFloatHparam(f, a + "rope.scaling.factor", {1.0, 1e6, false, false, "in [1, 1e6]"}));
  y.factor = factor;
  CTXPAR_ASSIGN_OR_RETURN(y.original_max_position_embeddings,
                          ReadIntHparam(f, a + "rope.scaling.original_context_length", 1, 1 << 30));
  CTXPAR_ASSIGN_OR_RETURN(const float fast,
                          ReadFloatHparam(f, a + "rope.scaling.yarn_beta_fast",
                                          {0.0, 1e6, true, false, "in (0, 1e6]"}, 32.0f));
  CTXPAR_ASSIGN_OR_RETURN(const float slow,
                          ReadFloatHparam(f, a + "rope.scaling.yarn_beta_slow",
                                          {0.0, 1e6, true, false, "in (0, 1e6]"}, 1.0f));
  CTXPAR_ASSIGN_OR_RETURN(const float log_mul,
                          ReadFloatHparam(f, a + "rope.scaling.yarn_log_multiplier",
                                          {0.0, 10.0, false, false, "in [0, 10]"}, 0.0f));
  y.beta_fast = fast;
  y.beta_slow = slow;
  y.mscale = y.mscale_all_dim = log_mul * 10.0f;
  c.yarn = y;
  return Status::Ok();
}

Expected<DeepseekV3Config> ReadDeepseek2Config(const GgufFile& f) {
  const std::string a = std::string(kArch) + ".";
  auto positive = [&](const char* key) { return ReadIntHparam(f, a + key, 1, 1 << 30); };
  DeepseekV3Config c;
  // The network of transformers' DeepseekV3ForCausalLM, as the HF path names it. RoPE frequencies
  // in fp32, as llama.cpp computes them (the file does not say what dtype the model ran in).
  c.architecture = "DeepseekV3ForCausalLM";
  c.dtype = DataType::kF32;
  CTXPAR_ASSIGN_OR_RETURN(c.hidden_size, positive("embedding_length"));
  CTXPAR_ASSIGN_OR_RETURN(c.num_hidden_layers, positive("block_count"));
  CTXPAR_ASSIGN_OR_RETURN(c.num_attention_heads, positive("attention.head_count"));
  c.num_key_value_heads = c.num_attention_heads;
  CTXPAR_ASSIGN_OR_RETURN(const int kv_heads, positive("attention.head_count_kv"));
  if (kv_heads != 1) {
    return HparamError(f, a + "attention.head_count_kv", kv_heads,
                       "MLA stores one latent head per token: the converter writes 1");
  }
  CTXPAR_ASSIGN_OR_RETURN(c.intermediate_size, positive("feed_forward_length"));
  CTXPAR_ASSIGN_OR_RETURN(c.max_position_embeddings, positive("context_length"));
  CTXPAR_ASSIGN_OR_RETURN(
      const float eps,
      ReadFloatHparam(f, a + "attention.layer_norm_rms_epsilon", kRmsEpsilonRange));
  c.rms_norm_eps = eps;
  CTXPAR_ASSIGN_OR_RETURN(const float theta,
                          ReadFloatHparam(f, a + "rope.freq_base", kRopeFreqBaseRange, 10000.0f));
  c.rope_theta = theta;
  CTXPAR_RETURN_IF_ERROR(ReadYarn(f, a, c));
  // Absent: no q LoRA (DeepSeek-V2-Lite's attn_q).
  CTXPAR_ASSIGN_OR_RETURN(c.q_lora_rank,
                          ReadIntHparam(f, a + "attention.q_lora_rank", 1, 1 << 30, 0));
  CTXPAR_ASSIGN_OR_RETURN(c.kv_lora_rank, positive("attention.kv_lora_rank"));
  CTXPAR_ASSIGN_OR_RETURN(c.qk_rope_head_dim, positive("rope.dimension_count"));
  CTXPAR_ASSIGN_OR_RETURN(const int qk_head_dim, positive("attention.key_length_mla"));
  if (qk_head_dim <= c.qk_rope_head_dim) {
    return HparamError(f, a + "attention.key_length_mla", qk_head_dim,
                       fmt::format("it must exceed rope.dimension_count ({}): it is "
                                   "qk_nope_head_dim + qk_rope_head_dim",
                                   c.qk_rope_head_dim));
  }
  c.qk_nope_head_dim = qk_head_dim - c.qk_rope_head_dim;
  CTXPAR_ASSIGN_OR_RETURN(c.v_head_dim, positive("attention.value_length_mla"));
  // The converter's MQA view of the absorbed form: one head of [latent | rope], V the latent.
  const int latent = c.kv_lora_rank + c.qk_rope_head_dim;
  CTXPAR_ASSIGN_OR_RETURN(const int key_length, positive("attention.key_length"));
  if (key_length != latent) {
    return HparamError(f, a + "attention.key_length", key_length,
                       fmt::format("it must be kv_lora_rank + rope.dimension_count ({})", latent));
  }
  CTXPAR_ASSIGN_OR_RETURN(const int value_length, positive("attention.value_length"));
  if (value_length != c.kv_lora_rank) {
    return HparamError(f, a + "attention.value_length", value_length,
                       fmt::format("it must be kv_lora_rank ({})", c.kv_lora_rank));
  }
  CTXPAR_ASSIGN_OR_RETURN(c.first_k_dense_replace,
                          ReadIntHparam(f, a + "leading_dense_block_count", 0, 1 << 30, 0));
  CTXPAR_ASSIGN_OR_RETURN(c.n_routed_experts, ReadIntHparam(f, a + "expert_count", 1, 1 << 16));
  CTXPAR_ASSIGN_OR_RETURN(c.num_experts_per_tok,
                          ReadIntHparam(f, a + "expert_used_count", 1, c.n_routed_experts));
  CTXPAR_ASSIGN_OR_RETURN(c.n_shared_experts,
                          ReadIntHparam(f, a + "expert_shared_count", 0, 1 << 16, 0));
  CTXPAR_ASSIGN_OR_RETURN(c.moe_intermediate_size, positive("expert_feed_forward_length"));
  CTXPAR_ASSIGN_OR_RETURN(c.n_group, ReadIntHparam(f, a + "expert_group_count", 1, 1 << 16, 1));
  CTXPAR_ASSIGN_OR_RETURN(c.topk_group,
                          ReadIntHparam(f, a + "expert_group_used_count", 1, 1 << 16, 1));
  CTXPAR_ASSIGN_OR_RETURN(
      const float scale,
      ReadFloatHparam(f, a + "expert_weights_scale", {0.0, 1e6, true, false, "in (0, 1e6]"}, 1.0f));
  c.routed_scaling_factor = scale;
  if (f.Find(a + "expert_weights_norm") != nullptr) {
    CTXPAR_ASSIGN_OR_RETURN(c.norm_topk_prob, f.GetBool(a + "expert_weights_norm"));
  }
  // Absent: DeepSeek-V2's softmax, as llama.cpp reads such a file.
  CTXPAR_ASSIGN_OR_RETURN(const int gating,
                          ReadIntHparam(f, a + "expert_gating_func", 0, 1 << 30, kSoftmaxGating));
  if (gating != kSigmoidGating && gating != kSoftmaxGating) {
    return HparamError(f, a + "expert_gating_func", gating,
                       "ctxpar runs DeepSeek-V2's softmax (1) and DeepSeek-V3's sigmoid (2) "
                       "routers");
  }
  c.softmax_router = gating == kSoftmaxGating;
  CTXPAR_ASSIGN_OR_RETURN(c.vocab_size, model::GgufVocabSize(f, c.hidden_size));
  c.tie_word_embeddings = !f.FindTensor("output.weight").ok();
  if (const std::optional<DeepseekConfigFault> fault = FindDeepseekConfigFault(c)) {
    std::string_view key = fault->key;
    for (const auto& [hf, gguf] : kFaultKeys) {
      if (hf == fault->key) key = gguf;
    }
    return HparamError(f, a + std::string(key),
                       std::visit([](auto v) { return fmt::format("{}", v); }, fault->value),
                       fault->rule);
  }
  return c;
}

// HF weight names (DeepseekTensors) and the GGUF tensors that hold them.
constexpr std::pair<std::string_view, std::string_view> kGlobalNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"}};
// Under "model.layers.<l>." and "blk.<l>."; the routed experts' names without their index.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj.weight", "attn_k_b.weight"},  // with attn_v_b.weight
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.experts.gate_proj.weight", "ffn_gate_exps.weight"},
    {"mlp.experts.up_proj.weight", "ffn_up_exps.weight"},
    {"mlp.experts.down_proj.weight", "ffn_down_exps.weight"}};
constexpr std::string_view kValueHalf = "attn_v_b.weight";

// Where a HF weight lies in the file: a tensor (for a routed expert, its block `expert`), or
// kv_b_proj's two halves.
struct Slot {
  std::string tensor;
  std::string v_tensor;  // kv_b_proj: attn_v_b
  int64_t expert = -1;
};

std::string Dims(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

Expected<Slot> Locate(std::string_view name) {
  for (const auto& [hf, gguf] : kGlobalNames) {
    if (hf == name) return Slot{.tensor = std::string(gguf), .v_tensor = {}};
  }
  constexpr std::string_view kLayers = "model.layers.";
  if (name.starts_with(kLayers)) {
    std::string_view rest = name.substr(kLayers.size());
    int layer = -1;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
    if (ec == std::errc() && end != rest.data() + rest.size() && *end == '.') {
      const std::string blk = fmt::format("blk.{}.", layer);
      rest = rest.substr(end - rest.data() + 1);
      Slot slot;
      std::string key(rest);
      constexpr std::string_view kExperts = "mlp.experts.";
      if (rest.starts_with(kExperts)) {
        const std::string_view tail = rest.substr(kExperts.size());
        auto [e_end, e_ec] = std::from_chars(tail.data(), tail.data() + tail.size(), slot.expert);
        if (e_ec == std::errc() && e_end != tail.data() + tail.size() && *e_end == '.') {
          key = std::string(kExperts) + std::string(tail.substr(e_end - tail.data() + 1));
        }
      }
      for (const auto& [hf, gguf] : kLayerNames) {
        if (hf != key) continue;
        slot.tensor = blk + std::string(gguf);
        if (gguf == "attn_k_b.weight") slot.v_tensor = blk + std::string(kValueHalf);
        return slot;
      }
    }
  }
  return NotFound(fmt::format("no deepseek2 tensor holds the weight '{}'", name));
}

// A deepseek2 file's tensors as the HF weights they hold, dequantized to fp32 when read.
class GgufDeepseekWeights final : public DeepseekWeights {
 public:
  explicit GgufDeepseekWeights(std::shared_ptr<const GgufFile> file) : f_(std::move(file)) {}

  const std::string& path() const override { return f_->path(); }

  Expected<std::vector<int64_t>> Shape(const std::string& name) const override {
    CTXPAR_ASSIGN_OR_RETURN(const Slot slot, Locate(name));
    CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f_->FindTensor(slot.tensor));
    const std::vector<int64_t>& ne = t->shape;
    if (!slot.v_tensor.empty()) {
      CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* v, f_->FindTensor(slot.v_tensor));
      // k_b [nope, lora, H] and v_b [lora, v, H] (ne) of one kv_lora_rank and head count.
      if (ne.size() != 3 || v->shape.size() != 3 || ne[1] != v->shape[0] || ne[2] != v->shape[2]) {
        return model::TensorError(
            *f_, slot.tensor,
            fmt::format("has ne {} beside {} of ne {}: they must be [nope, kv_lora_rank, heads] "
                        "and [kv_lora_rank, v_head_dim, heads]",
                        Dims(ne), slot.v_tensor, Dims(v->shape)));
      }
      return std::vector<int64_t>{ne[2] * (ne[0] + v->shape[1]), ne[1]};
    }
    if (slot.expert >= 0) {
      if (ne.size() != 3 || slot.expert >= ne[2]) {
        return model::TensorError(
            *f_, slot.tensor,
            fmt::format("has ne {}, which holds no expert {}", Dims(ne), slot.expert));
      }
      return std::vector<int64_t>{ne[1], ne[0]};
    }
    return std::vector<int64_t>(ne.rbegin(), ne.rend());
  }

  Status Read(const std::string& name, int64_t first, int64_t count, float* out) const override {
    CTXPAR_ASSIGN_OR_RETURN(const Slot slot, Locate(name));
    CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f_->FindTensor(slot.tensor));
    CTXPAR_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, Shape(name));
    int64_t size = 1;
    for (int64_t dim : shape) size *= dim;
    if (first < 0 || count < 0 || first > size - count) {
      return OutOfRange(fmt::format("elements [{}, {}+{}) are not inside weight '{}' of {}", first,
                                    first, count, name, size));
    }
    if (!slot.v_tensor.empty()) {
      CTXPAR_ASSIGN_OR_RETURN(const std::vector<float> kv_b, KvB(*t, slot.v_tensor));
      std::copy_n(kv_b.begin() + first, count, out);
      return Status::Ok();
    }
    // A routed expert's rows follow the experts before it in the merged tensor.
    const int64_t cols = t->row_length();
    const int64_t base = slot.expert >= 0 ? slot.expert * t->shape[1] : 0;
    const int64_t row0 = first / cols, rows = (first + count + cols - 1) / cols - row0;
    if (first % cols == 0 && count % cols == 0) return DequantizeRows(*t, base + row0, rows, out);
    std::vector<float> buf(rows * cols);
    CTXPAR_RETURN_IF_ERROR(DequantizeRows(*t, base + row0, rows, buf.data()));
    std::copy_n(buf.begin() + (first - row0 * cols), count, out);
    return Status::Ok();
  }

  Status ShapeError(const std::string& name, const std::vector<int64_t>* have,
                    const std::vector<int64_t>& want) const override {
    if (have == nullptr) return Shape(name).status();
    const Slot slot = *Locate(name);
    std::string what = slot.tensor;
    if (!slot.v_tensor.empty()) what += " and " + slot.v_tensor + " (kv_b_proj reassembled)";
    if (slot.expert >= 0) what += fmt::format(" (expert {})", slot.expert);
    return model::TensorError(*f_, what,
                              fmt::format("has rows x columns {} (ggml's ne reversed), where the "
                                          "hyperparameters make it {}",
                                          Dims(*have), Dims(want)));
  }

 private:
  // kv_b_proj [H * (nope + v), lora] from k_b (per head [lora, nope]: W_UK transposed) and v_b
  // (per head [v, lora]: W_UV).
  Expected<std::vector<float>> KvB(const GgufTensor& k, const std::string& v_name) const {
    CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* v, f_->FindTensor(v_name));
    const int64_t nope = k.shape[0], lora = k.shape[1], heads = k.shape[2], dv = v->shape[1];
    CTXPAR_ASSIGN_OR_RETURN(const std::vector<float> k_b, DequantizeTensor(k));
    CTXPAR_ASSIGN_OR_RETURN(const std::vector<float> v_b, DequantizeTensor(*v));
    std::vector<float> kv_b(heads * (nope + dv) * lora);
    for (int64_t h = 0; h < heads; ++h) {
      float* head = kv_b.data() + h * (nope + dv) * lora;
      for (int64_t n = 0; n < nope; ++n) {
        for (int64_t r = 0; r < lora; ++r) head[n * lora + r] = k_b[(h * lora + r) * nope + n];
      }
      std::copy_n(v_b.begin() + h * dv * lora, dv * lora, head + nope * lora);
    }
    return kv_b;
  }

  std::shared_ptr<const GgufFile> f_;
};

// Every tensor is one the network reads for its layer (a dense layer holds no experts, a MoE
// layer no dense MLP), of a type DequantizeRow takes, finite (CheckGgufTensors' scan).
Status CheckFileTensors(const GgufFile& f, const DeepseekV3Config& c) {
  std::vector<std::string_view> globals, per_layer = {kValueHalf};
  for (const auto& [hf, gguf] : kGlobalNames) globals.push_back(gguf);
  for (const auto& [hf, gguf] : kLayerNames) per_layer.push_back(gguf);
  CTXPAR_RETURN_IF_ERROR(
      model::CheckGgufTensors(f, kArch, c.num_hidden_layers, globals, per_layer));
  std::set<std::string> read;
  for (const DeepseekTensor& t : DeepseekTensors(c)) {
    CTXPAR_ASSIGN_OR_RETURN(const Slot slot, Locate(t.name));
    read.insert(slot.tensor);
    if (!slot.v_tensor.empty()) read.insert(slot.v_tensor);
  }
  for (const GgufTensor& t : f.tensors()) {
    if (!read.contains(t.name)) {
      return model::TensorError(
          f, t.name,
          fmt::format("is not read by ctxpar's {} with these hyperparameters (the first {} "
                      "layers dense, the others MoE; output.weight absent when tied): it would "
                      "be ignored",
                      kArch, c.first_k_dense_replace));
    }
    if (!GetGgmlTypeTraits(t.type).dequantizable) {
      return model::TensorError(
          f, t.name,
          fmt::format("has ggml type {}, which ctxpar does not dequantize", GgmlTypeName(t.type)));
    }
  }
  return Status::Ok();
}

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenDeepseek2Source(const std::string& path,
                                                           std::shared_ptr<const GgufFile> file) {
  CTXPAR_ASSIGN_OR_RETURN(DeepseekV3Config c, ReadDeepseek2Config(*file));
  CTXPAR_RETURN_IF_ERROR(
      model::CheckGgufKeys(*file, c.architecture, std::string(kArch) + ".", kReadKeys));
  CTXPAR_RETURN_IF_ERROR(CheckFileTensors(*file, c));
  auto weights = std::make_shared<const GgufDeepseekWeights>(file);
  CTXPAR_RETURN_IF_ERROR(CheckDeepseekTensors(*weights, c));
  CTXPAR_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(*file));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsEndOfGeneration(id)) c.eos_token_ids.push_back(id);
  }
  return NewDeepseekSource(path, std::move(weights), std::move(c), std::move(tokenizer));
}

}  // namespace ctxpar
