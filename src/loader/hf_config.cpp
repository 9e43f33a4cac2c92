// config.json, architecture-neutral: the text and the `architectures` entry.
#include "ctxpar/hf_config.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ctxpar/error_catalog.h"

namespace ctxpar {

Expected<std::string> ReadHfConfigText(const std::string& path) {
  std::ifstream in(path);
  if (!in.is_open()) return NotFound(fmt::format("cannot open '{}'", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Expected<std::string> ReadHfArchitecture(const std::string& dir) {
  const std::string path = dir + "/config.json";
  CTXPAR_ASSIGN_OR_RETURN(std::string text, ReadHfConfigText(path));
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto unreadable = [&](std::string_view problem) {
    return CatalogError("CTXPAR-HF-001", {{"path", path}, {"problem", std::string(problem)}});
  };
  if (json.is_discarded() || !json.is_object()) {
    return unreadable("the text is not one JSON object");
  }
  if (!json.contains("architectures") || json["architectures"].is_null()) {
    return unreadable("architectures is missing");
  }
  const nlohmann::json& a = json["architectures"];
  if (!a.is_array() || a.size() != 1 || !a[0].is_string()) {
    return unreadable("architectures is not a list of one string");
  }
  return a[0].get<std::string>();
}

}  // namespace ctxpar
