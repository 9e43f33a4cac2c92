// The rules of decode context parallelism, stated once: the resolution pipeline
// (_handle_dcp_validation, _handle_parallelism, the model-specific step) and DcpAttention::Create
// both run these functions, so a configuration and the operator cannot disagree.
//
// Thread safety: pure functions.
#pragma once

#include "ctxpar/combine.h"
#include "ctxpar/status.h"

namespace ctxpar {

// Keys per chunk of --enable-deterministic-inference's exact merge (dcp_attention.h): with
// dcp_kv_cache_interleave_size a multiple of it every chunk is the same keys on every layout
// (CTXPAR-DCP-009). 16-key chunks cost prefill half its speed, 64-key ones about 13 %.
inline constexpr int kDeterministicChunkKeys = 64;

// SGLang's _handle_dcp_validation in its order: CTXPAR-DCP-001 (dcp_size < 1), -002 (an
// all-to-all backend without DCP; shm_a2a counts as one), -003 (fi_a2a off CUDA: `cuda` says
// whether the platform is CUDA, and the CPU operator passes false), -004 and -005 (replicated Q
// without DCP, or with ag_rs).
Status CheckDcpRules(int dcp_size, CombineBackend backend, bool replicate_q, bool cuda);

// CTXPAR-LAYOUT-001: DCP groups are contiguous blocks of dcp_size ranks of the TP group.
Status CheckDcpDividesTp(int tp_size, int dcp_size);

// CTXPAR-LAYOUT-003: each rank of a DCP group ends with the output of an equal share of heads.
Status CheckDcpDividesHeads(int num_heads, int dcp_size);

}  // namespace ctxpar
