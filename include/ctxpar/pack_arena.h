// The pack arena: host memory for the weight packs of the matmul kernels (compute's PackVector),
// which a decode step streams through once each. Packs below a quarter of a chunk lie side by
// side in 32 MiB chunks of HostBuffer memory (2 MiB aligned, advised to be backed by huge pages),
// larger ones in a HostBuffer of their own. Most packs are far smaller than a huge page: each on
// its own heap allocation would sit on 4 KiB pages, and a stream over those takes a TLB miss
// every 4 KiB (docs/perf-model.md). A chunk is unmapped when the last allocation in it is freed;
// before that, only space freed at the end of what it handed out is reused (packs made and freed
// together, as a MatMul of an unpacked matrix does per call), so what lives here should live and
// die with its neighbours (the weights of a model), not grow and shrink one by one.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>

namespace ctxpar {

// 64-byte-aligned storage of `bytes` (> 0); throws std::bad_alloc when the memory cannot be
// mapped.
void* AllocatePack(std::size_t bytes);
// Frees p, which AllocatePack returned for the same `bytes`.
void FreePack(void* p, std::size_t bytes) noexcept;
// Bytes the arena holds mapped now (chunks and large packs): 0 once every pack is freed.
std::size_t PackArenaBytes();

}  // namespace ctxpar
