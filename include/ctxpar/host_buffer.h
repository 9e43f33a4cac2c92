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
