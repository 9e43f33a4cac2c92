#include "ctxpar/combine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "ctxpar/dtype.h"
#include "ctxpar/error_catalog.h"
#include "ctxpar/merge.h"

namespace ctxpar {

namespace {

// The element loops of pack and merge, cloned per ISA (the library is built for the baseline
// x86-64 ISA, and these loops run over megabytes at batch 32). The AVX-512 clone is x86-64-v4
// rather than plain avx512f: with the latter GCC keeps 256-bit vectors, and the bf16 pack of a
// GQA batch-1 slot took 265 ns instead of 110.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CTXPAR_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define CTXPAR_VECTOR_CLONES
#endif

CTXPAR_VECTOR_CLONES void ScaleInto(float a, const float* __restrict x, float* __restrict y,
                                    size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = a * x[i];
}

CTXPAR_VECTOR_CLONES void ToBf16(const float* __restrict x, uint16_t* __restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = FloatToBf16(x[i]);
}

// dst[dv] := sum_r w[r] * src_r, where src_r is `own` (fp32) for r == me and peer r's slot (of
// the wire type) otherwise. One call per state: the per-peer loops inline into each ISA clone.
CTXPAR_VECTOR_CLONES void MergeRow(float* __restrict dst, size_t dv, int n, int me,
                                   const float* __restrict w, const float* __restrict own,
                                   const void* const* __restrict peer, bool bf16) {
  // A state of weight 0 is skipped, not multiplied: its O may be garbage (a rank with no key).
  const float w_own = w[me];
  if (w_own == 0.0f) {
    for (size_t i = 0; i < dv; ++i) dst[i] = 0.0f;
  } else {
    for (size_t i = 0; i < dv; ++i) dst[i] = w_own * own[i];
  }
  for (int r = 0; r < n; ++r) {
    const float a = w[r];
    if (r == me || a == 0.0f) continue;
    if (bf16) {
      const auto* x = static_cast<const uint16_t*>(peer[r]);
      for (size_t i = 0; i < dv; ++i) dst[i] += a * Bf16ToFloat(x[i]);
    } else {
      const auto* x = static_cast<const float*>(peer[r]);
      for (size_t i = 0; i < dv; ++i) dst[i] += a * x[i];
    }
  }
}

}  // namespace

std::string_view CombineBackendName(CombineBackend backend) {
  switch (backend) {
    case CombineBackend::kAgRs:
      return "ag_rs";
    case CombineBackend::kA2a:
      return "a2a";
    case CombineBackend::kFiA2a:
      return "fi_a2a";
    case CombineBackend::kShmA2a:
      return "shm_a2a";
  }
  return "?";
}

Expected<CombineBackend> ParseCombineBackend(std::string_view name) {
  for (CombineBackend b : {CombineBackend::kAgRs, CombineBackend::kA2a, CombineBackend::kFiA2a,
                           CombineBackend::kShmA2a}) {
    if (name == CombineBackendName(b)) return b;
  }
  return InvalidArgument(
      fmt::format("dcp comm backend must be one of ag_rs, a2a, fi_a2a, shm_a2a, got '{}'", name));
}

Expected<std::unique_ptr<Combiner>> Combiner::Create(Communicator* comm, CombineBackend backend,
                                                     DataType o_wire) {
  if (comm == nullptr) return InvalidArgument("Combiner: comm is null");
  if (o_wire != DataType::kF32 && o_wire != DataType::kBF16) {
    return InvalidArgument(
        fmt::format("Combiner: o_wire must be f32 or bf16, got {}", DataTypeName(o_wire)));
  }
  // fi_a2a is FlashInfer's exchange over CUDA fabric memory; this combiner runs on the CPU.
  if (backend == CombineBackend::kFiA2a) return CatalogError("CTXPAR-DCP-003", {});
  return std::unique_ptr<Combiner>(new Combiner(comm, backend, o_wire));
}

Status Combiner::Combine(const CombineShape& s, const float* o_partial, const float* lse_partial,
                         float* o, float* lse) {
  if (s.rows < 0 || s.heads_per_rank < 1 || s.head_dim_v < 1) {
    return InvalidArgument(
        fmt::format("Combine: rows must be >= 0 and heads_per_rank, head_dim_v >= 1, got rows={}, "
                    "heads_per_rank={}, head_dim_v={}",
                    s.rows, s.heads_per_rank, s.head_dim_v));
  }
  if (s.rows > 0 && (o_partial == nullptr || lse_partial == nullptr || o == nullptr)) {
    return InvalidArgument("Combine: o_partial, lse_partial and o must be non-null");
  }
  if (comm_->size() == 1) {
    const size_t n = static_cast<size_t>(s.rows) * s.heads_per_rank;
    std::copy_n(o_partial, n * s.head_dim_v, o);
    if (lse != nullptr) std::copy_n(lse_partial, n, lse);
    return Status::Ok();
  }
  switch (backend_) {
    case CombineBackend::kAgRs:
      return AgRs(s, o_partial, lse_partial, o, lse);
    case CombineBackend::kA2a:
      return A2a(s, o_partial, lse_partial, o, lse);
    case CombineBackend::kShmA2a:
      return ShmA2a(s, o_partial, lse_partial, o, lse);
    case CombineBackend::kFiA2a:
      break;
  }
  return Internal("Combine: no CPU implementation of this backend");
}

Status Combiner::AgRs(const CombineShape& s, const float* o_partial, const float* lse_partial,
                      float* o, float* lse) {
  const int n = comm_->size(), me = comm_->rank(), h = s.heads_per_rank, dv = s.head_dim_v;
  const size_t lse_count = static_cast<size_t>(s.rows) * n * h;
  lse_all_.resize(lse_count * n);
  CTXPAR_RETURN_IF_ERROR(comm_->AllGather(lse_partial, lse_all_.data(), lse_count, DataType::kF32));
  // scaled_ is [n, rows, h, dv]: chunk j holds this rank's share of peer j's heads.
  const size_t chunk = static_cast<size_t>(s.rows) * h * dv;
  scaled_.resize(chunk * n);
  weights_.resize(n);
  for (int row = 0; row < s.rows; ++row) {
    for (int g = 0; g < n * h; ++g) {
      const size_t state = static_cast<size_t>(row) * n * h + g;
      const float merged =
          MergeScales(lse_all_.data() + state, n, static_cast<int>(lse_count), weights_.data());
      const float share = ShareScale(lse_partial[state], merged);
      const int owner = g / h;
      const float* src = o_partial + state * dv;
      float* dst = scaled_.data() + owner * chunk + (static_cast<size_t>(row) * h + g % h) * dv;
      ScaleInto(share, src, dst, dv);
      if (owner == me && lse != nullptr) lse[static_cast<size_t>(row) * h + g % h] = merged;
    }
  }
  return comm_->ReduceScatter(scaled_.data(), o, chunk, DataType::kF32);
}

size_t Combiner::SlotBytes(const CombineShape& s) const {
  return static_cast<size_t>(s.rows) * s.heads_per_rank *
         (s.head_dim_v * DataTypeSize(o_wire_) + sizeof(float));
}

void Combiner::PackSlot(const CombineShape& s, int peer, const float* o_partial,
                        const float* lse_partial, unsigned char* slot) const {
  const int n = comm_->size(), h = s.heads_per_rank, dv = s.head_dim_v;
  const size_t states = static_cast<size_t>(s.rows) * h;
  unsigned char* lse_out = slot + states * dv * DataTypeSize(o_wire_);
  for (int row = 0; row < s.rows; ++row) {
    const size_t src_state = static_cast<size_t>(row) * n * h + static_cast<size_t>(peer) * h;
    const float* src = o_partial + src_state * dv;
    const size_t dst_state = static_cast<size_t>(row) * h;
    if (o_wire_ == DataType::kF32) {
      std::memcpy(slot + dst_state * dv * sizeof(float), src, sizeof(float) * h * dv);
    } else {
      ToBf16(src, reinterpret_cast<uint16_t*>(slot) + dst_state * dv, static_cast<size_t>(h) * dv);
    }
    std::memcpy(lse_out + dst_state * sizeof(float), lse_partial + src_state, sizeof(float) * h);
  }
}

void Combiner::MergeSlots(const CombineShape& s, const unsigned char* slots, const float* o_partial,
                          const float* lse_partial, float* o, float* lse) {
  const int n = comm_->size(), me = comm_->rank(), h = s.heads_per_rank, dv = s.head_dim_v;
  const size_t states = static_cast<size_t>(s.rows) * h;
  const size_t slot_bytes = SlotBytes(s);
  const size_t o_bytes = states * dv * DataTypeSize(o_wire_);
  weights_.resize(n);
  lse_in_.resize(n);
  peers_.resize(n);
  const size_t o_elem = DataTypeSize(o_wire_);
  for (size_t st = 0; st < states; ++st) {
    // This rank's own state never went through a slot: it is read in fp32 from o_partial.
    const size_t own = (st / h) * n * h + static_cast<size_t>(me) * h + st % h;
    for (int r = 0; r < n; ++r) {
      const unsigned char* slot = slots + r * slot_bytes;
      if (r == me) {
        lse_in_[r] = lse_partial[own];
      } else {
        std::memcpy(&lse_in_[r], slot + o_bytes + st * sizeof(float), sizeof(float));
        peers_[r] = slot + st * dv * o_elem;
      }
    }
    const float merged = MergeScales(lse_in_.data(), n, 1, weights_.data());
    if (lse != nullptr) lse[st] = merged;
    MergeRow(o + st * dv, dv, n, me, weights_.data(), o_partial + own * dv, peers_.data(),
             o_wire_ == DataType::kBF16);
  }
}

Status Combiner::A2a(const CombineShape& s, const float* o_partial, const float* lse_partial,
                     float* o, float* lse) {
  const int n = comm_->size();
  const size_t slot_bytes = SlotBytes(s);
  send_.resize(slot_bytes * n);
  recv_.resize(slot_bytes * n);
  // One all-to-all in which the own slot is empty: it is neither packed nor copied, the merge
  // reads o_partial instead.
  const int me = comm_->rank();
  counts_.assign(n, slot_bytes);
  counts_[me] = 0;
  displs_.resize(n);
  for (int j = 0; j < n; ++j) {
    displs_[j] = j * slot_bytes;
    if (j != me) PackSlot(s, j, o_partial, lse_partial, send_.data() + j * slot_bytes);
  }
  CTXPAR_RETURN_IF_ERROR(comm_->AllToAllV(send_.data(), counts_, displs_, recv_.data(), counts_,
                                          displs_, DataType::kU8));
  MergeSlots(s, recv_.data(), o_partial, lse_partial, o, lse);
  return Status::Ok();
}

Status Combiner::ShmA2a(const CombineShape& s, const float* o_partial, const float* lse_partial,
                        float* o, float* lse) {
  const int n = comm_->size(), me = comm_->rank();
  const size_t slot_bytes = SlotBytes(s);
  // Each segment holds two buffers of n slots; call k writes buffer k % 2. A rank writes buffer b
  // again only after the Sync of the call in between, which every reader of b entered after its
  // merge, so one Sync per call suffices.
  const size_t buffer_bytes = slot_bytes * n;
  if (window_ == nullptr || window_->bytes() < 2 * buffer_bytes) {
    window_.reset();
    CTXPAR_ASSIGN_OR_RETURN(window_, comm_->AllocateSharedWindow(2 * buffer_bytes));
    parity_ = 0;
  }
  // The halves are fixed by the window, not by this call's shape: a smaller call must not place
  // its buffer inside the half a peer may still be reading from the previous, larger call.
  const size_t base = parity_ * (window_->bytes() / 2);
  parity_ ^= 1u;
  // Packed straight into the receivers' segments: the one copy of the exchange.
  for (int j = 0; j < n; ++j) {
    if (j == me) continue;
    auto* slot = static_cast<unsigned char*>(window_->Segment(j)) + base + me * slot_bytes;
    PackSlot(s, j, o_partial, lse_partial, slot);
  }
  window_->NoteSent((n - 1) * slot_bytes);
  CTXPAR_RETURN_IF_ERROR(window_->Sync());
  auto* own = static_cast<unsigned char*>(window_->Segment(me)) + base;
  window_->NoteReceived((n - 1) * slot_bytes);
  MergeSlots(s, own, o_partial, lse_partial, o, lse);
  return Status::Ok();
}

}  // namespace ctxpar
