// Numeric options of the commands that the launch flags do not cover (--threads, the
// benchmarks' lists and durations): the whole text must be the number, ranges follow the
// machine, and a refusal is a catalog error that says which rule the value broke.
#pragma once

#include <string_view>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar::cli {

// The hardware threads of this machine (std::thread::hardware_concurrency, at least 1).
int HardwareThreads();

// --threads: 1 to HardwareThreads(), and 0 as well where 0 means the default; CTXPAR-FLAG-007
// otherwise (the message states the machine's limit).
Status CheckThreads(std::string_view flag, long long value, bool zero_means_default);

// A comma-separated list of counts such as "4k,32k" (k: times 1024), each within [min, max];
// CTXPAR-FLAG-008 for an item that is not digits with an optional k ("1e9", "4.5k", "") or is
// out of range.
Expected<std::vector<int>> ParseCountList(std::string_view flag, std::string_view text, int min,
                                          int max);

// A duration in seconds within [min, max]; NaN and infinities are refused (CTXPAR-FLAG-008).
Status CheckSeconds(std::string_view flag, double value, double min, double max);

}  // namespace ctxpar::cli
