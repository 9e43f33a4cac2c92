// Where memory lives and who hands it out: the part of the compute seam (docs/compute.md) that
// the public API sees. A KV pool maps its pages through a DeviceAllocator, so that the pages
// live where the attention that reads them runs.
//
// Thread safety: an allocator's Allocate may be called from any thread; a DeviceBuffer follows
// the caller's rules.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>

#include "ctxpar/status.h"

namespace ctxpar {

enum class Device { kCpu, kCuda };

// "cpu", "cuda".
std::string_view DeviceName(Device device);

// Memory on a device, freed when the last copy of the buffer is destroyed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // `owner` keeps [data, data + bytes) alive and frees it when destroyed.
  DeviceBuffer(void* data, std::size_t bytes, Device device, std::shared_ptr<void> owner)
      : data_(data), size_(bytes), device_(device), owner_(std::move(owner)) {}

  void* data() const { return data_; }
  std::size_t size() const { return size_; }
  Device device() const { return device_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
  Device device_ = Device::kCpu;
  std::shared_ptr<void> owner_;
};

class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual Device device() const = 0;
  // `bytes` zero-filled bytes, aligned to at least 256, that the host can also read and write
  // through their pointer (host memory; managed memory on a GPU): the KV pool writes its pages
  // from the host. 0 gives an empty buffer; Unavailable when the memory cannot be had.
  virtual Expected<DeviceBuffer> Allocate(std::size_t bytes) const = 0;
};

// Host memory through HostBuffer (2 MiB aligned, transparent huge pages advised).
const DeviceAllocator& HostAllocator();

// Backs a host buffer's pages now rather than at first touch (PopulateHostMemory, host_buffer.h):
// Unavailable when the system cannot give the memory. A no-op for a kCuda buffer, whose
// managed memory the driver places on use.
Status Populate(const DeviceBuffer& buffer);

}  // namespace ctxpar
