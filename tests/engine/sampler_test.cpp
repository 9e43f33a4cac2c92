// The sampler against float64 references of its distribution and against its contract.
#include "ctxpar/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace ctxpar {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f};

std::vector<double> Softmax(const std::vector<float>& l, double t) {
  std::vector<double> p(l.size());
  double m = -1e300, s = 0.0;
  for (float v : l) m = std::max(m, double(v) / t);
  for (std::size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(double(l[i]) / t - m);
  for (double& v : p) v /= s;
  return p;
}

TEST(Sampler, GreedyTakesLowestIdAmongMaxima) {
  auto s = Sampler::Create({});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->Sample(kLogits), 1);
  EXPECT_EQ(Greedy(kLogits), 1);
}

TEST(Sampler, DistributionIsTemperedSoftmax) {
  auto s = Sampler::Create({.temperature = 0.7f});
  ASSERT_TRUE(s.ok());
  const auto dist = s->Distribution(kLogits);
  const std::vector<double> ref = Softmax(kLogits, 0.7f);
  ASSERT_EQ(dist.size(), kLogits.size());
  const std::vector<int> order = {1, 4, 2, 0, 5, 3};
  for (std::size_t i = 0; i < dist.size(); ++i) {
    EXPECT_EQ(dist[i].first, order[i]);
    EXPECT_NEAR(dist[i].second, ref[order[i]], 1e-12);
  }
}

TEST(Sampler, TopKAndTopPTruncateAndRenormalize) {
  auto k = Sampler::Create({.temperature = 1.0f, .top_k = 3});
  const auto dk = k->Distribution(kLogits);
  ASSERT_EQ(dk.size(), 3u);
  const double z = std::exp(3.0) * 2 + std::exp(2.5);
  EXPECT_NEAR(dk[0].second, std::exp(3.0) / z, 1e-12);
  EXPECT_NEAR(dk[2].second, std::exp(2.5) / z, 1e-12);
  // Softmax mass of ids 1, 4 is 0.7118; top_p 0.7 keeps those two, 0.75 adds id 2.
  const std::vector<double> ref = Softmax(kLogits, 1.0);
  ASSERT_LT(ref[1] + ref[4], 0.75);
  ASSERT_GT(ref[1] + ref[4], 0.7);
  auto p = Sampler::Create({.temperature = 1.0f, .top_p = 0.7f});
  EXPECT_EQ(p->Distribution(kLogits).size(), 2u);
  auto p2 = Sampler::Create({.temperature = 1.0f, .top_p = 0.75f});
  EXPECT_EQ(p2->Distribution(kLogits).size(), 3u);
  auto tiny = Sampler::Create({.temperature = 1.0f, .top_p = 1e-6f, .seed = 9});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(tiny->Sample(kLogits), 1);
}

TEST(Sampler, SeededDrawsFollowTheDistribution) {
  auto s = Sampler::Create({.temperature = 1.0f, .seed = 42});
  const std::vector<double> ref = Softmax(kLogits, 1.0);
  std::map<int, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++counts[s->Sample(kLogits)];
  for (std::size_t id = 0; id < ref.size(); ++id) {
    const double sd = std::sqrt(ref[id] * (1 - ref[id]) / n);
    EXPECT_NEAR(double(counts[int(id)]) / n, ref[id], 5 * sd + 1e-9) << id;
  }
}

TEST(Sampler, SameSeedSameTokens) {
  auto a = Sampler::Create({.temperature = 0.9f, .top_k = 4, .top_p = 0.95f, .seed = 7});
  auto b = Sampler::Create({.temperature = 0.9f, .top_k = 4, .top_p = 0.95f, .seed = 7});
  auto c = Sampler::Create({.temperature = 0.9f, .top_k = 4, .top_p = 0.95f, .seed = 8});
  std::vector<int> ta, tb, tc;
  for (int i = 0; i < 64; ++i) {
    ta.push_back(a->Sample(kLogits));
    tb.push_back(b->Sample(kLogits));
    tc.push_back(c->Sample(kLogits));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, RejectsOutOfRangeConfigsNamingTheField) {
  auto t = Sampler::Create({.temperature = -0.5f});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "temperature must be a finite number >= 0 (0 = greedy), but got -0.5");
  auto k = Sampler::Create({.top_k = -1});
  EXPECT_EQ(k.status().message(), "top_k must be >= 0 (0 = no top-k), but got -1");
  auto p = Sampler::Create({.top_p = 0.0f});
  EXPECT_EQ(p.status().message(), "top_p must be in (0, 1], but got 0");
  auto p2 = Sampler::Create({.top_p = 1.5f});
  EXPECT_EQ(p2.status().message(), "top_p must be in (0, 1], but got 1.5");
  EXPECT_FALSE(Sampler::Create({.temperature = INFINITY}).ok());
}

}  // namespace
}  // namespace ctxpar
