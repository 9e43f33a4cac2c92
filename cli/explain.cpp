// `ctxpar explain ID | --message TEXT | --list [--json]`: the error catalog for users.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "ctxpar/error_catalog.h"
#include "launch_flags.h"

namespace ctxpar::cli {
namespace {

// Wraps `text` at 96 columns with `indent` spaces in front of every line.
std::string Wrap(std::string_view text, int indent) {
  std::string out;
  std::string line;
  auto flush = [&] {
    out += std::string(indent, ' ') + line + "\n";
    line.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(pos, end - pos);
    if (!line.empty() && line.size() + 1 + word.size() + indent > 96) flush();
    if (!line.empty()) line += ' ';
    line += word;
    pos = end + 1;
  }
  if (!line.empty()) flush();
  return out;
}

nlohmann::json EntryJson(const CatalogEntry& e) {
  nlohmann::json solutions = nlohmann::json::array();
  for (std::string_view s : e.solutions) solutions.push_back(s);
  nlohmann::json related = nlohmann::json::array();
  for (std::string_view r : e.related) related.push_back(r);
  return {{"id", e.id},
          {"title", e.title},
          {"message_template", e.message_template},
          {"meaning", e.meaning},
          {"when", e.when},
          {"solutions", solutions},
          {"example_fix", {{"before", e.before}, {"after", e.after}}},
          {"related", related}};
}

void PrintEntry(const CatalogEntry& e) {
  std::printf("%s: %s\n\nError message\n%s\n", std::string(e.id).c_str(),
              std::string(e.title).c_str(), Wrap(e.message_template, 2).c_str());
  std::printf("What it means\n%s\n", Wrap(e.meaning, 2).c_str());
  std::printf("When it happens\n%s\n", Wrap(e.when, 2).c_str());
  std::printf("Solutions\n");
  for (size_t i = 0; i < e.solutions.size(); ++i) {
    std::string item = std::to_string(i + 1) + ". " + std::string(e.solutions[i]);
    std::printf("%s", Wrap(item, 2).c_str());
  }
  std::printf("\nExample fix\n  # before\n  %s\n  # after\n  %s\n", std::string(e.before).c_str(),
              std::string(e.after).c_str());
  std::printf("\nRelated errors\n");
  for (std::string_view id : e.related) {
    const CatalogEntry* r = FindCatalogEntry(id);
    std::printf("  %-17s  %s\n", std::string(id).c_str(), r ? std::string(r->title).c_str() : "");
  }
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "ctxpar explain: %s\n", message.c_str());
  return kExitInvalid;
}

int RunExplain(const std::vector<std::string>& args) {
  CLI::App app{"Explain an error of the catalog: by ID, or from a pasted message.",
               "ctxpar explain"};
  std::string id;
  std::string message;
  bool json = false;
  bool list = false;
  app.add_option("id", id, "A catalog ID such as CTXPAR-DCP-003.");
  app.add_option("--message,-m", message, "A pasted error message, values filled in.");
  app.add_flag("--list", list, "List every catalog ID with its title.");
  app.add_flag("--json", json, "Print JSON instead of text.");
  Status status;
  if (int rc = ParseCommandLine(app, args, "explain", &status); rc >= 0) {
    if (rc != kExitOk) std::fprintf(stderr, "%s\n", status.message().c_str());
    return rc;
  }
  const int modes = !id.empty() + app.count("--message") + list;
  if (modes != 1) {
    return Fail(
        "give exactly one of: an ID (ctxpar explain CTXPAR-DCP-003), --message TEXT, "
        "--list");
  }
  if (list) {
    nlohmann::json out = nlohmann::json::array();
    for (const CatalogEntry& e : ErrorCatalog()) {
      if (json) {
        out.push_back({{"id", e.id}, {"title", e.title}});
      } else {
        std::printf("%-18s %s\n", std::string(e.id).c_str(), std::string(e.title).c_str());
      }
    }
    if (json)
      std::printf("%s\n",
                  out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  if (!id.empty()) {
    const CatalogEntry* e = FindCatalogEntry(id);
    if (e == nullptr) {
      return Fail("no catalog entry " + id +
                  "; IDs look like CTXPAR-DCP-003, run: ctxpar explain --list");
    }
    if (json) {
      std::printf(
          "%s\n",
          EntryJson(*e).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      PrintEntry(*e);
    }
    return kExitOk;
  }
  std::optional<CatalogMatch> match = MatchCatalogMessage(message);
  if (!match) {
    return Fail(
        "no catalog entry matches this message; paste the whole error text, or run: "
        "ctxpar explain --list");
  }
  if (json) {
    nlohmann::json out = EntryJson(*match->entry);
    out["matched_values"] = nlohmann::json::object();
    for (const auto& [name, value] : match->values) out["matched_values"][name] = value;
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  PrintEntry(*match->entry);
  if (!match->values.empty()) {
    std::printf("\nValues in your message\n");
    for (const auto& [name, value] : match->values) {
      std::printf("  %s = %s\n", name.c_str(), value.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

CTXPAR_REGISTER_COMMAND("explain", "explain an error of the catalog (by ID or message)",
                        RunExplain);

}  // namespace ctxpar::cli
