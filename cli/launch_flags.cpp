#include "launch_flags.h"

#include <algorithm>
#include <cstdio>

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

int ParseCommandLine(CLI::App& app, const std::vector<std::string>& args, std::string_view command,
                     Status* error) {
  UseArgparseRepeats(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  // An unknown argument is the error to report even when CLI11 stops at a later one (a required
  // positional it then lacks: `generate -x` would otherwise say "prompt is required").
  const auto unknown = [&]() -> Status {
    const std::vector<std::string> rest = app.remaining();
    const std::string arg = rest.empty() ? "" : rest[0];
    const auto options = app.get_options([](const CLI::Option* o) { return o->get_positional(); });
    if (arg.starts_with("-") && !options.empty()) {
      return CatalogError("CTXPAR-FLAG-009", {{"argument", PyRepr(arg)},
                                              {"command", std::string(command)},
                                              {"positional", options[0]->get_name()}});
    }
    return CatalogError("CTXPAR-FLAG-004",
                        {{"argument", PyRepr(arg)}, {"command", std::string(command)}});
  };
  try {
    app.parse(reversed);
  } catch (const CLI::Success&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ExtrasError&) {
    *error = unknown();
    return 2;
  } catch (const CLI::ParseError& e) {
    *error = app.remaining().empty()
                 ? CatalogError("CTXPAR-FLAG-005",
                                {{"command", std::string(command)}, {"detail", e.what()}})
                 : unknown();
    return 2;
  }
  return -1;
}

}  // namespace ctxpar::cli
