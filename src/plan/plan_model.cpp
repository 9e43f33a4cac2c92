// PlanModel's parameter counts, checkpoints as planner models, and this machine from JSON.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ctxpar/error_catalog.h"
#include "ctxpar/plan.h"

namespace ctxpar::plan {

namespace {

double AttentionParams(const PlanModel& m) {
  const double h = m.hidden, H = m.num_heads;
  if (m.mla) {
    const double qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    return h * m.q_lora_rank + m.q_lora_rank * H * qk + h * (m.kv_lora_rank + m.qk_rope_head_dim) +
           m.kv_lora_rank * H * (m.qk_nope_head_dim + m.head_dim) + H * m.head_dim * h;
  }
  return h * H * m.head_dim * 2 + h * m.num_kv_heads * m.head_dim * 2.0;
}

// Parameters of the MLPs of all layers with `routed` experts per MoE layer.
double MlpParams(const PlanModel& m, int routed) {
  const double dense = 3.0 * m.hidden * m.ffn * m.dense_layers;
  const int moe_layers = m.num_layers - m.dense_layers;
  const double expert = 3.0 * m.hidden * m.expert_ffn;
  return dense + moe_layers * (expert * (routed + m.shared_experts) + double(m.hidden) * m.experts);
}

double EmbeddingParams(const PlanModel& m) {
  return double(m.vocab) * m.hidden * (m.tied_embeddings ? 1 : 2);
}

int64_t FileBytes(const std::filesystem::path& p) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(p, ec)) return int64_t(std::filesystem::file_size(p, ec));
  int64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(p, ec)) {
    if (e.path().extension() == ".safetensors") bytes += int64_t(e.file_size(ec));
  }
  return bytes;
}

}  // namespace

double PlanModel::TotalParams() const {
  return EmbeddingParams(*this) + num_layers * AttentionParams(*this) + MlpParams(*this, experts);
}

double PlanModel::ActiveParams() const {
  return EmbeddingParams(*this) + num_layers * AttentionParams(*this) +
         MlpParams(*this, experts_per_token);
}

double PlanModel::QProjParams() const {
  const double per_layer =
      mla ? double(q_lora_rank) * num_heads * (qk_nope_head_dim + qk_rope_head_dim)
          : double(hidden) * num_heads * head_dim;
  return per_layer * num_layers;
}

Expected<PlanModel> CheckpointModel(const std::string& path) {
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> opened, OpenModelSource(path));
  std::shared_ptr<const ModelSource> source(std::move(opened));
  PlanModel m;
  m.name = std::filesystem::path(path).filename().string();
  m.source = path;
  m.info = source->info();
  m.desc = source->desc();
  m.kv_spec = [source](const EngineConfig& c) { return source->KvSpecFor(c); };
  m.checkpoint = source;
  static_cast<ModelShape&>(m) = source->shape();
  m.weight_bytes = double(FileBytes(path));
  return m;
}

Expected<Hardware> HardwareFromJson(std::string_view json_text, const std::string& origin) {
  using Json = nlohmann::json;
  const Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](std::string_view field, std::string_view problem) {
    return CatalogError(
        "CTXPAR-PLAN-003",
        {{"origin", origin}, {"field", std::string(field)}, {"problem", std::string(problem)}});
  };
  if (j.is_discarded() || !j.is_object())
    return bad("(the file)", "the text is not one JSON object");
  Hardware h;
  h.cpu = true;
  h.name = j.value("name", std::string("this machine"));
  h.source = origin;
  h.platform = ProbePlatform();
  struct Field {
    std::string_view key;
    double* out;
    bool required;
  };
  const Field fields[] = {
      {"memory_gib", &h.memory_gib, true},
      {"mem_gbps", &h.mem_gbps, true},
      {"flops", &h.flops, true},
      {"flops_small", &h.flops_small, false},
      {"attn_gbps", &h.attn_gbps, false},
      {"link_latency_us", &h.link_latency_us, false},
      {"link_latency_per_rank_us", &h.link_latency_per_rank_us, false},
      {"link_gbps", &h.link_gbps, false},
      {"oneside_latency_us", &h.oneside_latency_us, false},
      {"net_gbps", &h.net_gbps, false},
      {"net_latency_us", &h.net_latency_us, false},
  };
  for (const Field& f : fields) {
    const std::string key(f.key);
    if (!j.contains(key)) {
      if (f.required) return bad(key, "it is missing");
      continue;
    }
    if (!j[key].is_number() || !(j[key].get<double>() >= 0)) {
      return bad(key, fmt::format("it must be a number >= 0, got {}", j[key].dump()));
    }
    *f.out = j[key].get<double>();
  }
  // A curve: [x, y] pairs, x integers ascending from 1, y > 0 (or >= 0).
  auto curve = [&](const std::string& key, std::string_view x, bool zero_ok,
                   std::vector<std::pair<int, double>>& out) -> Status {
    if (!j.contains(key)) return Status::Ok();
    const std::string rule =
        fmt::format("a list of [{}, value] pairs, {} ascending from 1, value {}", x, x,
                    zero_ok ? ">= 0" : "> 0");
    const Json& c = j[key];
    if (!c.is_array() || c.empty()) return bad(key, rule);
    for (const Json& p : c) {
      if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number() ||
          p[0].get<int>() < 1 ||
          !(p[1].get<double>() > 0 || (zero_ok && p[1].get<double>() == 0)) ||
          (!out.empty() && p[0].get<int>() <= out.back().first)) {
        return bad(key, fmt::format("{}, got {}", rule, p.dump()));
      }
      out.emplace_back(p[0].get<int>(), p[1].get<double>());
    }
    return Status::Ok();
  };
  CTXPAR_RETURN_IF_ERROR(curve("flops_curve", "rows", false, h.flops_curve));
  CTXPAR_RETURN_IF_ERROR(curve("step_cost_us", "sequences", true, h.step_cost_us));
  // One efficiency for every step, or a curve by the step's tokens.
  if (const auto e = j.find("flops_efficiency"); e != j.end() && e->is_number()) {
    if (!(e->get<double>() > 0)) {
      return bad("flops_efficiency", fmt::format("it must be positive, got {}", e->dump()));
    }
    h.flops_efficiency = {{64, e->get<double>()}};
  } else if (e != j.end()) {
    h.flops_efficiency.clear();
    CTXPAR_RETURN_IF_ERROR(curve("flops_efficiency", "tokens", false, h.flops_efficiency));
  }
  for (const char* gone : {"step_overhead_us", "per_seq_us"}) {
    if (j.contains(gone)) {
      return bad(gone, "it is replaced by step_cost_us: run bench/plan/this_machine.py again");
    }
  }
  if (!(h.mem_gbps > 0) || !(h.flops > 0) || !(h.memory_gib > 0)) {
    return bad("mem_gbps, flops and memory_gib", "they must be positive");
  }
  if (h.link_gbps == 0) h.link_gbps = h.mem_gbps;
  h.tp_collectives_per_layer = 4;
  // Hosts of `host_ranks` ranks joined by a network (net_gbps, net_latency_us): a collective
  // over more ranks than one host holds crosses it. Absent: every rank on this one host.
  h.domain_devices = 1 << 20;
  if (const auto r = j.find("host_ranks"); r != j.end()) {
    if (!r->is_number_integer() || r->get<int64_t>() < 1 || r->get<int64_t>() > (1 << 20)) {
      return bad("host_ranks", fmt::format("it must be an integer >= 1, got {}", r->dump()));
    }
    if (!(h.net_gbps > 0)) return bad("net_gbps", "it must be positive when host_ranks is given");
    h.domain_devices = r->get<int>();
  }
  return h;
}

}  // namespace ctxpar::plan
