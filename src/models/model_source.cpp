#include <filesystem>
#include <string>
#include <system_error>

#include "ctxpar/error_catalog.h"
#include "ctxpar/model.h"
#include "models/model_sources.h"

namespace ctxpar {

Expected<std::unique_ptr<ModelSource>> OpenModelSource(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(std::filesystem::path(path) / "config.json", ec)) {
      return OpenHfSource(path);
    }
    return CatalogError("CTXPAR-MODEL-008",
                        {{"path", path}, {"holds", "a directory without a config.json"}});
  }
  Expected<std::unique_ptr<ModelSource>> source = OpenGgufSource(path);
  if (source.ok() || source.status().code() != StatusCode::kNotFound) return source;
  // Only a file that is not there is sent to fetch the model; a corrupt one would come back the
  // same.
  const Status& s = source.status();
  return Status(s.code(),
                s.message() +
                    " Fetch the default model with scripts/fetch-model.sh, or give the path with "
                    "--model-path or CTXPAR_MODEL.",
                s.error_id());
}

}  // namespace ctxpar
