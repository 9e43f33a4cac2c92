// The DeepSeek-V3 MoE block on synthetic weights: the router's group-limited top-k, the block
// against a float64 reference of HF's computation over 1, 2 and 4 ranks with --moe-a2a-backend
// none (every EP size) and deepep, and deepep's dispatch and combine bytes for a routing forced
// by the correction bias.
#include "models/deepseek_moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "compute/cpu_compute.h"
#include "ctxpar/communicator.h"
#include "loader/safetensors_builder.h"

namespace ctxpar::model {
namespace {

using testing::AsBytes;
using testing::TensorBytes;

DeepseekV3Config MoeConfig() {
  DeepseekV3Config c;
  c.architecture = "DeepseekV3ForCausalLM";
  c.hidden_size = 32;
  c.moe_intermediate_size = 16;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 4;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.n_group = 4;
  c.topk_group = 2;
  c.routed_scaling_factor = 2.5;
  c.norm_topk_prob = true;
  return c;
}

float Logit(double p) { return static_cast<float>(std::log(p / (1.0 - p))); }

TEST(DeepseekRouter, GroupLimitedTopKWithTheCorrectionBias) {
  const DeepseekV3Config c = MoeConfig();
  // Groups of two: {0,1} sums 1.0, {2,3} 1.2, {4,5} 1.1, {6,7} 0.4. Expert 0 scores best but its
  // group does not make the top 2 groups.
  const float logits[] = {Logit(0.9),  Logit(0.1),  Logit(0.6), Logit(0.6),
                          Logit(0.55), Logit(0.55), Logit(0.2), Logit(0.2)};
  const float no_bias[8] = {};
  Route r = RouteToken(c, logits, no_bias);
  EXPECT_EQ(r.experts, (std::vector<int>{2, 3}));
  ASSERT_EQ(r.weights.size(), 2u);
  EXPECT_NEAR(r.weights[0], 1.25, 1e-6);  // 0.6 / 1.2 * 2.5
  // The bias moves the choice (group {0,1} now sums 1.3, expert 0 wins) but not the weights.
  const float bias[8] = {0.0f, 0.3f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  r = RouteToken(c, logits, bias);
  EXPECT_EQ(r.experts, (std::vector<int>{0, 2}));
  EXPECT_NEAR(r.weights[0], 0.9 / 1.5 * 2.5, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.6 / 1.5 * 2.5, 1e-6);
  // Choices below 0 in the kept groups ({0,1} sums 0.7, {2,3} -0.2) still beat the experts of
  // the other groups.
  const float negative[8] = {0.0f, -0.3f, -0.7f, -0.7f, -0.8f, -0.8f, -0.5f, -0.5f};
  EXPECT_EQ(RouteToken(c, logits, negative).experts, (std::vector<int>{0, 2}));
  DeepseekV3Config plain = c;
  plain.norm_topk_prob = false;
  EXPECT_NEAR(RouteToken(plain, logits, bias).weights[0], 0.9 * 2.5, 1e-6);
}

// DeepSeek-V2's router (transformers' DeepseekV2TopkRouter, group_limited_greedy): softmax
// scores, each group scored by its best expert. Groups of two: {0,1} best e^2, {2,3} e^1.5 twice
// (the larger sum, the smaller best), {4,5} e^1.8: the groups {0,1} and {4,5} are kept, where V3's
// router (sigmoid, the sum of the top two) keeps {2,3} and takes experts 2 and 3. Weights: the
// softmax probabilities (float64 here) times the scaling factor, not renormalized.
TEST(DeepseekRouter, SoftmaxRouterScoresEachGroupByItsBestExpert) {
  DeepseekV3Config c = MoeConfig();
  c.softmax_router = true;
  c.norm_topk_prob = false;
  const float logits[] = {2.0f, -5.0f, 1.5f, 1.5f, 1.8f, -5.0f, 0.0f, 0.0f};
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l));
  const Route r = RouteToken(c, logits, nullptr);
  EXPECT_EQ(r.experts, (std::vector<int>{0, 4}));
  ASSERT_EQ(r.weights.size(), 2u);
  EXPECT_NEAR(r.weights[0], std::exp(2.0) / sum * 2.5, 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(1.8) / sum * 2.5, 1e-6);
  c.softmax_router = false;
  const float no_bias[8] = {};
  EXPECT_EQ(RouteToken(c, logits, no_bias).experts, (std::vector<int>{2, 3}));
}

// A synthetic one-layer checkpoint (F32) holding the MoE's tensors.
class DeepseekMoeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ctxpar_moe_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<float> Random(std::size_t n, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng_);
    return v;
  }
  void Add(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
    w_[name] = v;
    tensors_.push_back({name, "F32", std::move(shape), AsBytes(v)});
  }
  void Mlp(const std::string& p, int64_t inter, int64_t d) {
    Add(p + "gate_proj.weight", {inter, d}, Random(inter * d, 0.3f));
    Add(p + "up_proj.weight", {inter, d}, Random(inter * d, 0.3f));
    Add(p + "down_proj.weight", {d, inter}, Random(inter * d, 0.3f));
  }
  // Writes the checkpoint: random router (or zeros), the given bias, random experts.
  Expected<std::shared_ptr<const DeepseekWeights>> Write(const DeepseekV3Config& c,
                                                         bool zero_router,
                                                         std::vector<float> bias) {
    const int64_t d = c.hidden_size, E = c.n_routed_experts, I = c.moe_intermediate_size;
    Add("model.layers.0.post_attention_layernorm.weight", {d}, Random(d, 0.1f));
    for (float& x : w_["model.layers.0.post_attention_layernorm.weight"]) x += 1.0f;
    tensors_.back().bytes = AsBytes(w_["model.layers.0.post_attention_layernorm.weight"]);
    Add("model.layers.0.mlp.gate.weight", {E, d},
        zero_router ? std::vector<float>(E * d, 0.0f) : Random(E * d, 0.3f));
    Add("model.layers.0.mlp.gate.e_score_correction_bias", {E}, std::move(bias));
    for (int e = 0; e < E; ++e) Mlp("model.layers.0.mlp.experts." + std::to_string(e) + ".", I, d);
    Mlp("model.layers.0.mlp.shared_experts.", I * c.n_shared_experts, d);
    const auto image = testing::SafetensorsImage(tensors_);
    std::ofstream(dir_ / "model.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char*>(image.data()), std::streamsize(image.size()));
    CTXPAR_ASSIGN_OR_RETURN(SafetensorsCheckpoint ckpt, SafetensorsCheckpoint::Open(dir_.string()));
    return SafetensorsDeepseekWeights(
        std::make_shared<const SafetensorsCheckpoint>(std::move(ckpt)));
  }

  // HF's MoE block in float64 (the router's scores in fp32, as HF computes them): x + MoE(x).
  std::vector<double> Reference(const DeepseekV3Config& c, const std::vector<float>& x, int T) {
    const int d = c.hidden_size, E = c.n_routed_experts, I = c.moe_intermediate_size;
    const std::string p = "model.layers.0.mlp.";
    auto mlp = [&](const std::string& m, const std::vector<double>& in, int inter) {
      std::vector<double> act(inter), out(d, 0.0);
      for (int i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int k = 0; k < d; ++k) {
          g += w_[m + "gate_proj.weight"][i * d + k] * in[k];
          u += w_[m + "up_proj.weight"][i * d + k] * in[k];
        }
        act[i] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int o = 0; o < d; ++o) {
        for (int i = 0; i < inter; ++i)
          out[o] += w_[m + "down_proj.weight"][o * inter + i] * act[i];
      }
      return out;
    };
    std::vector<double> y(std::size_t(T) * d);
    for (int t = 0; t < T; ++t) {
      std::vector<double> xn(d);
      double ss = 0;
      for (int k = 0; k < d; ++k) ss += double(x[t * d + k]) * x[t * d + k];
      for (int k = 0; k < d; ++k) {
        xn[k] = x[t * d + k] / std::sqrt(ss / d + c.rms_norm_eps) *
                w_["model.layers.0.post_attention_layernorm.weight"][k];
      }
      std::vector<float> logits(E);
      for (int e = 0; e < E; ++e) {
        double l = 0;
        for (int k = 0; k < d; ++k) l += w_[p + "gate.weight"][e * d + k] * xn[k];
        logits[e] = static_cast<float>(l);
      }
      const Route r = RouteToken(c, logits.data(), w_[p + "gate.e_score_correction_bias"].data());
      std::vector<double> out = mlp(p + "shared_experts.", xn, I * c.n_shared_experts);
      for (std::size_t j = 0; j < r.experts.size(); ++j) {
        const auto e = mlp(p + "experts." + std::to_string(r.experts[j]) + ".", xn, I);
        for (int k = 0; k < d; ++k) out[k] += r.weights[j] * e[k];
      }
      for (int k = 0; k < d; ++k) y[t * d + k] = x[t * d + k] + out[k];
    }
    return y;
  }

  // The block on tp in-process ranks; every rank's x afterwards, and its TP counters.
  std::vector<std::pair<std::vector<float>, CommCounters>> RunBlock(
      const DeepseekV3Config& c, const DeepseekWeights& weights, int tp, int ep,
      MoeA2aBackend backend, const std::vector<float>& x, int T) {
    std::vector<std::pair<std::vector<float>, CommCounters>> out(tp);
    EngineConfig config;
    config.tp_size = tp;
    config.ep_size = ep;
    config.moe_a2a_backend = backend;
    Status st = RunInProcess(tp, [&](Communicator& world) -> Status {
      const DeepseekShard s = MakeDeepseekShard(c, config, world.rank());
      CTXPAR_ASSIGN_OR_RETURN(FfnWeights w, LoadFfnWeights(weights, c, s, 0));
      compute::CpuCompute compute(nullptr, compute::ActFormat::kF32);
      DeepseekFfn ffn(c, s, world, compute);
      std::vector<float> y = x;
      world.ResetCounters();
      CTXPAR_RETURN_IF_ERROR(ffn.Run(w, T, y.data()));
      out[world.rank()] = {std::move(y), world.counters()};
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }

  std::filesystem::path dir_;
  std::mt19937 rng_{17};
  std::map<std::string, std::vector<float>> w_;
  std::vector<TensorBytes> tensors_;
};

TEST_F(DeepseekMoeTest, EveryLayoutAndBackendMatchesTheFloat64Reference) {
  const DeepseekV3Config c = MoeConfig();
  auto ckpt = Write(c, false, Random(c.n_routed_experts, 0.05f));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const int T = 13;
  const std::vector<float> x = Random(std::size_t(T) * c.hidden_size, 1.0f);
  const std::vector<double> want = Reference(c, x, T);
  struct L {
    int tp, ep;
    MoeA2aBackend backend;
  };
  const L layouts[] = {{1, 1, MoeA2aBackend::kNone},   {2, 1, MoeA2aBackend::kNone},
                       {2, 2, MoeA2aBackend::kNone},   {4, 1, MoeA2aBackend::kNone},
                       {4, 2, MoeA2aBackend::kNone},   {4, 4, MoeA2aBackend::kNone},
                       {2, 2, MoeA2aBackend::kDeepep}, {4, 4, MoeA2aBackend::kDeepep}};
  for (const L& l : layouts) {
    const auto ranks = RunBlock(c, **ckpt, l.tp, l.ep, l.backend, x, T);
    for (int r = 0; r < l.tp; ++r) {
      SCOPED_TRACE("tp " + std::to_string(l.tp) + " ep " + std::to_string(l.ep) + " " +
                   std::string(MoeA2aBackendName(l.backend)) + " rank " + std::to_string(r));
      EXPECT_EQ(ranks[r].first, ranks[0].first);  // every rank holds the same result
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(ranks[r].first[i], want[i], 2e-5 * (1.0 + std::fabs(want[i]))) << i;
      }
    }
  }
}

// Zero router weights score every expert 0.5; the bias makes every token choose experts 0 and 5
// (groups {0,1} and {4,5}), owned by ranks 0 and 2 of 4. 10 tokens: ranks own 3, 3, 3 and 1.
TEST_F(DeepseekMoeTest, DeepepMovesEachTokenOncePerOwningRank) {
  const DeepseekV3Config c = MoeConfig();
  auto ckpt = Write(c, true, {1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.9f, 0.0f, 0.0f});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const int T = 10;
  const std::vector<float> x = Random(std::size_t(T) * c.hidden_size, 1.0f);
  const auto ranks = RunBlock(c, **ckpt, 4, 4, MoeA2aBackend::kDeepep, x, T);
  const uint64_t d = c.hidden_size, k = c.num_experts_per_tok, record = (d + 2 * k) * 4;
  const uint64_t home[] = {3, 3, 3, 1};
  // A rank sends each of its tokens to the owners of experts 0 and 5 other than itself ...
  const uint64_t remote_owners[] = {1, 2, 1, 2};
  // ... and the owners send one weighted sum back for each token of another rank.
  const uint64_t returned[] = {3 + 3 + 1, 0, 3 + 3 + 1, 0};
  for (int r = 0; r < 4; ++r) {
    const CommCounters& cc = ranks[r].second;
    EXPECT_EQ(cc[Collective::kAllToAll].bytes_sent, 3u * 4u) << r;  // the record counts
    EXPECT_EQ(cc[Collective::kAllToAllV].calls, 2u) << r;
    EXPECT_EQ(cc[Collective::kAllToAllV].bytes_sent,
              remote_owners[r] * home[r] * record + returned[r] * d * 4)
        << r;
    EXPECT_EQ(cc[Collective::kAllGather].bytes_sent, 3u * 3u * d * 4u) << r;
  }
  const std::vector<double> want = Reference(c, x, T);
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(ranks[1].first[i], want[i], 2e-5 * (1.0 + std::fabs(want[i]))) << i;
  }
}

}  // namespace
}  // namespace ctxpar::model
