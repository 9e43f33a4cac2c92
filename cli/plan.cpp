// `ctxpar plan`: the launch configuration chosen by simulating the engine (plan.h).
#include "ctxpar/plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_ceilings.h"
#include "command.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/launch.h"
#include "error_report.h"
#include "launch_flags.h"

namespace ctxpar::cli {
namespace {

using Json = nlohmann::ordered_json;
using plan::Candidate;

// "N" or "LO:HI".
Expected<plan::LengthRange> ParseLength(std::string_view flag, const std::string& text) {
  plan::LengthRange r;
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    r.lo = std::stoll(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon)) throw std::invalid_argument("");
    r.hi = r.lo;
    if (colon != std::string::npos) {
      const std::string hi = text.substr(colon + 1);
      r.hi = std::stoll(hi, &used);
      if (used != hi.size()) throw std::invalid_argument("");
    }
  } catch (const std::exception&) {
    return CatalogError("CTXPAR-PLAN-004", {{"field", std::string(flag)},
                                            {"value", text},
                                            {"rule", "a length N or a range LO:HI of integers"}});
  }
  return r;
}

// This machine's read ceiling and FMA peak, measured now, when no --hardware-json describes it.
plan::Hardware MeasureThisMachine() {
  const CpuIsa isa = BestCpuIsa(DetectCpuFeatures());
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  plan::Hardware h;
  h.cpu = true;
  h.name = "this machine (measured now)";
  h.source = "ctxpar plan's own read ceiling and FMA peak";
  h.platform = ProbePlatform();
  h.mem_gbps = MeasureReadCeiling(threads, size_t{256} << 20, 3, isa).wall;
  h.flops = MeasureComputePeak(threads, isa, false, 2).wall * 1e9;
  h.memory_gib = 0;
  h.link_gbps = h.mem_gbps;
  h.domain_devices = 1 << 20;
  h.tp_collectives_per_layer = 4;
  return h;
}

Json CandidateJson(const Candidate& c, int rank) {
  Json j = {{"rank", rank},
            {"flags", c.flags},
            {"tp_size", c.tp_size},
            {"dcp_size", c.dcp_size},
            {"dcp_comm_backend", c.backend},
            {"dcp_replicate_q_proj", c.replicate_q ? Json(*c.replicate_q) : Json(nullptr)}};
  if (!c.refused.ok()) {
    j.erase("rank");
    j["error"] = {{"id", c.refused_id}, {"message", c.refused.message()}};
    return j;
  }
  const plan::SimResult& s = c.sim;
  j.update({{"max_total_num_tokens", c.max_total_num_tokens},
            {"num_pages", c.pool.num_pages},
            {"page_size", c.pool.page_size},
            {"max_running_requests", c.pool.max_slots},
            {"chunked_prefill_size", c.config.chunked_prefill_size},
            {"fits_at_once", c.fits_at_once},
            {"weights_gib_per_rank", c.weights_gib_per_rank},
            {"kv_gib_per_rank", c.kv_gib_per_rank},
            {"steps", s.steps},
            {"peak_batch", s.peak_batch},
            {"retractions", s.retractions},
            {"decode_step_ms", s.decode_step_ms},
            {"ttft_ms_p50", s.ttft_ms_p50},
            {"ttft_ms_p90", s.ttft_ms_p90},
            {"itl_ms_p50", s.itl_ms_p50},
            {"itl_ms_p90", s.itl_ms_p90},
            {"output_tokens_per_s", s.output_tokens_per_s},
            {"output_tokens_per_s_per_device", s.output_tokens_per_s / c.tp_size},
            {"requests_per_s", s.requests_per_s},
            {"duration_s", s.duration_s},
            {"meets_slo", c.meets_slo}});
  if (c.plain) {
    j["spec_accept_length"] = s.accept_length;
    j["without_speculation"] = {{"decode_step_ms", c.plain->decode_step_ms},
                                {"ttft_ms_p50", c.plain->ttft_ms_p50},
                                {"itl_ms_p50", c.plain->itl_ms_p50},
                                {"itl_ms_p90", c.plain->itl_ms_p90},
                                {"output_tokens_per_s", c.plain->output_tokens_per_s}};
    j["speculation_gain"] = s.output_tokens_per_s / c.plain->output_tokens_per_s;
  }
  return j;
}

void PrintTable(const plan::PlanModel& m, const plan::Hardware& hw, const plan::PlanReport& r,
                const plan::Workload& w, int devices) {
  std::printf("model: %s (%s; %.3g B parameters, %.3g B active)\n", m.name.c_str(),
              m.desc.architecture.c_str(), m.TotalParams() / 1e9, m.ActiveParams() / 1e9);
  std::printf("hardware: %d x %s (%s)\n", devices, hw.name.c_str(), hw.platform.Spec().c_str());
  std::printf("workload: input %lld:%lld, output %lld:%lld, %s\n\n",
              static_cast<long long>(w.input.lo), static_cast<long long>(w.input.hi),
              static_cast<long long>(w.output.lo), static_cast<long long>(w.output.hi),
              w.concurrency > 0 ? ("concurrency " + std::to_string(w.concurrency)).c_str()
                                : ("rate " + std::to_string(w.request_rate) + "/s").c_str());
  // Under speculation: tokens per verify step, and output tokens/s against the same candidate
  // without it (below 1: speculation does not pay).
  const bool spec = w.spec_accept_rate.has_value();
  std::printf("%-4s %-72s %12s %6s %5s %8s %10s %8s %9s %4s%s\n", "rank", "flags", "KV tokens",
              "fits", "peak", "step ms", "TTFT p50", "ITL p50", "out tok/s", "SLO",
              spec ? "  accept  vs plain" : "");
  int rank = 1;
  for (const Candidate& c : r.ranked) {
    std::printf("%-4d %-72s %12lld %6lld %5d %8.2f %10.1f %8.2f %9.1f %4s", rank++, c.flags.c_str(),
                static_cast<long long>(c.max_total_num_tokens),
                static_cast<long long>(c.fits_at_once), c.sim.peak_batch, c.sim.decode_step_ms,
                c.sim.ttft_ms_p50, c.sim.itl_ms_p50, c.sim.output_tokens_per_s,
                c.meets_slo ? "yes" : "no");
    if (c.plain) {
      std::printf("  %6.2f %7.2fx", c.sim.accept_length,
                  c.sim.output_tokens_per_s / c.plain->output_tokens_per_s);
    }
    std::printf("\n");
  }
  if (!r.refused.empty()) std::printf("\nrefused:\n");
  for (const Candidate& c : r.refused) {
    std::printf("  %-72s %s: %s\n", c.flags.c_str(), c.refused_id.c_str(),
                c.refused.message().c_str());
  }
}

int RunPlan(const std::vector<std::string>& args) {
  CLI::App app{"Choose a launch configuration by simulating the engine's scheduler.",
               "ctxpar plan"};
  LaunchFlags flags;
  AddLaunchFlags(app, &flags);
  std::string hardware, hardware_json, input = "1024", output = "128";
  std::optional<int> gpus;
  plan::Workload w;
  std::optional<double> mem_fraction;
  bool json = false;
  app.add_option("--hardware", hardware, "h100, h200, b200, gb200-nvl72 or mi300x.");
  app.add_option("--hardware-json", hardware_json,
                 "This machine's measured rates (bench/plan/this_machine.py).");
  app.add_option("--gpus", gpus, "Devices (tp_size); default --tp-size.");
  app.add_option("--input-len", input, "Prompt tokens: N or LO:HI (uniform).");
  app.add_option("--output-len", output, "Output tokens: N or LO:HI (uniform).");
  app.add_option("--concurrency", w.concurrency, "Requests kept in flight (closed loop).");
  app.add_option("--request-rate", w.request_rate, "Poisson arrivals per second (open loop).");
  app.add_option("--num-requests", w.num_requests, "Requests (default 4 x concurrency, >= 16).");
  app.add_option("--ttft-slo-ms", w.ttft_slo_ms, "TTFT objective on the p90.");
  app.add_option("--itl-slo-ms", w.itl_slo_ms, "Inter-token latency objective on the p90.");
  app.add_option(
      "--speculative-accept-rate", w.spec_accept_rate,
      "With --speculative-algorithm NGRAM: the chance that a drafted token is accepted.");
  app.add_option("--seed", w.seed, "Seed of the lengths and arrivals.");
  app.add_option("--mem-fraction-static", mem_fraction,
                 "GPUs: the share of memory for weights and KV (default 0.85).");
  app.add_flag("--json", json, "Print one JSON object (docs/plan.schema.json).");
  Status status;
  if (int rc = ParseCommandLine(app, args, "plan", &status); rc >= 0) {
    return rc == kExitOk ? rc : ReportError(status);
  }
  const auto start = std::chrono::steady_clock::now();
  Expected<LaunchConfig> raw = ToLaunchConfig(flags);
  if (!raw.ok()) return ReportError(raw.status());
  Expected<plan::LengthRange> in = ParseLength("--input-len", input);
  if (!in.ok()) return ReportError(in.status());
  Expected<plan::LengthRange> out = ParseLength("--output-len", output);
  if (!out.ok()) return ReportError(out.status());
  w.input = *in;
  w.output = *out;
  // A closed loop of one when neither is given; a given 0 is refused by CheckWorkload.
  if (app.count("--concurrency") == 0 && app.count("--request-rate") == 0) w.concurrency = 1;

  // --model (SGLang's alias of --model-path) names a preset or a checkpoint: a name without a
  // '/' that is no file here is a preset.
  const std::string path =
      raw->given("model_path") ? FieldValueStr(raw->raw("model_path")) : DefaultModelPath();
  const bool preset = path.find('/') == std::string::npos && !std::filesystem::exists(path);
  Expected<plan::PlanModel> model = preset ? plan::PresetModel(path) : plan::CheckpointModel(path);
  if (!model.ok()) return ReportError(model.status());
  plan::Hardware hw;
  if (!hardware.empty()) {
    Expected<plan::Hardware> h = plan::PresetHardware(hardware);
    if (!h.ok()) return ReportError(h.status());
    hw = *h;
  } else if (!hardware_json.empty()) {
    std::ifstream file(hardware_json);
    if (!file.is_open()) {
      return ReportError(CatalogError("CTXPAR-PLAN-003", {{"origin", hardware_json},
                                                          {"field", "(the file)"},
                                                          {"problem", "it cannot be opened"}}));
    }
    std::stringstream text;
    text << file.rdbuf();
    Expected<plan::Hardware> h = plan::HardwareFromJson(text.str(), hardware_json);
    if (!h.ok()) return ReportError(h.status());
    hw = *h;
  } else {
    hw = MeasureThisMachine();
  }
  if (mem_fraction) hw.mem_fraction_static = *mem_fraction;
  plan::PlanRequest req;
  req.base = *raw;
  req.devices =
      gpus.value_or(raw->given("tp_size") ? int(std::get<int64_t>(raw->raw("tp_size"))) : 1);
  req.workload = w;
  Expected<plan::PlanReport> report = plan::MakePlan(*model, hw, req);
  if (!report.ok()) return ReportError(report.status());
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // No candidate can serve: the refusals say why, and CTXPAR-PLAN-007 ends the plan.
  Status none;
  if (report->ranked.empty()) {
    none = CatalogError(
        "CTXPAR-PLAN-007",
        {{"devices", std::to_string(req.devices)},
         {"hardware", hw.name},
         {"refused", std::to_string(report->refused.size())},
         {"first", report->refused.empty() ? "-" : report->refused.front().refused_id}});
  }
  if (!json) {
    PrintTable(*model, hw, *report, w, req.devices);
    std::printf("\n%zu candidates simulated, %zu refused, in %.2f s\n", report->ranked.size(),
                report->refused.size(), elapsed);
    std::fflush(stdout);
    return none.ok() ? kExitOk : ReportError(none);
  }
  Json j = {
      {"model",
       {{"name", model->name},
        {"source", model->source},
        {"architecture", model->desc.architecture},
        {"context_length", model->desc.context_length},
        {"num_layers", model->num_layers},
        {"params", model->TotalParams()},
        {"active_params", model->ActiveParams()},
        {"weight_gib", model->weight_bytes / (1024.0 * 1024 * 1024)}}},
      {"hardware",
       {{"name", hw.name},
        {"source", hw.source},
        {"platform", hw.platform.Spec()},
        {"devices", req.devices},
        {"memory_gib", hw.memory_gib},
        {"mem_gbps", hw.mem_gbps},
        {"flops", hw.flops}}},
      {"workload",
       {{"input_len", {w.input.lo, w.input.hi}},
        {"output_len", {w.output.lo, w.output.hi}},
        {"concurrency", w.concurrency},
        {"request_rate", w.request_rate},
        {"num_requests", w.num_requests ? Json(*w.num_requests) : Json(nullptr)},
        {"ttft_slo_ms", w.ttft_slo_ms ? Json(*w.ttft_slo_ms) : Json(nullptr)},
        {"itl_slo_ms", w.itl_slo_ms ? Json(*w.itl_slo_ms) : Json(nullptr)},
        {"speculative_accept_rate", w.spec_accept_rate ? Json(*w.spec_accept_rate) : Json(nullptr)},
        {"seed", w.seed}}},
      {"candidates", Json::array()},
      {"refused", Json::array()},
      {"elapsed_s", elapsed}};
  int rank = 1;
  for (const Candidate& c : report->ranked) j["candidates"].push_back(CandidateJson(c, rank++));
  for (const Candidate& c : report->refused) j["refused"].push_back(CandidateJson(c, 0));
  if (!none.ok()) j["error"] = {{"id", none.error_id()}, {"message", none.message()}};
  std::printf("%s\n", j.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  return none.ok() ? kExitOk : ExitStatusFor(none);
}

}  // namespace

CTXPAR_REGISTER_COMMAND("plan", "choose dcp, backend and Q path by simulating the engine", RunPlan);

}  // namespace ctxpar::cli
