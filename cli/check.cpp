// `ctxpar check [launch flags] [--json]`: parse, resolve and validate a launch configuration.
// Without --model-path it applies SGLang's rules to the flags alone (a dry run for any machine,
// --platform included); with --model-path it runs what generate and serve run before they start
// (PrepareLaunch: the model's own rules, the engine's, the KV pool) and shows
// max_total_num_tokens (and swa_max_total_num_tokens for a model with sliding-window layers).
// The table also shows the matmul kernels this machine runs: fp32 (--dtype float32) and int8
// (--dtype auto); the JSON keeps issue 2's shape.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "command.h"
#include "compute/cpu_compute.h"
#include "ctxpar/config.h"
#include "ctxpar/dtype.h"
#include "ctxpar/launch.h"
#include "launch_flags.h"

namespace ctxpar::cli {
namespace {

int ExitStatus(const Status& status) {
  if (status.ok()) return kExitOk;
  return status.code() == StatusCode::kInternal ? kExitInternal : kExitInvalid;
}

void PrintError(const Status& status) {
  std::fprintf(stderr, "%s\n", status.message().c_str());
  if (!status.error_id().empty()) {
    std::fprintf(stderr, "run: ctxpar explain %s\n", status.error_id().c_str());
  }
}

// launch: set when a model was given (check --model-path runs what generate and serve run).
int Report(bool json, const Status& status, const ResolvedConfig* config, const Platform* platform,
           const Launch* launch = nullptr) {
  if (json) {
    nlohmann::ordered_json out = {
        {"valid", status.ok()}, {"fields", nlohmann::ordered_json::object()}, {"error", nullptr}};
    if (config != nullptr) {
      for (const FieldResolution& f : config->NonDefaultFields()) {
        out["fields"][std::string(f.field->name)] = {
            {"raw", FieldValueJson<nlohmann::ordered_json>(f.raw)},
            {"value", FieldValueJson<nlohmann::ordered_json>(f.value)},
            {"source", f.source}};
      }
    }
    if (launch != nullptr) {
      out["model"] = {{"path", launch->source->path()},
                      {"architecture", launch->source->desc().architecture}};
      out["max_total_num_tokens"] = launch->max_total_num_tokens;
      out["kv_cache_dtype"] = DataTypeName(launch->kv.dtype);
      if (launch->swa_max_total_num_tokens > 0) {
        out["swa_max_total_num_tokens"] = launch->swa_max_total_num_tokens;
      }
      out["max_running_requests"] = launch->config.max_running_requests;
    }
    if (!status.ok()) out["error"] = {{"id", status.error_id()}, {"message", status.message()}};
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return ExitStatus(status);
  }
  if (!status.ok()) {
    PrintError(status);
    return ExitStatus(status);
  }
  std::printf("configuration: valid\nplatform: %s: %s\n", platform->Spec().c_str(),
              platform->description.c_str());
  // The probe is what this machine is; show it too when --platform or CTXPAR_PLATFORM replaced it.
  if (platform->origin != PlatformOrigin::kProbe) {
    std::printf("probe: %s\n", ProbePlatform().description.c_str());
  }
  // The compute seam each --dtype gets here.
  std::printf("kernels (this machine): --dtype float32 [%s], --dtype auto [%s]\n",
              compute::CpuCompute(nullptr, compute::ActFormat::kF32).Describe().c_str(),
              compute::CpuCompute(nullptr, compute::ActFormat::kInt8).Describe().c_str());
  if (launch != nullptr) {
    std::printf(
        "model: %s (%s)\nmax_total_num_tokens: %lld (KV pool: %lld pages of %d tokens "
        "per rank, dcp_size %d, K/V in %s)\nmax_running_requests: %d%s\n",
        launch->source->path().c_str(), launch->source->desc().architecture.c_str(),
        static_cast<long long>(launch->max_total_num_tokens),
        static_cast<long long>(launch->kv.num_pages), launch->kv.page_size, launch->kv.dcp_size,
        std::string(DataTypeName(launch->kv.dtype)).c_str(), launch->config.max_running_requests,
        launch->config.max_running_requests < config->max_running_requests().value_or(0)
            ? " (one per page of the pool at most)"
            : "");
    if (launch->swa_max_total_num_tokens > 0) {
      const KvGroupSpec& window = launch->kv.groups[KvPool::FirstWindowGroup(launch->kv)];
      std::printf(
          "swa_max_total_num_tokens: %lld (sliding-window KV pool of %zu layers with a window of "
          "%d: %lld pages of %d tokens per rank)\n",
          static_cast<long long>(launch->swa_max_total_num_tokens), window.layers.size(),
          window.window, static_cast<long long>(launch->kv.window_pages), launch->kv.page_size);
    }
  }
  const auto fields = config->NonDefaultFields();
  size_t width[3] = {5, 3, 5};
  for (const FieldResolution& f : fields) {
    width[0] = std::max(width[0], f.field->name.size());
    width[1] = std::max(width[1], FieldValueRepr(f.raw).size());
    width[2] = std::max(width[2], FieldValueRepr(f.value).size());
  }
  auto row = [&](std::string_view a, const std::string& b, const std::string& c,
                 const std::string& d) {
    std::printf("  %-*s  %-*s  %-*s  %s\n", static_cast<int>(width[0]), std::string(a).c_str(),
                static_cast<int>(width[1]), b.c_str(), static_cast<int>(width[2]), c.c_str(),
                d.c_str());
  };
  std::printf("\nfields that differ from their defaults:\n");
  row("field", "raw", "value", "source");
  for (const FieldResolution& f : fields) {
    row(f.field->name, FieldValueRepr(f.raw), FieldValueRepr(f.value), f.source);
  }
  return kExitOk;
}

int RunCheck(const std::vector<std::string>& args) {
  CLI::App app{"Parse, resolve and validate a launch configuration (SGLang's flags).",
               "ctxpar check"};
  LaunchFlags flags;
  AddLaunchFlags(app, &flags);
  bool json_flag = false;
  app.add_flag("--json", json_flag, "Print one JSON object: valid, fields, error.")
      ->disable_flag_override();
  // Known before parsing, so that a parse error is reported in the requested form (CLI11 also
  // takes --json=true, which only the parse sees).
  bool json = std::find(args.begin(), args.end(), "--json") != args.end();

  Status status;
  if (int rc = ParseCommandLine(app, args, "check", &status); rc >= 0) {
    return rc == kExitOk ? rc : Report(json, status, nullptr, nullptr);
  }
  json = json || json_flag;
  Expected<LaunchConfig> raw = ToLaunchConfig(flags);
  if (!raw.ok()) return Report(json, raw.status(), nullptr, nullptr);
  Expected<Platform> platform = PlatformForLaunch(*raw);
  if (!platform.ok()) return Report(json, platform.status(), nullptr, nullptr);
  if (raw->given("model_path")) {
    Expected<Launch> launch = PrepareLaunch(*raw);
    if (!launch.ok()) return Report(json, launch.status(), nullptr, nullptr);
    return Report(json, Status::Ok(), &launch->resolved, &launch->platform, &*launch);
  }
  ResolveOutcome outcome = ResolveWithTrace(*raw, *platform, nullptr);
  return Report(json, outcome.status, &outcome.config, &*platform);
}

}  // namespace

CTXPAR_REGISTER_COMMAND("check", "parse, resolve and validate a launch configuration", RunCheck);

}  // namespace ctxpar::cli
