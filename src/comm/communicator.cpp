#include "ctxpar/communicator.h"

#include <fmt/format.h>

namespace ctxpar {

Status Communicator::CheckAllToAllVSpans(std::span<const std::size_t> send_counts,
                                         std::span<const std::size_t> send_displs,
                                         std::span<const std::size_t> recv_counts,
                                         std::span<const std::size_t> recv_displs) const {
  const std::size_t n = static_cast<std::size_t>(size());
  if (send_counts.size() == n && send_displs.size() == n && recv_counts.size() == n &&
      recv_displs.size() == n) {
    return Status::Ok();
  }
  return InvalidArgument(fmt::format(
      "AllToAllV: counts and displacements need {} entries each (one per rank), got send "
      "{}/{} and recv {}/{}",
      n, send_counts.size(), send_displs.size(), recv_counts.size(), recv_displs.size()));
}

std::size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
    case DataType::kI32:
      return 4;
    case DataType::kBF16:
      return 2;
    case DataType::kF64:
      return 8;
    case DataType::kU8:
      return 1;
  }
  return 0;
}

std::string_view DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kF32:
      return "f32";
    case DataType::kBF16:
      return "bf16";
    case DataType::kF64:
      return "f64";
    case DataType::kI32:
      return "i32";
    case DataType::kU8:
      return "u8";
  }
  return "?";
}

std::string_view CollectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllGather:
      return "AllGather";
    case Collective::kReduceScatter:
      return "ReduceScatter";
    case Collective::kAllToAll:
      return "AllToAll";
    case Collective::kAllToAllV:
      return "AllToAllV";
    case Collective::kAllReduce:
      return "AllReduce";
    case Collective::kBroadcast:
      return "Broadcast";
    case Collective::kBarrier:
      return "Barrier";
    case Collective::kSplit:
      return "Split";
    case Collective::kSharedWindow:
      return "SharedWindow";
  }
  return "?";
}

CollectiveCounters CommCounters::Total() const {
  CollectiveCounters total;
  for (const CollectiveCounters& c : per_collective) {
    total.calls += c.calls;
    total.bytes_sent += c.bytes_sent;
    total.bytes_received += c.bytes_received;
  }
  return total;
}

}  // namespace ctxpar
