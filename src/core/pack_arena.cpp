#include "ctxpar/pack_arena.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
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
  std::size_t used = 0;                      // bytes handed out from the start
  std::size_t live = 0;                      // allocations not yet freed
  std::map<std::size_t, std::size_t> freed;  // offset -> size of those freed below `used`
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
  Chunk& chunk = a.chunks[start];
  chunk.memory = std::move(*memory);
  return chunk;
}

std::size_t Rounded(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

void* AllocatePack(std::size_t bytes) {
  const std::size_t size = Rounded(bytes);
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

void FreePack(void* p, std::size_t bytes) noexcept {
  Arena& a = TheArena();
  std::lock_guard lock(a.mu);
  auto it = a.chunks.upper_bound(reinterpret_cast<std::uintptr_t>(p));
  --it;  // the chunk that starts at or below p: p came from it
  Chunk& chunk = it->second;
  if (--chunk.live == 0) {
    if (&chunk == a.current) a.current = nullptr;
    a.mapped -= chunk.memory.size();
    a.chunks.erase(it);
    return;
  }
  // Space freed at the end of what is handed out comes back: a MatMul of a matrix that was not
  // packed at load packs it per call, and those packs would otherwise take new space each call
  // while the model's packs keep the chunk.
  chunk.freed.emplace(reinterpret_cast<std::uintptr_t>(p) - it->first, Rounded(bytes));
  while (!chunk.freed.empty()) {
    const auto last = std::prev(chunk.freed.end());
    if (last->first + last->second != chunk.used) break;
    chunk.used = last->first;
    chunk.freed.erase(last);
  }
}

std::size_t PackArenaBytes() {
  Arena& a = TheArena();
  std::lock_guard lock(a.mu);
  return a.mapped;
}

}  // namespace ctxpar
