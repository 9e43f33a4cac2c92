// The exact merge (DcpOptions::exact, merge.h's ExactAdd / ExactFinish): the same problem on every
// layout (dcp 1, 2, 4; ag_rs, a2a, shm_a2a; Q gathered or replicated; decode and causal prefill
// rows; a window; bf16 and fp8 KV) gives the same bits, each within the float64 reference's
// tolerance; the fp32 merge of the same chunks does not.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ctxpar/merge.h"
#include "dcp_reference.h"

namespace ctxpar {
namespace {

using testing::DcpCase;

struct Layout {
  int n;
  CombineBackend backend;
  bool replicate_q;
};

constexpr Layout kLayouts[] = {{1, CombineBackend::kAgRs, false},
                               {2, CombineBackend::kAgRs, false},
                               {2, CombineBackend::kA2a, true},
                               {4, CombineBackend::kShmA2a, false},
                               {4, CombineBackend::kA2a, true}};
constexpr int kGroupHeads = 4;

struct Outputs {
  std::vector<float> o, lse;
};

// The case at one layout, every rank's heads gathered.
Outputs RunAt(DcpCase c, const Layout& l) {
  c.n = l.n;
  c.backend = l.backend;
  c.replicate_q = l.replicate_q;
  c.h = kGroupHeads / l.n;
  const testing::DcpProblem p = testing::MakeProblem(c);
  Outputs r;
  r.o.assign(p.ref_o.size(), NAN);
  r.lse.assign(p.ref_lse.size(), NAN);
  EXPECT_TRUE(RunInProcess(c.n, [&](Communicator& comm) {
                testing::RunRankAndCheck(c, p, comm, &r.o, &r.lse);
                return Status::Ok();
              }).ok());
  return r;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<DcpCase> Cases() {
  // Chunks of 16 keys dividing the interleave of 32: each chunk the same keys on every layout.
  const DcpCase base{
      .interleave = 32, .kv_heads = 2, .exact = true, .split_kv_keys = 16, .seed = 77};
  std::vector<DcpCase> cases;
  auto add = [&](std::string name, auto edit) {
    DcpCase c = base;
    c.name = std::move(name);
    edit(c);
    cases.push_back(c);
  };
  add("decode", [](DcpCase& c) { c.lengths = {1, 15, 70, 300}; });
  add("prefill", [](DcpCase& c) {
    c.lengths = {9, 140};
    c.prefill_rows = 40;
  });
  add("window_prefill", [](DcpCase& c) {
    c.lengths = {70, 200};
    c.prefill_rows = 30;
    c.window = 45;
  });
  add("bf16_kv", [](DcpCase& c) {
    c.lengths = {33, 260};
    c.kv_dtype = DataType::kBF16;
  });
  add("head_dim_128_softcap", [](DcpCase& c) {
    c.lengths = {5, 129};
    c.head_dim = 128;
    c.softcap = 1.0f;
  });
  return cases;
}

class ExactMergeTest : public ::testing::TestWithParam<DcpCase> {};

TEST_P(ExactMergeTest, EveryLayoutGivesTheSameBits) {
  const Outputs first = RunAt(GetParam(), kLayouts[0]);
  for (const Layout& l : kLayouts) {
    const Outputs r = RunAt(GetParam(), l);
    EXPECT_TRUE(SameBits(r.o, first.o)) << "dcp " << l.n << " " << CombineBackendName(l.backend)
                                        << (l.replicate_q ? " replicated Q" : "");
    EXPECT_TRUE(SameBits(r.lse, first.lse)) << "dcp " << l.n;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ExactMergeTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// The check above can fail: the fp32 merge of the same chunks, in each rank's order, differs in
// the last bits between dcp 1 and dcp 4.
TEST(ExactMerge, TheFp32MergeOfTheSameChunksDependsOnTheLayout) {
  DcpCase c = Cases()[0];
  c.exact = false;
  const Outputs one = RunAt(c, kLayouts[0]);
  const Outputs four = RunAt(c, kLayouts[3]);
  EXPECT_FALSE(SameBits(one.o, four.o));
}

// Chunks that would not be the same keys on every layout are refused.
TEST(ExactMerge, ChunksMustDivideTheInterleave) {
  auto comms = MakeInProcessGroup(2);
  DcpOptions o{.dcp_size = 2,
               .interleave_size = 24,
               .num_heads = 4,
               .head_dim_qk = 64,
               .head_dim_v = 64,
               .scale = 0.125f,
               .split_kv_keys = 16,
               .exact = true};
  EXPECT_FALSE(DcpAttention::Create(o, comms[0].get()).ok());
  o.split_kv_keys = 0;
  EXPECT_FALSE(DcpAttention::Create(o, comms[0].get()).ok());
  o.interleave_size = 32;
  o.split_kv_keys = 16;
  EXPECT_TRUE(DcpAttention::Create(o, comms[0].get()).ok());
}

// merge.h's sums: chunk states merged exactly agree with the fp32 merge to fp32's rounding, and
// their order does not change a bit.
TEST(ExactMerge, SumsAreOrderFree) {
  const int dv = 3;
  const float o[4][dv] = {
      {1.0f, -2.0f, 0.5f}, {0.25f, 3.0f, -1.0f}, {7.0f, 0.0f, 1e-3f}, {-0.5f, 0.125f, 2.0f}};
  const float lse[4] = {0.3f, -4.0f, 2.5f, -INFINITY};
  float m = -INFINITY, e = 0.0f;
  for (int c = 0; c < 4; ++c) {
    m = std::max(m, lse[c]);
    for (float x : o[c]) e = std::max(e, std::fabs(x));
  }
  double fwd[dv + 1] = {}, bwd[dv + 1] = {};
  for (int c = 0; c < 4; ++c) ExactAdd(o[c], lse[c], dv, m, e, fwd);
  for (int c = 3; c >= 0; --c) ExactAdd(o[c], lse[c], dv, m, e, bwd);
  EXPECT_EQ(std::memcmp(fwd, bwd, sizeof(fwd)), 0);
  float out[dv];
  const float merged = ExactFinish(fwd, dv, m, e, out);
  float scale[4], ref[dv] = {};
  const float ref_lse = MergeScales(lse, 4, 1, scale);
  for (int c = 0; c < 4; ++c) {
    for (int d = 0; d < dv; ++d) ref[d] += scale[c] * o[c][d];
  }
  EXPECT_NEAR(merged, ref_lse, 1e-6);
  for (int d = 0; d < dv; ++d) EXPECT_NEAR(out[d], ref[d], 1e-6) << d;
}

}  // namespace
}  // namespace ctxpar
