#include "launch_flags.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <regex>

#include "ctxpar/error_catalog.h"

namespace ctxpar::cli {
namespace {

std::string FlagLabel(const FieldSpec& field) {
  std::string label(field.flag);
  if (!field.alias.empty()) label += " / " + std::string(field.alias);
  return label;
}

std::string HelpText(const FieldSpec& field) {
  std::string help(field.help);
  if (!field.choices.empty()) {
    help += " {";
    for (size_t i = 0; i < field.choices.size(); ++i) {
      help += (i ? "," : "") + std::string(field.choices[i]);
    }
    help += "}";
  }
  if (!std::holds_alternative<std::monostate>(field.default_value)) {
    help += " (default " + FieldValueStr(field.default_value) + ")";
  }
  return help;
}

}  // namespace

void AddLaunchFlags(CLI::App& app, LaunchFlags* out) {
  const auto fields = ConfigFields();
  out->app = &app;
  out->text.assign(fields.size(), std::string());
  out->options.assign(fields.size(), nullptr);
  out->negations.assign(fields.size(), nullptr);
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldSpec& f = fields[i];
    std::string names(f.flag);
    if (!f.alias.empty()) names += "," + std::string(f.alias);
    if (f.type == FieldType::kBool) {
      out->options[i] = app.add_flag(names)->description(HelpText(f))->disable_flag_override();
      if (!f.negation.empty()) {
        out->negations[i] = app.add_flag(std::string(f.negation))
                                ->description("Turn off " + std::string(f.flag) + ".")
                                ->disable_flag_override();
      }
    } else {
      out->options[i] = app.add_option(names, out->text[i], HelpText(f))
                            ->type_name(f.type == FieldType::kInt     ? "INT"
                                        : f.type == FieldType::kFloat ? "FLOAT"
                                                                      : "TEXT")
                            // argparse semantics: a repeated flag keeps its last value.
                            ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
}

Expected<LaunchConfig> ToLaunchConfig(const LaunchFlags& flags) {
  const auto fields = ConfigFields();
  LaunchConfig raw;
  for (size_t i = 0; i < fields.size(); ++i) {
    const FieldSpec& f = fields[i];
    const CLI::Option* pos = flags.options[i];
    const CLI::Option* neg = flags.negations[i];
    if (f.type == FieldType::kBool) {
      if (pos->count() == 0 && (neg == nullptr || neg->count() == 0)) continue;
      bool value = pos->count() > 0;
      if (neg != nullptr && neg->count() > 0 && pos->count() > 0) {
        const auto order = flags.app->parse_order();
        auto last = std::find_if(order.rbegin(), order.rend(),
                                 [&](const CLI::Option* o) { return o == pos || o == neg; });
        value = *last == pos;
      }
      CTXPAR_RETURN_IF_ERROR(raw.Set(f.name, value));
      continue;
    }
    if (pos->count() == 0) continue;
    CTXPAR_ASSIGN_OR_RETURN(FieldValue value, ParseFieldText(f, FlagLabel(f), flags.text[i]));
    CTXPAR_RETURN_IF_ERROR(raw.Set(f.name, std::move(value)));
  }
  return raw;
}

void UseArgparseRepeats(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_items_expected_max() == 1 && opt->get_type_size() > 0 && !opt->get_positional()) {
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
  }
}

namespace {

// CLI11's errors for a value of the wrong kind or out of its Range, as the catalog's errors for
// the same mistakes in the launch flags (FLAG-002, -010, -003); null for any other error.
std::optional<Status> ValueError(const CLI::App& app, const CLI::ParseError& e) {
  static const std::regex convert("Could not convert: (\\S+) = (.*)");
  static const std::regex range("(\\S+): Value (.*) not in range (\\S+) to (\\S+)");
  static const std::regex integer("\\s*[-+]?[0-9]+\\s*");
  static const std::regex number("\\s*[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*");
  const std::string what = e.what();
  std::smatch m;
  const bool in_range = std::regex_match(what, m, range);
  if (!in_range && !std::regex_match(what, m, convert)) return std::nullopt;
  const std::string flag = m[1].str(), value = m[2].str();
  const CLI::Option* opt = app.get_option_no_throw(flag);
  if (opt == nullptr) return std::nullopt;
  const std::string type = opt->get_type_name();
  const bool whole = type.starts_with("INT") || type.starts_with("UINT");
  if (std::regex_match(value, whole ? integer : number)) {
    std::string valid = "[" + m[3].str() + ", " + m[4].str() + "]";
    if (!in_range) {
      valid = !whole                     ? "finite numbers"
              : type.starts_with("UINT") ? "integers in [0, 2^64)"
                                         : "integers in 32 bits";
    }
    return CatalogError("CTXPAR-FLAG-003",
                        {{"value", PyRepr(value)}, {"flag", flag}, {"valid", valid}});
  }
  return CatalogError(
      whole ? "CTXPAR-FLAG-002" : "CTXPAR-FLAG-010",
      {{"value", PyRepr(value)}, {"flag", flag}, {"valid", whole ? "integers" : "numbers"}});
}

// CLI11 reads "-hello" as -h with more short flags and prints the help: so a prompt that
// starts with "-h" would print the help and exit 0 instead of being refused as any other
// argument that starts with '-' (FLAG-009). The first such argument that is no option's value.
std::optional<std::string> HelpLookalike(const CLI::App& app,
                                         const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    if (!a.starts_with("-h") || a.size() == 2) continue;
    const CLI::Option* prev = i == 0 ? nullptr : app.get_option_no_throw(args[i - 1]);
    if (prev == nullptr || prev->get_items_expected_max() == 0) return a;
  }
  return std::nullopt;
}

}  // namespace

int ParseCommandLine(CLI::App& app, const std::vector<std::string>& args, std::string_view command,
                     Status* error) {
  UseArgparseRepeats(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  // An unknown argument is the error to report even when CLI11 stops at a later one (a required
  // positional it then lacks: `generate -x` would otherwise say "prompt is required").
  const auto unknown = [&](const std::string& arg) -> Status {
    const auto options = app.get_options([](const CLI::Option* o) { return o->get_positional(); });
    if (arg.starts_with("-") && !options.empty()) {
      return CatalogError("CTXPAR-FLAG-009", {{"argument", PyRepr(arg)},
                                              {"command", std::string(command)},
                                              {"positional", options[0]->get_name()}});
    }
    return CatalogError("CTXPAR-FLAG-004",
                        {{"argument", PyRepr(arg)}, {"command", std::string(command)}});
  };
  const auto first_unread = [&app] {
    const std::vector<std::string> rest = app.remaining();
    return rest.empty() ? std::string() : rest[0];
  };
  if (const std::optional<std::string> arg = HelpLookalike(app, args)) {
    *error = unknown(*arg);
    return 2;
  }
  try {
    app.parse(reversed);
  } catch (const CLI::Success&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ExtrasError&) {
    *error = unknown(first_unread());
    return 2;
  } catch (const CLI::ParseError& e) {
    if (std::optional<Status> value = ValueError(app, e)) {
      *error = *std::move(value);
      return 2;
    }
    *error = app.remaining().empty()
                 ? CatalogError("CTXPAR-FLAG-005",
                                {{"command", std::string(command)}, {"detail", e.what()}})
                 : unknown(first_unread());
    return 2;
  }
  return -1;
}

}  // namespace ctxpar::cli
