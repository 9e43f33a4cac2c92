// HostBuffer: zero-filled host memory for large pools (KV caches, benchmark buffers), aligned to
// 2 MiB and advised to be backed by transparent huge pages where the kernel allows it. A KV pool
// is read in page-sized runs scattered over gigabytes; with 4 KiB pages every run starts with
// TLB misses, and the memory-bound attention kernels measured 5-10 % slower
// (docs/perf-attention.md).
//
// Thread safety: a HostBuffer is owned by one thread at a time; its memory follows the caller's
// rules.
#pragma once

#include <cstddef>

#include "ctxpar/status.h"

namespace ctxpar {

// Backs every page of [data, data + bytes), memory of an anonymous mapping such as a
// HostBuffer's, now instead of at its first touch (Linux's MADV_POPULATE_WRITE; one write of
// zero per 4 KiB page where the kernel predates it, 5.14): a transparent huge page is zeroed
// when first touched, 2 MiB at once, which took 4-5 ms on a VM whose host backs memory lazily,
// in the middle of whichever step touched it. Unavailable, with the system's reason, when the
// kernel refuses (no memory to give). The memory's contents are kept.
Status PopulateHostMemory(void* data, std::size_t bytes);

class HostBuffer {
 public:
  HostBuffer() = default;
  // bytes >= 0; 0 gives an empty buffer. Unavailable when the memory cannot be mapped.
  static Expected<HostBuffer> Allocate(std::size_t bytes);

  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void Release();

  void* data_ = nullptr;
  std::size_t size_ = 0;
  void* mapping_ = nullptr;
  std::size_t mapping_bytes_ = 0;
};

}  // namespace ctxpar
