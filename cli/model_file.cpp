#include "model_file.h"

#include <cstdlib>

namespace ctxpar::cli {
namespace {

constexpr const char* kModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

}  // namespace

std::string ModelPath(const ResolvedConfig& config) {
  if (!config.model_path().empty()) return config.model_path();
  if (const char* env = std::getenv("CTXPAR_MODEL"); env != nullptr && *env != '\0') return env;
  std::string dir;
  if (const char* d = std::getenv("CTXPAR_MODEL_DIR"); d != nullptr && *d != '\0') {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    dir = std::string(x) + "/ctxpar/models";
  } else {
    const char* home = std::getenv("HOME");
    dir = std::string(home != nullptr ? home : ".") + "/.cache/ctxpar/models";
  }
  return dir + "/" + kModelFile;
}

Expected<GgufFile> OpenModelFile(const std::string& path) {
  Expected<GgufFile> file = GgufFile::Open(path);
  if (file.ok() || file.status().code() != StatusCode::kNotFound) return file;
  const Status& s = file.status();
  return Status(s.code(),
                s.message() +
                    " Fetch the default model with scripts/fetch-model.sh, or give the path with "
                    "--model-path or CTXPAR_MODEL.",
                s.error_id());
}

}  // namespace ctxpar::cli
