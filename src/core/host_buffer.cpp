#include "ctxpar/host_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace ctxpar {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace

Expected<HostBuffer> HostBuffer::Allocate(std::size_t bytes) {
  HostBuffer b;
  if (bytes == 0) return b;
  // Over-map by one huge page so that the buffer can start on a 2 MiB boundary: THP backs only
  // aligned 2 MiB ranges. Anonymous mappings are zero-filled and populated on first touch.
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  const std::size_t mapped = rounded + kHugePage;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return Unavailable("HostBuffer: mapping " + std::to_string(bytes) +
                       " bytes failed: " + std::strerror(errno));
  }
  const auto base = reinterpret_cast<std::uintptr_t>(m);
  const std::uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  b.mapping_ = m;
  b.mapping_bytes_ = mapped;
  b.data_ = reinterpret_cast<void*>(aligned);
  b.size_ = bytes;
#if defined(MADV_HUGEPAGE)
  // Advice only: where THP is off the buffer keeps 4 KiB pages and works the same.
  madvise(b.data_, rounded, MADV_HUGEPAGE);
#endif
  return b;
}

Status PopulateHostMemory(void* data, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  constexpr std::uintptr_t kPage = 4096;
  const auto begin = reinterpret_cast<std::uintptr_t>(data) / kPage * kPage;
  const std::uintptr_t end =
      (reinterpret_cast<std::uintptr_t>(data) + bytes + kPage - 1) / kPage * kPage;
#if defined(MADV_POPULATE_WRITE)
  // An empty range tells whether the kernel knows the advice (EINVAL if not) and nothing else.
  if (madvise(reinterpret_cast<void*>(begin), 0, MADV_POPULATE_WRITE) == 0) {
    if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0) {
      return Status::Ok();
    }
    return Unavailable("backing " + std::to_string(bytes) +
                       " bytes of host memory failed: " + std::strerror(errno));
  }
#endif
  // A kernel without MADV_POPULATE_WRITE: a write per page faults it in. An atomic
  // read-modify-write of 0 keeps whatever another thread has stored there.
  for (std::uintptr_t page = begin; page < end; page += kPage) {
    __atomic_fetch_add(reinterpret_cast<unsigned char*>(page), 0, __ATOMIC_RELAXED);
  }
  return Status::Ok();
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { Release(); }

void HostBuffer::Release() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace ctxpar
