// The DCP combine (docs/dcp.md): turns each rank's partial attention states for the widened
// head set of its DCP group into the exact attention output for the rank's own heads.
//
// Shapes on rank r of a DCP group of N ranks, h heads per rank (all fp32, row-major):
//   o_partial   [rows, N*h, dv]  attention over this rank's KV shard only
//   lse_partial [rows, N*h]      NATURAL-log sum of exp(score) over the shard (-inf: no key)
//   o           [rows, h, dv]    written: the merged output for heads [r*h, (r+1)*h)
//   lse         [rows, h]        written when not null: the merged natural-log LSE
// Head g of the widened set belongs to rank g / h. Every rank of the group calls Combine with
// the same rows, h and dv. All merging goes through merge.h.
//
// Backends and what each moves per call (bytes this rank sends to the other ranks; the counters
// of the Communicator show them):
//   ag_rs   AllGather of lse_partial: (N-1)*rows*N*h*4; each rank scales its O by
//           ShareScale(lse_r, lse_merged) into fp32 and a ReduceScatter over heads sums the
//           shares: (N-1)*rows*h*dv*4.
//   a2a     ONE all-to-all (AllToAllV of bytes, the own slot empty): the slot for peer j
//           holds O[rows, h, dv] of heads j (in `o_wire`: fp32, or bf16 rounded to nearest
//           even) followed by lse[rows, h] fp32: (N-1)*rows*h*(dv*sizeof(o_wire) + 4). The
//           receiver merges N states, its own read in fp32 from o_partial (never packed).
//   shm_a2a the same slots written one-sided into the receivers' segments of a shared window
//           (Communicator::AllocateSharedWindow), then ONE SharedWindow::Sync, then the merge;
//           same bytes as a2a. Double-buffered, so a call needs no second synchronisation.
//           Across nodes the window is refused (CTXPAR-DCP-007).
//   fi_a2a  FlashInfer's exchange over CUDA fabric memory: the CPU combiner refuses it
//           (CTXPAR-DCP-003).
// With N == 1 every backend copies o_partial to o without communicating.
//
// Thread safety: a Combiner belongs to one rank's thread; it owns scratch buffers (and for
// shm_a2a a window, grown collectively when a call needs more room).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar {

enum class CombineBackend { kAgRs, kA2a, kFiA2a, kShmA2a };

// "ag_rs", "a2a", "fi_a2a", "shm_a2a": the --dcp-comm-backend spellings.
std::string_view CombineBackendName(CombineBackend backend);
// InvalidArgument naming the value and the valid choices for anything else.
Expected<CombineBackend> ParseCombineBackend(std::string_view name);

struct CombineShape {
  int rows = 0;
  int heads_per_rank = 0;  // h
  int head_dim_v = 0;      // dv
};

class Combiner {
 public:
  // `comm` is the DCP group (not owned; it must outlive the Combiner). o_wire is kF32 or kBF16.
  static Expected<std::unique_ptr<Combiner>> Create(Communicator* comm, CombineBackend backend,
                                                    DataType o_wire = DataType::kF32);

  Status Combine(const CombineShape& shape, const float* o_partial, const float* lse_partial,
                 float* o, float* lse);

  CombineBackend backend() const { return backend_; }

 private:
  Combiner(Communicator* comm, CombineBackend backend, DataType o_wire)
      : comm_(comm), backend_(backend), o_wire_(o_wire) {}
  Status AgRs(const CombineShape& s, const float* o_partial, const float* lse_partial, float* o,
              float* lse);
  Status A2a(const CombineShape& s, const float* o_partial, const float* lse_partial, float* o,
             float* lse);
  Status ShmA2a(const CombineShape& s, const float* o_partial, const float* lse_partial, float* o,
                float* lse);
  size_t SlotBytes(const CombineShape& s) const;
  void PackSlot(const CombineShape& s, int peer, const float* o_partial, const float* lse_partial,
                unsigned char* slot) const;
  void MergeSlots(const CombineShape& s, const unsigned char* slots, const float* o_partial,
                  const float* lse_partial, float* o, float* lse);

  Communicator* comm_;
  CombineBackend backend_;
  DataType o_wire_;
  std::vector<float> lse_all_, scaled_;
  std::vector<unsigned char> send_, recv_;
  std::vector<float> weights_, lse_in_;
  std::vector<const void*> peers_;
  std::vector<size_t> counts_, displs_;
  std::unique_ptr<SharedWindow> window_;
  unsigned parity_ = 0;
};

}  // namespace ctxpar
