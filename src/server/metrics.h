// Server metrics in Prometheus' text format, with SGLang's `sglang:` names: the engine's gauges and
// counters (EngineSnapshot) and three latency histograms the server times from the updates it
// receives: time to first token, inter-token latency and end-to-end latency.
//
// Labels: model_name (the served name), as SGLang's. Bucket bounds are SGLang's.
//
// Thread safety: ServerMetrics may be used from any thread; a RequestTimer belongs to one choice
// and is fed by the thread that delivers its updates.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/engine.h"

namespace ctxpar::server {

using Clock = std::chrono::steady_clock;

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value, uint64_t count = 1);
  // The _bucket (cumulative, le="+Inf" last), _sum and _count lines, after # HELP and # TYPE.
  void Render(std::string_view name, std::string_view help, std::string_view labels,
              std::string* out) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> buckets_;  // per bound, not cumulative; the last one is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds, uint64_t count);
  void ObserveEndToEnd(double seconds);
  std::string Render(const EngineSnapshot& engine, std::string_view model_name) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
};

// Times one choice: TTFT at the first update with tokens, then each later update of k tokens
// counts k inter-token intervals of (now - previous) / k, E2E at the finish.
class RequestTimer {
 public:
  RequestTimer(ServerMetrics* metrics, Clock::time_point submitted)
      : metrics_(metrics), submitted_(submitted), last_(submitted) {}
  void OnUpdate(const RequestUpdate& update, Clock::time_point now);

 private:
  ServerMetrics* metrics_;
  Clock::time_point submitted_;
  Clock::time_point last_;
  bool first_token_seen_ = false;
};

}  // namespace ctxpar::server
