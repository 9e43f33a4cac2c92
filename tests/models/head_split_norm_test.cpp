// HeadSplitRmsNorm, OLMo 2's q / k norms over all the model's heads while each rank holds some:
// against a float64 RMSNorm of the whole row, and bit for bit the same on every layout (tp,
// dcp, replicated Q) as on one rank, KV heads replicated over ranks included.
#include "models/layers/head_split_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>
#include <vector>

#include "compute/cpu_compute.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "models/layers/attention_shard.h"

namespace ctxpar::model {
namespace {

constexpr int kRows = 5;

struct Whole {
  HeadLayout layout;
  std::vector<float> q, k, q_weight, k_weight;  // [rows, heads * head_dim], weights [width]
};

Whole MakeWhole(const HeadLayout& l, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Whole w{l};
  auto fill = [&](std::vector<float>& v, std::size_t size, float offset) {
    v.resize(size);
    for (float& x : v) x = offset + normal(rng);
  };
  fill(w.q, std::size_t(kRows) * l.num_heads * l.head_dim, 0.0f);
  fill(w.k, std::size_t(kRows) * l.num_kv_heads * l.head_dim, 0.0f);
  fill(w.q_weight, std::size_t(l.num_heads) * l.head_dim, 1.0f);
  fill(w.k_weight, std::size_t(l.num_kv_heads) * l.head_dim, 1.0f);
  return w;
}

// Each rank's rows of q and k (its q_heads and kv_heads), normed; rank order.
std::vector<std::vector<float>> RunLayout(const Whole& w, int tp, int dcp, bool replicate_q) {
  EngineConfig c;
  c.tp_size = tp;
  c.dcp_size = dcp;
  c.dcp_replicate_q_proj = replicate_q;
  const int hd = w.layout.head_dim;
  std::vector<std::vector<float>> out(tp);
  std::mutex mu;
  const Status status = RunInProcess(tp, [&](Communicator& comm) -> Status {
    const HeadShard s = MakeHeadShard(w.layout, c, comm.rank());
    std::vector<float> q, k;
    for (int t = 0; t < kRows; ++t) {
      const float* qt = w.q.data() + std::size_t(t) * w.layout.num_heads * hd;
      const float* kt = w.k.data() + std::size_t(t) * w.layout.num_kv_heads * hd;
      q.insert(q.end(), qt + s.q_first * hd, qt + (s.q_first + s.q_heads) * hd);
      k.insert(k.end(), kt + s.kv_first * hd, kt + (s.kv_first + s.kv_heads) * hd);
    }
    const HeadRows parts[] = {{q.data(), s.q_first, s.q_heads, comm.rank() * s.heads, s.heads,
                               w.layout.num_heads, w.q_weight.data()},
                              {k.data(), s.kv_first, s.kv_heads, s.kv_owned_first, s.kv_owned,
                               w.layout.num_kv_heads, w.k_weight.data()}};
    HeadSplitRmsNorm norm;
    compute::CpuCompute compute(nullptr, compute::ActFormat::kF32);
    CTXPAR_RETURN_IF_ERROR(norm.Run(comm, compute, parts, kRows, hd, 1e-6f));
    q.insert(q.end(), k.begin(), k.end());
    std::lock_guard<std::mutex> lock(mu);
    out[comm.rank()] = std::move(q);
    return Status::Ok();
  });
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

// The float64 norm of one whole row.
std::vector<double> Reference(const float* x, const float* weight, int width) {
  double sum = 0.0;
  for (int c = 0; c < width; ++c) sum += double(x[c]) * x[c];
  const double scale = 1.0 / std::sqrt(sum / width + 1e-6);
  std::vector<double> y(width);
  for (int c = 0; c < width; ++c) y[c] = x[c] * scale * weight[c];
  return y;
}

TEST(HeadSplitRmsNorm, OneRankIsTheFloat64Norm) {
  const HeadLayout l{
      .num_heads = 9, .num_kv_heads = 3, .head_dim = 64, .dim = 576, .ffn_dim = 1536};
  const Whole w = MakeWhole(l, 1);
  const std::vector<float> got = RunLayout(w, 1, 1, false)[0];
  const int qw = l.num_heads * l.head_dim, kw = l.num_kv_heads * l.head_dim;
  for (int t = 0; t < kRows; ++t) {
    const std::vector<double> q = Reference(w.q.data() + t * qw, w.q_weight.data(), qw);
    const std::vector<double> k = Reference(w.k.data() + t * kw, w.k_weight.data(), kw);
    for (int c = 0; c < qw; ++c) EXPECT_NEAR(got[t * qw + c], q[c], 1e-5 * (1 + std::abs(q[c])));
    for (int c = 0; c < kw; ++c) {
      EXPECT_NEAR(got[kRows * qw + t * kw + c], k[c], 1e-5 * (1 + std::abs(k[c])));
    }
  }
}

TEST(HeadSplitRmsNorm, EveryLayoutGivesOneRanksBits) {
  struct Case {
    HeadLayout layout;
    int tp, dcp;
    bool replicate_q;
  };
  const HeadLayout smollm2{
      .num_heads = 9, .num_kv_heads = 3, .head_dim = 64, .dim = 576, .ffn_dim = 1536};
  const HeadLayout olmo{
      .num_heads = 4, .num_kv_heads = 2, .head_dim = 32, .dim = 128, .ffn_dim = 128};
  const Case cases[] = {{smollm2, 3, 1, false}, {smollm2, 3, 3, false}, {smollm2, 3, 3, true},
                        {smollm2, 9, 3, false}, {olmo, 2, 2, true},     {olmo, 4, 2, false},
                        {olmo, 4, 1, false}};
  for (const Case& c : cases) {
    const Whole w = MakeWhole(c.layout, 2);
    const std::vector<float> one = RunLayout(w, 1, 1, false)[0];
    const int hd = c.layout.head_dim;
    const int qw = c.layout.num_heads * hd, kw = c.layout.num_kv_heads * hd;
    EngineConfig config;
    config.tp_size = c.tp;
    config.dcp_size = c.dcp;
    config.dcp_replicate_q_proj = c.replicate_q;
    const std::vector<std::vector<float>> ranks = RunLayout(w, c.tp, c.dcp, c.replicate_q);
    for (int r = 0; r < c.tp; ++r) {
      const HeadShard s = MakeHeadShard(c.layout, config, r);
      const int q_row = s.q_heads * hd, k_row = s.kv_heads * hd;
      for (int t = 0; t < kRows; ++t) {
        for (int i = 0; i < q_row; ++i) {
          ASSERT_EQ(ranks[r][t * q_row + i], one[t * qw + s.q_first * hd + i])
              << "tp " << c.tp << " dcp " << c.dcp << " rank " << r << " q row " << t;
        }
        for (int i = 0; i < k_row; ++i) {
          ASSERT_EQ(ranks[r][kRows * q_row + t * k_row + i],
                    one[kRows * qw + t * kw + s.kv_first * hd + i])
              << "tp " << c.tp << " dcp " << c.dcp << " rank " << r << " k row " << t;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ctxpar::model
