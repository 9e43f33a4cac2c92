#include "ctxpar/pack_arena.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <utility>

#include "ctxpar/host_buffer.h"

namespace ctxpar {
namespace {

constexpr std::size_t kChunk = std::size_t{32} << 20;
constexpr std::size_t kAlign = 64;

struct Chunk {
  HostBuffer memory;
  std::size_t used = 0;  // bytes handed out from the start
  std::size_t live = 0;  // allocations not yet freed
};

struct Arena {
  std::mutex mu;
  std::map<std::uintptr_t, Chunk> chunks;  // by start address
  Chunk* current = nullptr;                // where small packs go next
  std::size_t mapped = 0;
};

// Never destroyed: a pack freed during static destruction still finds it.
Arena& TheArena() {
  static Arena* arena = new Arena;
  return *arena;
}

Chunk& Map(Arena& a, std::size_t bytes) {
  Expected<HostBuffer> memory = HostBuffer::Allocate(bytes);
  if (!memory.ok()) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(memory->data());
  a.mapped += memory->size();
  return a.chunks.emplace(start, Chunk{std::move(*memory)}).first->second;
}

}  // namespace

void* AllocatePack(std::size_t bytes) {
  const std::size_t size = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  Arena& a = TheArena();
  std::lock_guard lock(a.mu);
  Chunk* chunk = nullptr;
  if (size > kChunk / 4) {
    chunk = &Map(a, size);
  } else {
    if (a.current == nullptr || a.current->used + size > a.current->memory.size()) {
      a.current = &Map(a, kChunk);
    }
    chunk = a.current;
  }
  void* p = chunk->memory.as<char>() + chunk->used;
  chunk->used += size;
  ++chunk->live;
  return p;
}

void FreePack(void* p, std::size_t) noexcept {
  Arena& a = TheArena();
  std::lock_guard lock(a.mu);
  auto it = a.chunks.upper_bound(reinterpret_cast<std::uintptr_t>(p));
  --it;  // the chunk that starts at or below p: p came from it
  Chunk& chunk = it->second;
  if (--chunk.live > 0) return;
  if (&chunk == a.current) a.current = nullptr;
  a.mapped -= chunk.memory.size();
  a.chunks.erase(it);
}

std::size_t PackArenaBytes() {
  Arena& a = TheArena();
  std::lock_guard lock(a.mu);
  return a.mapped;
}

}  // namespace ctxpar
