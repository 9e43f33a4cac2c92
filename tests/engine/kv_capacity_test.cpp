// KvPoolFor with the layer groups of a model (model.h's KvSpec::groups): a synthetic model with
// Gemma 3 270M's KV shape (18 layers, every sixth global, the others a window of 512; one KV head
// of 256, so tp 4 replicates it), no model file needed. The budget is shared as SGLang's hybrid
// pools share it (swa_tokens = full_tokens * swa_full_tokens_ratio), which the test writes out in
// float64; DCP multiplies both groups' tokens by dcp_size at the same --kv-cache-mib; a model
// that declares no group gets the pool it always had.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ctxpar/engine.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/model.h"

namespace ctxpar {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

class SyntheticSource : public ModelSource {
 public:
  explicit SyntheticSource(bool windows, bool sharded = true)
      : windows_(windows), sharded_(sharded) {
    desc_.architecture = "Gemma3ForCausalLM";
    desc_.vocab_size = 16;
    desc_.context_length = 32768;
  }
  const std::string& path() const override { return path_; }
  const ModelInfo& info() const override { return info_; }
  const ModelDesc& desc() const override { return desc_; }
  const ModelShape& shape() const override { return shape_; }
  const Tokenizer* tokenizer() const override { return nullptr; }
  KvSpec KvSpecFor(const EngineConfig& c) const override {
    KvSpec spec{.num_layers = 18,
                .num_kv_heads = 1,
                .head_dim_k = 256,
                .head_dim_v = 256,
                .dtype = c.kv_cache_dtype};
    if (!windows_) return spec;
    KvGroupSpec global{.layers = {}, .window = 0};
    KvGroupSpec local{.layers = {}, .window = 512, .dcp_sharded = sharded_};
    for (int l = 0; l < 18; ++l) (l % 6 == 5 ? global : local).layers.push_back(l);
    spec.groups = {global, local};
    return spec;
  }
  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig&, Communicator&,
                                               compute::Compute&) const override {
    return Unimplemented("a synthetic source has no weights");
  }

 private:
  bool windows_, sharded_;
  std::string path_ = "synthetic";
  ModelInfo info_;
  ModelDesc desc_;
  ModelShape shape_;
};

EngineConfig Config(int tp, int dcp, int64_t mib, double ratio = 0.8,
                    DataType kv = DataType::kF32) {
  EngineConfig c;
  c.kv_cache_dtype = kv;
  c.tp_size = tp;
  c.dcp_size = dcp;
  c.page_size = 16;
  c.kv_cache_mib = mib;
  c.max_running_requests = 256;
  c.swa_full_tokens_ratio = ratio;
  return c;
}

// Bytes of a token of one layer: K and V of one head of 256 in fp32.
constexpr double kLayerTokenBytes = 2 * 256 * 4;

TEST(KvCapacity, WindowGroupSharesTheBudgetBySglangsRatio) {
  const SyntheticSource source(true);
  for (double ratio : {0.8, 0.25, 1.0}) {
    for (int64_t mib : {16, 64, 257}) {
      const Expected<KvPoolOptions> o = KvPoolFor(Config(4, 1, mib, ratio), source, 0);
      ASSERT_TRUE(o.ok()) << o.status().ToString();
      ASSERT_EQ(o->groups.size(), 2u);
      // SGLang: full_tokens = memory / (F * n_full + r * S * n_swa), rounded down to pages.
      const double full = double(mib * kMiB) / (kLayerTokenBytes * (3 + ratio * 15));
      const int64_t full_tokens = KvPool::GroupTokens(*o, 0);
      const int64_t swa_tokens = KvPool::GroupTokens(*o, 1);
      EXPECT_EQ(full_tokens, int64_t(full) / 16 * 16) << "ratio " << ratio << " mib " << mib;
      EXPECT_EQ(swa_tokens, int64_t(double(o->num_pages) * ratio) * 16);
      const double used =
          double(full_tokens) * 3 * kLayerTokenBytes + double(swa_tokens) * 15 * kLayerTokenBytes;
      EXPECT_LE(used, double(mib * kMiB));
      EXPECT_EQ(o->max_slots, std::min<int64_t>(256, o->window_pages));
    }
  }
}

// docs/engine.md's example: Gemma 3 270M's KV at the default 1024 MiB, fp32, dcp 1.
TEST(KvCapacity, TheDocumentedExample) {
  const SyntheticSource source(true);
  const Expected<KvPoolOptions> o = KvPoolFor(Config(1, 1, 1024), source, 0);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(KvPool::GroupTokens(*o, 0), 34944);
  EXPECT_EQ(KvPool::GroupTokens(*o, 1), 27952);
}

// The target: at tp 4 / dcp 4 the full-attention group holds 4 times the tokens of tp 4
// / dcp 1 at the same budget (exactly: the ranks hold the same pages), and so does the window
// group.
TEST(KvCapacity, DcpMultipliesBothGroupsTokens) {
  const SyntheticSource source(true);
  for (int64_t mib : {8, 100, 1024}) {
    const Expected<KvPoolOptions> one = KvPoolFor(Config(4, 1, mib), source, 0);
    const Expected<KvPoolOptions> four = KvPoolFor(Config(4, 4, mib), source, 3);
    ASSERT_TRUE(one.ok() && four.ok());
    for (int g : {0, 1}) {
      const int64_t a = KvPool::GroupTokens(*one, g), b = KvPool::GroupTokens(*four, g);
      EXPECT_EQ(b, 4 * a) << "group " << g << " mib " << mib;
    }
  }
}

// docs/dcp.md's figures for replicating the window group instead (vLLM's choice): every rank
// stores the whole window, so at the same ratio of tokens the window group takes N times the
// pages, and at tp 4 / dcp 4 the full-attention group holds 1.18 times dcp 1's tokens, not 4.
TEST(KvCapacity, AReplicatedWindowGroupTakesTheFullGroupsMemory) {
  const SyntheticSource replicated(true, false);
  const Expected<KvPoolOptions> one = KvPoolFor(Config(4, 1, 1024), replicated, 0);
  const Expected<KvPoolOptions> four = KvPoolFor(Config(4, 4, 1024), replicated, 2);
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_EQ(KvPool::GroupTokens(*one, 0), 34944);
  EXPECT_EQ(KvPool::GroupTokens(*four, 0), 41088);
  EXPECT_EQ(KvPool::GroupTokens(*four, 1), 32864);
}

// A model without groups keeps num_pages = budget / (bytes of a page over every layer).
TEST(KvCapacity, NoGroupsIsThePoolAsItWas) {
  const SyntheticSource source(false);
  const Expected<KvPoolOptions> o = KvPoolFor(Config(4, 2, 64), source, 1);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->groups.empty());
  EXPECT_EQ(o->window_pages, 0);
  EXPECT_EQ(o->num_pages, 64 * kMiB / int64_t(16 * 18 * kLayerTokenBytes));
  EXPECT_EQ(KvPool::GroupTokens(*o, 0), o->num_pages * 16 * 2);
  EXPECT_EQ(KvPool::FirstWindowGroup(*o), -1);
}

// --kv-cache-dtype fp8_e4m3 / fp8_e5m2 store a byte per element: at the same budget twice bf16's
// tokens and four times fp32's, exactly where the budget is whole pages of each (a page of 16
// tokens over 18 layers is 9 * 2^16 bytes in fp32, so budgets of 9k MiB), and otherwise up to the
// rounding down to pages (and, with a window group, to its share).
TEST(KvCapacity, Fp8HoldsTwiceBf16AndFourTimesFp32) {
  const SyntheticSource plain(false), windowed(true);
  auto tokens = [](const SyntheticSource& source, int64_t mib, DataType dtype) {
    const Expected<KvPoolOptions> o = KvPoolFor(Config(4, 2, mib, 0.8, dtype), source, 1);
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    return o.ok() ? KvPool::GroupTokens(*o, 0) : int64_t{-1};
  };
  for (DataType fp8 : {DataType::kF8E4M3, DataType::kF8E5M2}) {
    for (int64_t mib : {9, 63, 576}) {
      const int64_t f32 = tokens(plain, mib, DataType::kF32);
      EXPECT_EQ(tokens(plain, mib, DataType::kBF16), 2 * f32) << mib;
      EXPECT_EQ(tokens(plain, mib, fp8), 4 * f32) << mib;
    }
    for (int64_t mib : {16, 100, 1024}) {
      const int64_t bf16 = tokens(windowed, mib, DataType::kBF16);
      const int64_t got = tokens(windowed, mib, fp8);
      // dcp 2: a page of the pool is 2 * 16 tokens.
      EXPECT_GE(got, 2 * bf16) << mib;
      EXPECT_LT(got, 2 * bf16 + 2 * 32) << mib;
    }
  }
}

// A budget whose window share holds no page is refused like one that holds no page at all.
TEST(KvCapacity, ABudgetWithoutAWindowPageIsRefused) {
  const SyntheticSource source(true);
  const Expected<KvPoolOptions> o = KvPoolFor(Config(4, 1, 1, 0.01), source, 0);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().error_id(), "CTXPAR-KV-002") << o.status().ToString();
}

}  // namespace
}  // namespace ctxpar
