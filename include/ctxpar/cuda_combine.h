// Combining partial attention states on a CUDA device: the merge of N states (merge.h's math)
// and the a2a pack / unpack around the all-to-all of the DCP combine.
//
// A "state" is one (row, head): an O vector of head_dim fp32 or bf16 values and a NATURAL-log
// lse (fp32). Partial states of the same (row, head) from n sources are merged as merge.h says
// (NaN/+inf lse weigh 0; all -inf gives O = 0, lse = -inf).
//
// a2a layout. A rank of a DCP group of n ranks holds, for its widened head set of n * h heads,
//   o   [batch, n * h, head_dim] fp32     lse [batch, n * h] fp32
// Peer j needs heads [j*h, (j+1)*h). The send buffer has n slots of A2aSlotBytes() bytes, slot j
// for peer j:  O [batch, h, head_dim] of `o_dtype`, padded to 16 bytes, then lse [batch, h] fp32,
// padded to 16 bytes (the pack writes no padding byte: they are sent as found). After the
// all-to-all, slot r of the receive buffer holds source r's slot, and the unpack merges the n
// states of each (row, head) into
//   o [batch, h, head_dim] fp32      lse [batch, h] fp32 (may be null).
//
// All pointers are device pointers, 16-byte aligned; head_dim must be a multiple of 8.
// Thread safety: the launchers only enqueue work on `stream` (a cudaStream_t).
#pragma once

#include <cstddef>

#include "ctxpar/dtype.h"
#include "ctxpar/status.h"

namespace ctxpar {

// Merge of n partial states stored as n planes:
//   o_parts [n, num_states, head_dim] of o_dtype, lse_parts [n, num_states] fp32
//   -> o [num_states, head_dim] fp32, lse [num_states] fp32 (lse may be null).
struct CudaMergeParams {
  const void* o_parts = nullptr;
  const float* lse_parts = nullptr;
  DataType o_dtype = DataType::kF32;
  int n = 0;
  int num_states = 0;
  int head_dim = 0;
  float* o = nullptr;
  float* lse = nullptr;
};

Status MergeStatesCuda(const CudaMergeParams& params, void* stream);

struct CudaA2aParams {
  int n = 0;               // DCP group size (number of slots)
  int batch = 0;           // rows
  int heads_per_rank = 0;  // h
  int head_dim = 0;
  DataType o_dtype = DataType::kBF16;  // the O element type inside the slots
};

// Bytes of one slot (a multiple of 16).
size_t A2aSlotBytes(const CudaA2aParams& params);

// o [batch, n*h, head_dim] fp32, lse [batch, n*h] fp32 -> send [n, A2aSlotBytes] bytes.
Status PackA2aCuda(const CudaA2aParams& params, const float* o, const float* lse, void* send,
                   void* stream);

// recv [n, A2aSlotBytes] bytes -> o [batch, h, head_dim] fp32, lse [batch, h] fp32 (or null).
Status UnpackMergeA2aCuda(const CudaA2aParams& params, const void* recv, float* o, float* lse,
                          void* stream);

}  // namespace ctxpar
