// Test helper: how many pages of [p, p + bytes) the kernel reports resident (mincore), in the
// system's page size; 0 when mincore refuses the range.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ctxpar::testing {

inline std::size_t ResidentPages(const void* p, std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, in.data()) != 0) return 0;
  return static_cast<std::size_t>(
      std::count_if(in.begin(), in.end(), [](unsigned char c) { return (c & 1) != 0; }));
}

}  // namespace ctxpar::testing
