// The resolution pipeline: append-only declarations, the live and the frozen view.
#include <string>

#include "config/fields_internal.h"
#include "ctxpar/config.h"
#include "ctxpar/error_catalog.h"

namespace ctxpar {

Status Resolution::Declare(std::string_view source,
                           std::initializer_list<std::pair<std::string_view, FieldValue>> fields) {
  // Validate everything first so that a failed declaration leaves no partial trace.
  for (const auto& [name, value] : fields) {
    const FieldSpec* spec = FindField(name);
    if (spec == nullptr) {
      return CatalogError("CTXPAR-CONFIG-001",
                          {{"source", std::string(source)}, {"field", PyRepr(name)}});
    }
    if (!FieldAcceptsType(*spec, value)) {
      return CatalogError("CTXPAR-CONFIG-002", {{"source", std::string(source)},
                                                {"field", std::string(name)},
                                                {"value", FieldValueRepr(value)},
                                                {"type", FieldTypeName(spec->type)}});
    }
  }
  for (const auto& [name, value] : fields) {
    declarations_.push_back({std::string(source), std::string(name), value});
  }
  return Status::Ok();
}

FieldValue ResolvingView::Get(std::string_view name) const {
  const auto& decls = resolution_->declarations_;
  for (auto it = decls.rbegin(); it != decls.rend(); ++it) {
    if (it->field == name) return it->value;
  }
  return resolution_->raw_.raw(name);
}

ResolvedConfig Resolution::Freeze() const {
  ResolvedConfig out;
  for (const FieldSpec& spec : ConfigFields()) {
    FieldResolution r{&spec, raw_.raw(spec.name), raw_.raw(spec.name),
                      raw_.given(spec.name) ? "user" : "default"};
    for (const Declaration& d : declarations_) {
      if (d.field == spec.name) {
        r.value = d.value;
        r.source = d.source;
      }
    }
    out.fields_.push_back(std::move(r));
  }
  return out;
}

FieldValue ResolvedConfig::Get(std::string_view name) const {
  const FieldResolution* r = Provenance(name);
  return r == nullptr ? FieldValue() : r->value;
}

const FieldResolution* ResolvedConfig::Provenance(std::string_view name) const {
  for (const FieldResolution& r : fields_) {
    if (r.field->name == name) return &r;
  }
  return nullptr;
}

std::vector<FieldResolution> ResolvedConfig::NonDefaultFields() const {
  std::vector<FieldResolution> out;
  for (const FieldResolution& r : fields_) {
    if (!r.is_default()) out.push_back(r);
  }
  return out;
}

ResolveOutcome RunPipeline(const LaunchConfig& raw, const ResolveContext& context,
                           std::span<const Handler> handlers) {
  Resolution resolution(raw);
  for (const Handler& handler : handlers) {
    Status status = handler.run(resolution, context);
    if (!status.ok()) return {std::move(status), resolution.Freeze()};
  }
  return {Status::Ok(), resolution.Freeze()};
}

ResolveOutcome ResolveWithTrace(const LaunchConfig& raw, const Platform& platform,
                                const ModelInfo* model) {
  return RunPipeline(raw, ResolveContext{platform, model}, DefaultHandlers());
}

Expected<ResolvedConfig> Resolve(const LaunchConfig& raw, const Platform& platform,
                                 const ModelInfo* model) {
  ResolveOutcome outcome = ResolveWithTrace(raw, platform, model);
  if (!outcome.status.ok()) return outcome.status;
  return std::move(outcome.config);
}

}  // namespace ctxpar
