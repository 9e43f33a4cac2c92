// The catalog's entries by area, gathered by error_catalog.cpp into one table ordered by ID
// (not public API).
#pragma once

#include <vector>

#include "ctxpar/error_catalog.h"

namespace ctxpar::catalog_internal {

// The engine, the KV pool and the models' layout rules: CTXPAR-ENGINE-*, -KV-*, -MODEL-*.
std::vector<CatalogEntry> EngineEntries();
// The DeepSeek-V3 architecture: CTXPAR-HF-* (config.json) and CTXPAR-DSV3-* (layout rules).
std::vector<CatalogEntry> DeepseekEntries();

}  // namespace ctxpar::catalog_internal
