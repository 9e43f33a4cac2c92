#include "ctxpar/device.h"

#include "ctxpar/host_buffer.h"

namespace ctxpar {
namespace {

class Host final : public DeviceAllocator {
 public:
  Device device() const override { return Device::kCpu; }
  Expected<DeviceBuffer> Allocate(std::size_t bytes) const override {
    CTXPAR_ASSIGN_OR_RETURN(HostBuffer b, HostBuffer::Allocate(bytes));
    auto owner = std::make_shared<HostBuffer>(std::move(b));
    return DeviceBuffer(owner->data(), bytes, Device::kCpu, owner);
  }
};

}  // namespace

std::string_view DeviceName(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

Status Populate(const DeviceBuffer& buffer) {
  if (buffer.device() != Device::kCpu) return Status::Ok();
  return PopulateHostMemory(buffer.data(), buffer.size());
}

const DeviceAllocator& HostAllocator() {
  static const Host host;
  return host;
}

}  // namespace ctxpar
