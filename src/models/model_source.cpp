#include <filesystem>
#include <string>
#include <system_error>

#include "ctxpar/error_catalog.h"
#include "ctxpar/model.h"
#include "models/model_sources.h"

namespace ctxpar {

Expected<std::unique_ptr<ModelSource>> OpenModelSource(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return CatalogError("CTXPAR-MODEL-007", {{"path", path}});
  }
  if (std::filesystem::is_directory(st)) {
    if (std::filesystem::exists(std::filesystem::path(path) / "config.json", ec)) {
      return OpenHfSource(path);
    }
    return CatalogError("CTXPAR-MODEL-008",
                        {{"path", path}, {"holds", "a directory without a config.json"}});
  }
  return OpenGgufSource(path);
}

}  // namespace ctxpar
