#include "ctxpar/launch.h"

#include <cstdlib>

#include "ctxpar/engine.h"
#include "engine/drafter.h"

namespace ctxpar {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

}  // namespace

std::string DefaultModelPath() {
  if (std::string model = Env("CTXPAR_MODEL"); !model.empty()) return model;
  std::string dir = Env("CTXPAR_MODEL_DIR");
  if (dir.empty() && !Env("XDG_CACHE_HOME").empty()) dir = Env("XDG_CACHE_HOME") + "/ctxpar/models";
  if (dir.empty()) {
    const std::string home = Env("HOME");
    dir = (home.empty() ? std::string(".") : home) + "/.cache/ctxpar/models";
  }
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

Expected<Launch> PrepareLaunch(const LaunchConfig& raw) {
  Launch launch;
  CTXPAR_ASSIGN_OR_RETURN(launch.platform, PlatformForLaunch(raw));
  // The flags alone first: a bad launch line is reported before the model is opened.
  CTXPAR_RETURN_IF_ERROR(Resolve(raw, launch.platform, nullptr).status());
  const std::string given = FieldValueStr(raw.raw("model_path"));
  const std::string path = raw.given("model_path") ? given : DefaultModelPath();
  CTXPAR_ASSIGN_OR_RETURN(launch.source, OpenModelSource(path));
  CTXPAR_ASSIGN_OR_RETURN(launch.resolved, Resolve(raw, launch.platform, &launch.source->info()));
  CTXPAR_ASSIGN_OR_RETURN(launch.config, MakeEngineConfig(launch.resolved, launch.platform));
  launch.config.model_path = path;
  if (launch.config.speculative_algorithm == SpeculativeAlgorithm::kStandalone) {
    // Refused here rather than when the engine loads it: `check --model-path` answers too.
    CTXPAR_RETURN_IF_ERROR(engine::OpenDraftModel(launch.config, *launch.source).status());
  }
  CTXPAR_ASSIGN_OR_RETURN(launch.kv, KvPoolFor(launch.config, *launch.source, 0));
  launch.config.max_running_requests = launch.kv.max_slots;
  launch.max_total_num_tokens = KvPool::GroupTokens(launch.kv, 0);
  if (const int g = KvPool::FirstWindowGroup(launch.kv); g >= 0) {
    launch.swa_max_total_num_tokens = KvPool::GroupTokens(launch.kv, g);
  }
  return launch;
}

}  // namespace ctxpar
