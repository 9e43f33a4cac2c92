// The catalog's table is assembled from more than one file; this is the seam between them.
#pragma once

#include <vector>

#include "ctxpar/error_catalog.h"

namespace ctxpar::core_internal {

// The entries of errors raised while running (files, processes, collectives, the CLI's own
// input), in any order; error_catalog.cpp adds the configuration entries and sorts by ID.
std::vector<CatalogEntry> RuntimeCatalogEntries();

// The engine, the KV pool and the models' layout rules (CTXPAR-ENGINE-*, -KV-*, -MODEL-*), in any
// order (error_catalog_engine.cpp).
std::vector<CatalogEntry> EngineCatalogEntries();

// The HTTP server, `ctxpar serve` (CTXPAR-HTTP-*), in any order (error_catalog_http.cpp).
std::vector<CatalogEntry> HttpCatalogEntries();

// The DeepSeek-V3 architecture: its safetensors files (CTXPAR-ST-*), its config.json reader
// (CTXPAR-HF-*) and its layout rules (CTXPAR-DSV3-*), in any order (error_catalog_deepseek.cpp).
std::vector<CatalogEntry> DeepseekCatalogEntries();

// `ctxpar plan` (CTXPAR-PLAN-*), in any order (error_catalog_plan.cpp).
std::vector<CatalogEntry> PlanCatalogEntries();

}  // namespace ctxpar::core_internal
