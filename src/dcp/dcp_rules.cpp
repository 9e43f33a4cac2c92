#include "ctxpar/dcp_rules.h"

#include <string>

#include "ctxpar/error_catalog.h"

namespace ctxpar {

Status CheckDcpRules(int dcp_size, CombineBackend backend, bool replicate_q, bool cuda) {
  const std::string n = std::to_string(dcp_size);
  const std::string name(CombineBackendName(backend));
  const bool all_to_all = backend != CombineBackend::kAgRs;
  if (dcp_size < 1) return CatalogError("CTXPAR-DCP-001", {{"dcp_size", n}});
  if (all_to_all && dcp_size <= 1) {
    return CatalogError("CTXPAR-DCP-002", {{"backend", name}, {"dcp_size", n}});
  }
  if (backend == CombineBackend::kFiA2a && !cuda) return CatalogError("CTXPAR-DCP-003", {});
  if (replicate_q) {
    if (dcp_size <= 1) return CatalogError("CTXPAR-DCP-004", {});
    if (!all_to_all) return CatalogError("CTXPAR-DCP-005", {{"backend", name}});
  }
  return Status::Ok();
}

Status CheckDcpDividesTp(int tp_size, int dcp_size) {
  if (tp_size >= 1 && dcp_size >= 1 && tp_size % dcp_size == 0) return Status::Ok();
  return CatalogError("CTXPAR-LAYOUT-001",
                      {{"tp_size", std::to_string(tp_size)}, {"dcp_size", std::to_string(dcp_size)}});
}

Status CheckDcpDividesHeads(int num_heads, int dcp_size) {
  if (num_heads >= 1 && dcp_size >= 1 && num_heads % dcp_size == 0) return Status::Ok();
  return CatalogError("CTXPAR-LAYOUT-003", {{"num_heads", std::to_string(num_heads)},
                                            {"dcp_size", std::to_string(dcp_size)}});
}

}  // namespace ctxpar
