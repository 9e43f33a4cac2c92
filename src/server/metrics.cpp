#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace ctxpar::server {
namespace {

std::string LabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// Python's repr of a float (1.0, 0.25, 1e-05), as SGLang's prometheus_client prints them.
std::string PyFloat(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

void Header(std::string_view name, std::string_view help, std::string_view type, std::string* out) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void Sample(std::string_view name, std::string_view help, std::string_view type,
            std::string_view labels, double value, std::string* out) {
  Header(name, help, type, out);
  *out += fmt::format("{}{{{}}} {}\n", name, labels, PyFloat(value));
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value, uint64_t count) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  buckets_[i] += count;
  sum_ += value * static_cast<double>(count);
  count_ += count;
}

void Histogram::Render(std::string_view name, std::string_view help, std::string_view labels,
                       std::string* out) const {
  Header(name, help, "histogram", out);
  *out += fmt::format("{}_sum{{{}}} {}\n", name, labels, PyFloat(sum_));
  uint64_t cumulative = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    cumulative += buckets_[i];
    const std::string le = i < bounds_.size() ? PyFloat(bounds_[i]) : "+Inf";
    *out += fmt::format("{}_bucket{{le=\"{}\",{}}} {}\n", name, le, labels,
                        PyFloat(static_cast<double>(cumulative)));
  }
  *out += fmt::format("{}_count{{{}}} {}\n", name, labels, PyFloat(static_cast<double>(count_)));
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
             0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 15.0, 20.0, 25.0, 30.0}),
      itl_({0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
            0.08,  0.1,   0.2,   0.4,   0.6,  0.8,   1.0,  2.0,   4.0,  6.0,   8.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}) {}

void ServerMetrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.Observe(seconds);
}

void ServerMetrics::ObserveInterTokenLatency(double seconds, uint64_t count) {
  std::lock_guard lock(mu_);
  itl_.Observe(seconds, count);
}

void ServerMetrics::ObserveEndToEnd(double seconds) {
  std::lock_guard lock(mu_);
  e2e_.Observe(seconds);
}

std::string ServerMetrics::Render(const EngineSnapshot& e, std::string_view model_name) const {
  const std::string labels = fmt::format("model_name=\"{}\"", LabelValue(model_name));
  std::string out;
  Sample("sglang:num_running_reqs", "The number of running requests.", "gauge", labels, e.running,
         &out);
  Sample("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "gauge", labels,
         e.queued, &out);
  Sample("sglang:num_used_tokens", "The number of used tokens.", "gauge", labels,
         static_cast<double>(e.used_tokens), &out);
  Sample("sglang:token_usage", "The token usage.", "gauge", labels, e.token_usage, &out);
  Sample("sglang:max_total_num_tokens", "Maximum total number of tokens.", "gauge", labels,
         static_cast<double>(e.max_total_num_tokens), &out);
  Sample("sglang:max_running_requests", "Maximum running requests.", "gauge", labels,
         e.max_running_requests, &out);
  Sample("sglang:num_retracted_reqs", "The number of requests retracted so far.", "gauge", labels,
         static_cast<double>(e.retractions), &out);
  Sample("sglang:prompt_tokens_total", "Number of prefill tokens processed.", "counter", labels,
         static_cast<double>(e.prompt_tokens_total), &out);
  Sample("sglang:generation_tokens_total", "Number of generation tokens processed.", "counter",
         labels, static_cast<double>(e.generation_tokens_total), &out);
  Sample("sglang:cached_tokens_total", "Number of cached prompt tokens.", "counter", labels,
         static_cast<double>(e.cached_tokens_total), &out);
  Sample("sglang:cache_hit_rate", "The prefix cache hit rate.", "gauge", labels,
         e.prompt_tokens_total > 0 ? static_cast<double>(e.cached_tokens_total) /
                                         static_cast<double>(e.prompt_tokens_total)
                                   : 0.0,
         &out);
  // SGLang's: the tokens a verify step gives on average (its accepted drafts + 1), since the start;
  // 0 before any (or without --speculative-algorithm).
  Sample("sglang:spec_accept_length", "The average acceptance length of speculative decoding.",
         "gauge", labels,
         e.spec_verify_steps_total > 0 ? static_cast<double>(e.spec_verify_tokens_total) /
                                             static_cast<double>(e.spec_verify_steps_total)
                                       : 0.0,
         &out);
  Sample("ctxpar:radix_cache_tokens", "Tokens whose KV pages the prefix cache owns.", "gauge",
         labels, static_cast<double>(e.cache_tokens), &out);
  Sample("sglang:num_requests_total", "Number of requests finished.", "counter", labels,
         static_cast<double>(e.requests_finished), &out);
  std::lock_guard lock(mu_);
  ttft_.Render("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
               labels, &out);
  itl_.Render("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              labels, &out);
  e2e_.Render("sglang:e2e_request_latency_seconds",
              "Histogram of End-to-end request latency in seconds", labels, &out);
  return out;
}

void RequestTimer::OnUpdate(const RequestUpdate& update, Clock::time_point now) {
  const auto n = static_cast<uint64_t>(update.tokens.size());
  if (n > 0) {
    const double since = std::chrono::duration<double>(now - last_).count();
    if (!first_token_seen_) {
      metrics_->ObserveTimeToFirstToken(since);
      first_token_seen_ = true;
      if (n > 1) metrics_->ObserveInterTokenLatency(0.0, n - 1);
    } else {
      metrics_->ObserveInterTokenLatency(since / static_cast<double>(n), n);
    }
    last_ = now;
  }
  if (update.finish != FinishReason::kNone) {
    metrics_->ObserveEndToEnd(std::chrono::duration<double>(now - submitted_).count());
  }
}

}  // namespace ctxpar::server
