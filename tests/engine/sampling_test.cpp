// Sampling against float64 references written here from the formulas (SGLang's order and
// semantics), hand-computed penalties, chi-square bounds on seeded draws, and exact messages.
#include "ctxpar/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>


namespace ctxpar {
namespace {

using Dist = std::vector<std::pair<int32_t, double>>;

// The distribution of sampling.h from its definition: every id in descending logit order (ties
// by lower id), softmax of logits / T in double, the first top_k, renormalised, the smallest
// prefix reaching top_p, the tokens at or above min_p times the first, renormalised.
Dist Reference(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double t = p.temperature;
  const double m = logits[order[0]] / t;
  Dist d;
  for (int32_t id : order) d.emplace_back(id, std::exp(logits[id] / t - m));
  auto normalise = [&] {
    double s = 0.0;
    for (const auto& e : d) s += e.second;
    for (auto& e : d) e.second /= s;
  };
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < d.size()) d.resize(p.top_k);
  normalise();
  double mass = 0.0;
  size_t n = 0;
  while (n < d.size() && mass < p.top_p) mass += d[n++].second;
  d.resize(n);
  const double first = d[0].second;
  std::erase_if(d, [&](const auto& e) { return e.second < p.min_p * first; });
  normalise();
  return d;
}

void ExpectSameDistribution(const Dist& got, const Dist& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << i;
    EXPECT_NEAR(got[i].second, want[i].second, tol) << i;
  }
}

std::vector<float> RandomLogits(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> l(n);
  for (float& v : l) v = normal(rng);
  return l;
}

// Logits whose softmax at temperature 1 is exactly `probs` (up to float rounding).
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<int32_t> Ids(const Dist& d) {
  std::vector<int32_t> ids;
  for (const auto& e : d) ids.push_back(e.first);
  return ids;
}

TEST(Sampling, GreedyOverAVocabularyIsTheFirstMaximum) {
  // Lengths around the 16 lanes and a Gemma-sized row, with the maximum tied in several lanes,
  // in the tail, or only at the first or last id.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(-50, 50);
  for (int n : {1, 15, 16, 17, 33, 262151}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> l(n);
      for (float& x : l) x = float(small(rng)) / 4.0f;
      if (trial == 1) l[n - 1] = 100.0f;
      if (trial == 2) l[0] = 100.0f;
      int want = 0;
      for (int i = 1; i < n; ++i) {
        if (l[i] > l[want]) want = i;
      }
      ASSERT_EQ(Greedy(l), want) << "n " << n << " trial " << trial;
    }
  }
}

TEST(Sampling, GreedyTakesTheLowestIdAmongMaxima) {
  const std::vector<float> l = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f};
  EXPECT_EQ(Greedy(l), 1);
  RequestSampler s({.temperature = 0.0f, .top_k = 2}, {}, 5);
  EXPECT_EQ(s.Sample(l), 1);
  EXPECT_TRUE(s.Distribution(l).empty());
}

// Random rows, and rows of long ties (plateaus, a flat row) where top_k and top_p cut inside a
// run of equal logits and must keep the lower ids.
TEST(Sampling, FiltersMatchTheFloat64Reference) {
  std::vector<float> plateau(1000), flat(1000, 0.0f);
  for (size_t i = 0; i < plateau.size(); ++i) plateau[i] = static_cast<float>(i % 5) * 0.25f;
  const std::vector<std::vector<float>> rows = {RandomLogits(7, 2.5f, 24),
                                                RandomLogits(1000, 2.5f, 1017), plateau, flat};
  for (size_t row = 0; row < rows.size(); ++row) {
    const std::vector<float>& l = rows[row];
    for (float t : {0.5f, 1.0f, 1.7f}) {
      for (int k : {-1, 0, 1, 5, 50, 999, 1000, 5000}) {
        for (float top_p : {1.0f, 0.9f, 0.55f, 0.01f}) {
          for (float min_p : {0.0f, 0.05f, 0.5f}) {
            SCOPED_TRACE(testing::Message() << "row " << row << " t " << t << " top_k " << k
                                            << " top_p " << top_p << " min_p " << min_p);
            const SamplingParams p{.temperature = t, .top_p = top_p, .top_k = k, .min_p = min_p};
            RequestSampler s(p, {}, 1);
            ExpectSameDistribution(s.Distribution(l), Reference(l, p), 1e-12);
          }
        }
      }
    }
  }
}

// A flat row of SmolLM2's vocabulary size: the nucleus is thousands of tokens, past the prefix
// the sampler first orders.
TEST(Sampling, LargeNucleusOfAFullVocabulary) {
  const std::vector<float> l = RandomLogits(49152, 1.0f, 3);
  const SamplingParams p{.temperature = 1.5f, .top_p = 0.8f, .min_p = 0.01f};
  const Dist want = Reference(l, p);
  ASSERT_GT(want.size(), 1024u);
  RequestSampler s(p, {}, 1);
  ExpectSameDistribution(s.Distribution(l), want, 1e-12);
}

TEST(Sampling, DocumentedSemanticsOfEachFilter) {
  const std::vector<float> l = LogitsOf({0.4, 0.3, 0.2, 0.1});
  auto ids = [&](SamplingParams p) { return Ids(RequestSampler(p, {}, 0).Distribution(l)); };
  using V = std::vector<int32_t>;
  // top_p: the smallest prefix whose mass reaches top_p; never empty.
  EXPECT_EQ(ids({.top_p = 0.65f}), (V{0, 1}));
  EXPECT_EQ(ids({.top_p = 0.75f}), (V{0, 1, 2}));
  EXPECT_EQ(ids({.top_p = 1e-6f}), (V{0}));
  // top_p reads the mass after top_k's renormalisation: 0.4 / 0.7 reaches 0.5 alone.
  EXPECT_EQ(ids({.top_p = 0.5f, .top_k = 2}), (V{0}));
  // min_p is relative to the largest probability: 0.2 * 0.4 = 0.08 keeps 0.1; 0.3 drops it.
  EXPECT_EQ(ids({.min_p = 0.2f}), (V{0, 1, 2, 3}));
  EXPECT_EQ(ids({.min_p = 0.3f}), (V{0, 1, 2}));
  EXPECT_EQ(ids({.min_p = 1.0f}), (V{0}));
  // top_k among ties keeps the lower ids.
  const std::vector<float> tied = {2.0f, 1.0f, 2.0f, 2.0f, 0.5f};
  const Dist two = RequestSampler({.top_k = 2}, {}, 0).Distribution(tied);
  EXPECT_EQ(Ids(two), (V{0, 2}));
  EXPECT_NEAR(two[0].second, 0.5, 1e-15);
  EXPECT_EQ(Greedy(tied), 0);
}

// The row one step sees after SGLang's penalties, computed by hand: prompt {1, 3}, output
// {2, 2, 4}, repetition 1.3, frequency 0.4, presence 0.25.
TEST(Sampling, PenaltiesFollowSglangFormulas) {
  const SamplingParams p{
      .repetition_penalty = 1.3f, .frequency_penalty = 0.4f, .presence_penalty = 0.25f};
  const std::vector<int32_t> prompt = {1, 3};
  RequestSampler s(p, prompt, 9);
  for (int32_t forced : {2, 2, 4}) {
    std::vector<float> row(5, 0.0f);
    row[forced] = 1000.0f;  // every other token has probability exp(-1000 / 1.3) = 0
    ASSERT_EQ(s.Sample(row), forced);
  }
  const std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, -0.5f};
  const std::vector<double> penalized = {
      2.0,                          // never seen
      -1.0 * 1.3,                   // prompt, negative: multiplied
      0.5 / 1.3 - 2 * 0.4 - 0.25,   // output twice, positive: divided, then both penalties
      3.0 / 1.3,                    // prompt, positive: divided
      -0.5 * 1.3 - 1 * 0.4 - 0.25,  // output once, negative: multiplied, then both penalties
  };
  double z = 0.0;
  for (double v : penalized) z += std::exp(v);
  std::map<int32_t, double> got;
  for (const auto& [id, prob] : s.Distribution(l)) got[id] = prob;
  ASSERT_EQ(got.size(), 5u);
  for (int32_t id = 0; id < 5; ++id) EXPECT_NEAR(got[id], std::exp(penalized[id]) / z, 1e-6);
}

TEST(Sampling, RepetitionPenaltyChangesTheGreedyToken) {
  const std::vector<float> l = {3.0f, 2.9f, -4.0f};
  const std::vector<int32_t> prompt = {0};
  EXPECT_EQ(RequestSampler({.temperature = 0.0f}, prompt, 0).Sample(l), 0);
  // 3 / 1.1 = 2.73 < 2.9.
  EXPECT_EQ(RequestSampler({.temperature = 0.0f, .repetition_penalty = 1.1f}, prompt, 0).Sample(l),
            1);
  // Presence only counts output tokens: the prompt's token 0 keeps 3.0.
  RequestSampler pres({.temperature = 0.0f, .presence_penalty = 0.2f}, prompt, 0);
  EXPECT_EQ(pres.Sample(l), 0);
  EXPECT_EQ(pres.Sample(l), 1);  // 3.0 - 0.2 < 2.9
}

// Pearson's chi-square of `n` seeded draws against the reference; a draw outside its support
// fails at once. The bound is the 0.9999 quantile for up to 9 degrees of freedom (33.7): a
// correct sampler passes it with these seeds; a wrong filter or order is off by thousands.
void ExpectDrawsFollow(const std::vector<float>& l, const SamplingParams& p, uint64_t seed) {
  const Dist want = Reference(l, p);
  ASSERT_LE(want.size(), 10u);
  RequestSampler s(p, {}, seed);
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[s.Sample(l)];
  double chi2 = 0.0;
  for (const auto& [id, prob] : want) {
    const double expected = prob * n;
    chi2 += (counts[id] - expected) * (counts[id] - expected) / expected;
    counts.erase(id);
  }
  EXPECT_TRUE(counts.empty()) << "drew a token outside the distribution: " << counts.begin()->first;
  EXPECT_LT(chi2, 33.7);
}

TEST(Sampling, SeededDrawsFollowTheDistribution) {
  const std::vector<float> l = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f, 1.5f, 2.0f};
  ExpectDrawsFollow(l, {.temperature = 1.0f}, 42);
  ExpectDrawsFollow(l, {.temperature = 0.7f, .top_k = 5}, 43);
  ExpectDrawsFollow(l, {.temperature = 1.3f, .top_p = 0.8f}, 44);
  ExpectDrawsFollow(l, {.temperature = 1.0f, .min_p = 0.15f}, 45);
  ExpectDrawsFollow(l, {.temperature = 2.0f, .top_p = 0.9f, .top_k = 6, .min_p = 0.2f}, 46);
}

TEST(Sampling, SeedsAreReproducibleAndIndependentPerRequest) {
  const std::vector<float> l = RandomLogits(300, 1.0f, 8);
  const SamplingParams p{.temperature = 0.9f, .top_p = 0.95f, .top_k = 40};
  auto alone = [&](uint64_t seed) {
    RequestSampler s(p, {}, seed);
    std::vector<int32_t> t;
    for (int i = 0; i < 200; ++i) t.push_back(s.Sample(l));
    return t;
  };
  const std::vector<int32_t> a = alone(7), b = alone(8);
  EXPECT_EQ(alone(7), a);
  EXPECT_NE(a, b);
  // Two requests stepped together, as in one batch, draw what each draws alone.
  RequestSampler sa(p, {}, 7), sb(p, {}, 8);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    tb.push_back(sb.Sample(l));
    ta.push_back(sa.Sample(l));
  }
  EXPECT_EQ(ta, a);
  EXPECT_EQ(tb, b);
}

TEST(Sampling, LogprobsAreAFloat64LogSoftmax) {
  std::vector<float> l = RandomLogits(5000, 4.0f, 21);
  l[10] = l[11] = 30.0f;  // a tie at the top
  long double z = 0.0L;
  for (float v : l) z += std::exp(static_cast<long double>(v) - 30.0L);
  auto ref = [&](int32_t id) { return static_cast<double>(l[id] - 30.0L - std::log(z)); };
  const TokenLogprob lp = ComputeLogprob(l, 123, 5);
  EXPECT_EQ(lp.token, 123);
  EXPECT_NEAR(lp.logprob, ref(123), 1e-5);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  ASSERT_EQ(lp.top.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(lp.top[i].first, order[i]);
    EXPECT_NEAR(lp.top[i].second, ref(order[i]), 1e-5);
  }
  EXPECT_EQ(lp.top[0].first, 10);
  EXPECT_TRUE(ComputeLogprob(l, 0, 0).top.empty());
  const std::vector<float> three = {0.0f, 0.0f, std::log(2.0f)};
  const TokenLogprob all = ComputeLogprob(three, 0, 10);
  ASSERT_EQ(all.top.size(), 3u);
  EXPECT_NEAR(all.logprob, std::log(0.25), 1e-7);
  EXPECT_EQ(all.top[0].first, 2);
  EXPECT_EQ(all.top[1].first, 0);
  EXPECT_NEAR(all.top[0].second, std::log(0.5), 1e-7);
}

TEST(Sampling, ValidationNamesTheFieldTheValueAndTheRange) {
  struct Case {
    SamplingParams p;
    const char* message;
  };
  const Case cases[] = {
      {{.max_new_tokens = -1}, "max_new_tokens must be at least 0, got -1."},
      {{.temperature = -0.5f},
       "temperature must be a non-negative finite number (0 is greedy), got -0.5."},
      {{.temperature = INFINITY},
       "temperature must be a non-negative finite number (0 is greedy), got inf."},
      {{.temperature = NAN},
       "temperature must be a non-negative finite number (0 is greedy), "
       "got nan."},
      {{.top_p = 0.0f}, "top_p must be in (0, 1], got 0."},
      {{.top_p = 1.5f}, "top_p must be in (0, 1], got 1.5."},
      {{.top_k = -2}, "top_k must be -1 or 0 (all tokens) or at least 1, got -2."},
      {{.min_p = -0.1f}, "min_p must be in [0, 1], got -0.1."},
      {{.min_p = 2.0f}, "min_p must be in [0, 1], got 2."},
      {{.repetition_penalty = 0.0f},
       "repetition_penalty must be in (0, 2] (1 is no penalty), got 0."},
      {{.repetition_penalty = 2.5f},
       "repetition_penalty must be in (0, 2] (1 is no penalty), got 2.5."},
      {{.frequency_penalty = 2.5f}, "frequency_penalty must be in [-2, 2], got 2.5."},
      {{.presence_penalty = -3.0f}, "presence_penalty must be in [-2, 2], got -3."},
      {{.top_logprobs_num = -1}, "top_logprobs_num must be at least 0, got -1."},
  };
  for (const Case& c : cases) {
    const Status s = ValidateSamplingParams(c.p, 100);
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(s.error_id(), "CTXPAR-SAMPLING-001") << c.message;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
  }
  for (int32_t bad : {-1, 100}) {
    const Status s = ValidateSamplingParams({.stop_token_ids = {2, bad}}, 100);
    EXPECT_EQ(s.message(),
              "stop_token_ids must be token ids in [0, 99], got " + std::to_string(bad) + ".");
    EXPECT_EQ(s.error_id(), "CTXPAR-SAMPLING-002");
  }
  const SamplingParams edges{.max_new_tokens = 0,
                             .temperature = 0.0f,
                             .top_p = 1.0f,
                             .top_k = -1,
                             .min_p = 1.0f,
                             .repetition_penalty = 2.0f,
                             .frequency_penalty = -2.0f,
                             .presence_penalty = 2.0f,
                             .stop_token_ids = {0, 99}};
  EXPECT_TRUE(ValidateSamplingParams(edges, 100).ok());
  EXPECT_TRUE(ValidateSamplingParams({.top_k = 0}, 100).ok());
}

}  // namespace
}  // namespace ctxpar
