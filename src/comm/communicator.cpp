#include "ctxpar/communicator.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "ctxpar/error_catalog.h"

namespace ctxpar {

Expected<double> CollectiveTimeoutFromEnv() {
  constexpr double kDefaultSeconds = 300;
  const char* text = std::getenv("CTXPAR_COLLECTIVE_TIMEOUT");
  if (text == nullptr || *text == '\0') return kDefaultSeconds;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v) || v < 0) {
    return CatalogError("CTXPAR-COMM-003", {{"value", PyRepr(text)}});
  }
  return v;
}

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
