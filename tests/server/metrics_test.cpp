// Server metrics: histogram buckets against counts computed here from the observations, the
// Prometheus text format, and the latencies a RequestTimer derives from update times.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <regex>
#include <sstream>
#include <string>

namespace ctxpar::server {
namespace {

TEST(Histogram, CumulativeBucketsSumAndCount) {
  const std::vector<double> bounds = {0.1, 0.5, 1.0};
  Histogram h(bounds);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(0.0, 1.5);
  std::vector<double> values;
  for (int i = 0; i < 200; ++i) values.push_back(dist(rng));
  values.push_back(0.5);  // on a bound: counted in that bucket (le is inclusive)
  double sum = 0.0;
  for (double v : values) {
    h.Observe(v);
    sum += v;
  }
  std::string text;
  h.Render("x:lat", "Latency.", "model_name=\"m\"", &text);
  EXPECT_NE(text.find("# TYPE x:lat histogram\n"), std::string::npos);
  const char* const les[] = {"0.1", "0.5", "1.0", "+Inf"};  // Python's float repr, as SGLang's
  for (size_t b = 0; b <= bounds.size(); ++b) {
    const double bound = b < bounds.size() ? bounds[b] : 1e300;
    const auto expected =
        std::count_if(values.begin(), values.end(), [&](double v) { return v <= bound; });
    const std::string prefix = std::string("x:lat_bucket{le=\"") + les[b] + "\",model_name=\"m\"} ";
    const size_t at = text.find(prefix);
    ASSERT_NE(at, std::string::npos) << prefix << "\n" << text;
    EXPECT_EQ(std::stoll(text.substr(at + prefix.size())), expected) << les[b];
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("x:lat_sum\\{model_name=\"m\"\\} (\\S+)\n")));
  EXPECT_NEAR(std::stod(m[1]), sum, 1e-9 * sum);
  EXPECT_NE(text.find("x:lat_count{model_name=\"m\"} 201.0\n"), std::string::npos);
}

double Value(const std::string& text, const std::string& sample) {
  const size_t at = text.find(sample + " ");
  EXPECT_NE(at, std::string::npos) << sample;
  return at == std::string::npos ? -1 : std::stod(text.substr(at + sample.size() + 1));
}

TEST(ServerMetrics, SglangNamesFromTheSnapshotAndTimers) {
  ServerMetrics metrics;
  const Clock::time_point t0{};
  RequestTimer timer(&metrics, t0);
  RequestUpdate u;
  u.tokens = {1};
  timer.OnUpdate(u, t0 + std::chrono::milliseconds(300));  // TTFT 0.3 s
  u.tokens = {2, 3};
  timer.OnUpdate(u, t0 + std::chrono::milliseconds(500));  // two intervals of 0.1 s
  u.tokens.clear();
  u.finish = FinishReason::kLength;
  timer.OnUpdate(u, t0 + std::chrono::milliseconds(600));  // E2E 0.6 s

  EngineSnapshot s;
  s.running = 3;
  s.queued = 2;
  s.max_total_num_tokens = 4096;
  s.used_tokens = 1024;
  s.token_usage = 0.25;
  s.retractions = 5;
  s.prompt_tokens_total = 100;
  s.generation_tokens_total = 50;
  s.cached_tokens_total = 40;
  s.cache_tokens = 512;
  s.spec_verify_steps_total = 20;  // 20 verify steps gave 50 tokens
  s.spec_verify_tokens_total = 50;
  const std::string text = metrics.Render(s, "sm\"ol");
  const std::string l = "{model_name=\"sm\\\"ol\"}";
  EXPECT_EQ(Value(text, "sglang:num_running_reqs" + l), 3);
  EXPECT_EQ(Value(text, "sglang:num_queue_reqs" + l), 2);
  EXPECT_EQ(Value(text, "sglang:token_usage" + l), 0.25);
  EXPECT_EQ(Value(text, "sglang:max_total_num_tokens" + l), 4096);
  EXPECT_EQ(Value(text, "sglang:num_retracted_reqs" + l), 5);
  EXPECT_EQ(Value(text, "sglang:prompt_tokens_total" + l), 100);
  EXPECT_EQ(Value(text, "sglang:generation_tokens_total" + l), 50);
  EXPECT_EQ(Value(text, "sglang:cached_tokens_total" + l), 40);
  EXPECT_EQ(Value(text, "sglang:cache_hit_rate" + l), 0.4);
  EXPECT_EQ(Value(text, "ctxpar:radix_cache_tokens" + l), 512);
  EXPECT_EQ(Value(text, "sglang:spec_accept_length" + l), 2.5);
  EXPECT_NEAR(Value(text, "sglang:time_to_first_token_seconds_sum" + l), 0.3, 1e-9);
  EXPECT_EQ(Value(text, "sglang:time_to_first_token_seconds_count" + l), 1);
  EXPECT_NEAR(Value(text, "sglang:inter_token_latency_seconds_sum" + l), 0.2, 1e-9);
  EXPECT_EQ(Value(text, "sglang:inter_token_latency_seconds_count" + l), 2);
  EXPECT_NEAR(Value(text, "sglang:e2e_request_latency_seconds_sum" + l), 0.6, 1e-9);
  // Every sample line belongs to a metric announced by # TYPE.
  std::istringstream lines(text);
  std::string line, typed;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(typed, 0), 0u) << line;
    }
  }
}

}  // namespace
}  // namespace ctxpar::server
