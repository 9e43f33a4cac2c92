#include "ctxpar/dcp_attention.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "ctxpar/kv_pool.h"
#include "dcp_reference.h"

namespace ctxpar {
namespace {

using testing::DcpCase;

std::vector<DcpCase> Cases() {
  std::vector<DcpCase> cases;
  const CombineBackend backends[] = {CombineBackend::kAgRs, CombineBackend::kA2a,
                                     CombineBackend::kShmA2a};
  int variant = 0;
  for (int n : {1, 2, 3, 4, 8}) {
    for (CombineBackend b : backends) {
      for (bool rep : {false, true}) {
        if (n == 1 && (b != CombineBackend::kAgRs || rep)) continue;  // refused: DCP-002/004
        if (rep && b == CombineBackend::kAgRs) continue;              // refused: DCP-005
        DcpCase c;
        c.n = n;
        c.backend = b;
        c.replicate_q = rep;
        c.interleave = (int[]){1, 4, 16}[variant % 3];
        c.head_dim = variant % 2 == 0 ? 64 : 128;
        // Mixed lengths: one token, fewer tokens than ranks, not divisible by N, several pages.
        c.lengths = {1, std::max(1, n - 1), 37, 70};
        c.name = "gqa_n" + std::to_string(n) + "_" + std::string(CombineBackendName(b)) +
                 (rep ? "_repq" : "") + "_i" + std::to_string(c.interleave) + "_d" +
                 std::to_string(c.head_dim);
        cases.push_back(c);
        ++variant;
      }
    }
  }
  auto add = [&](DcpCase c) { cases.push_back(std::move(c)); };
  add({.name = "gqa_bf16kv_n4_a2a_d128",
       .n = 4,
       .backend = CombineBackend::kA2a,
       .interleave = 4,
       .head_dim = 128,
       .kv_dtype = DataType::kBF16,
       .lengths = {5, 66}});
  add({.name = "gqa_bf16kv_n3_agrs",
       .n = 3,
       .interleave = 1,
       .head_dim = 64,
       .kv_dtype = DataType::kBF16,
       .lengths = {2, 40}});
  add({.name = "gqa_bf16wire_n2_a2a",
       .n = 2,
       .backend = CombineBackend::kA2a,
       .o_wire = DataType::kBF16,
       .lengths = {3, 50}});
  add({.name = "gqa_bf16wire_n4_shm_repq",
       .n = 4,
       .backend = CombineBackend::kShmA2a,
       .replicate_q = true,
       .o_wire = DataType::kBF16,
       .lengths = {3, 50}});
  add({.name = "gqa_tp2x_n3_a2a",
       .n = 3,
       .backend = CombineBackend::kA2a,
       .lengths = {9, 31},
       .tp_mult = 2,
       .h = 3,
       .kv_heads = 3});
  add({.name = "prefill_n1", .n = 1, .lengths = {21}, .prefill_rows = 21});
  add({.name = "prefill_n3_agrs_i4",
       .n = 3,
       .interleave = 4,
       .lengths = {2, 45},
       .prefill_rows = 12});
  add({.name = "prefill_n4_a2a_i16",
       .n = 4,
       .backend = CombineBackend::kA2a,
       .interleave = 16,
       .lengths = {70},
       .prefill_rows = 70});
  add({.name = "prefill_n8_shm_repq",
       .n = 8,
       .backend = CombineBackend::kShmA2a,
       .replicate_q = true,
       .lengths = {3, 30},
       .prefill_rows = 5});
  add({.name = "mla_n1", .n = 1, .mla = true, .lengths = {1, 20}});
  add({.name = "mla_n2_agrs", .n = 2, .mla = true, .lengths = {1, 33}});
  add({.name = "mla_n4_a2a_repq_i4",
       .n = 4,
       .backend = CombineBackend::kA2a,
       .replicate_q = true,
       .interleave = 4,
       .mla = true,
       .lengths = {3, 41}});
  add({.name = "mla_n3_shm",
       .n = 3,
       .backend = CombineBackend::kShmA2a,
       .mla = true,
       .lengths = {2, 25}});
  add({.name = "mla_bf16kv_n2_a2a_bf16wire",
       .n = 2,
       .backend = CombineBackend::kA2a,
       .mla = true,
       .kv_dtype = DataType::kBF16,
       .o_wire = DataType::kBF16,
       .lengths = {1, 40}});
  add({.name = "mla_bf16kv_n8_agrs",
       .n = 8,
       .mla = true,
       .kv_dtype = DataType::kBF16,
       .lengths = {5, 30}});
  // Sliding windows: W = 1 (one key: every rank but its owner sees none), a window shorter than
  // the group (N = 4, W = 3: a rank owns no row of it), windows that start inside a page, in
  // decode and prefill rows, GQA and MLA.
  add({.name = "window1_n4_a2a",
       .n = 4,
       .backend = CombineBackend::kA2a,
       .lengths = {1, 3, 70},
       .window = 1});
  add({.name = "window3_n4_agrs_i2", .n = 4, .interleave = 2, .lengths = {2, 37, 70}, .window = 3});
  add({.name = "window7_prefill_n3_shm",
       .n = 3,
       .backend = CombineBackend::kShmA2a,
       .lengths = {5, 60},
       .prefill_rows = 30,
       .window = 7});
  add({.name = "window40_prefill_n1", .n = 1, .lengths = {70}, .prefill_rows = 70, .window = 40});
  add({.name = "window_mla_n2_a2a_repq",
       .n = 2,
       .backend = CombineBackend::kA2a,
       .replicate_q = true,
       .mla = true,
       .lengths = {3, 41},
       .prefill_rows = 9,
       .window = 16});
  add({.name = "window_bf16kv_n4_agrs",
       .n = 4,
       .kv_dtype = DataType::kBF16,
       .lengths = {9, 66},
       .prefill_rows = 20,
       .window = 21});
  // Gemma 2's attention softcap (scores about N(0, 1) here, capped at 1): elementwise on each
  // rank's scores, so the combine is unchanged; decode and windowed prefill, every backend.
  add({.name = "softcap_n2_a2a",
       .n = 2,
       .backend = CombineBackend::kA2a,
       .lengths = {1, 17, 300},
       .softcap = 1.0f});
  add({.name = "softcap_window_prefill_n4_shm_repq",
       .n = 4,
       .backend = CombineBackend::kShmA2a,
       .replicate_q = true,
       .lengths = {9, 70},
       .prefill_rows = 40,
       .window = 13,
       .softcap = 1.0f});
  add({.name = "softcap_bf16kv_n3_agrs",
       .n = 3,
       .kv_dtype = DataType::kBF16,
       .lengths = {5, 64},
       .prefill_rows = 20,
       .softcap = 1.0f});
  return cases;
}

class DcpAttentionTest : public ::testing::TestWithParam<DcpCase> {};

TEST_P(DcpAttentionTest, MatchesFloat64ReferenceAndDesignBytes) {
  const DcpCase& c = GetParam();
  const testing::DcpProblem p = testing::MakeProblem(c);
  ASSERT_TRUE(RunInProcess(c.n, [&](Communicator& comm) {
                testing::RunRankAndCheck(c, p, comm);
                return Status::Ok();
              }).ok());
}

INSTANTIATE_TEST_SUITE_P(Cases, DcpAttentionTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Creates the operator for a group of `n` in-process ranks (rank 0 only) and returns its status.
Status CreateStatus(DcpOptions o) {
  auto comms = MakeInProcessGroup(std::max(1, o.dcp_size));
  if (o.head_dim_qk == 0) o.head_dim_qk = o.head_dim_v = 64;
  if (o.scale == 0) o.scale = 0.125f;
  return DcpAttention::Create(o, comms[0].get()).status();
}

TEST(DcpAttentionCreate, RefusesWithCatalogErrors) {
  Status s = CreateStatus({.dcp_size = 0, .num_heads = 8});
  EXPECT_EQ(s.error_id(), "CTXPAR-DCP-001");
  EXPECT_EQ(s.message(),
            "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be "
            ">= 1, but got dcp_size=0.");
  s = CreateStatus({.dcp_size = 1, .backend = CombineBackend::kShmA2a, .num_heads = 8});
  EXPECT_EQ(s.error_id(), "CTXPAR-DCP-002");
  EXPECT_EQ(s.message(),
            "--dcp-comm-backend shm_a2a only affects the decode context-parallel attention "
            "reduction and therefore requires --dcp-size / --decode-context-parallel-size > 1, "
            "but got dcp_size=1.");
  s = CreateStatus({.dcp_size = 2, .backend = CombineBackend::kFiA2a, .num_heads = 8});
  EXPECT_EQ(s.error_id(), "CTXPAR-DCP-003");  // this machine has no CUDA device
  s = CreateStatus({.dcp_size = 1, .replicate_q = true, .num_heads = 8});
  EXPECT_EQ(s.error_id(), "CTXPAR-DCP-004");
  EXPECT_EQ(s.message(), "--dcp-replicate-q-proj requires --dcp-size > 1.");
  s = CreateStatus({.dcp_size = 2, .replicate_q = true, .num_heads = 8});
  EXPECT_EQ(s.error_id(), "CTXPAR-DCP-005");
  EXPECT_NE(s.message().find("--dcp-comm-backend=ag_rs"), std::string::npos) << s.message();
  s = CreateStatus({.dcp_size = 3, .num_heads = 8});
  EXPECT_EQ(s.error_id(), "CTXPAR-LAYOUT-003");
  EXPECT_EQ(s.message(), "num_heads (8) must be divisible by dcp_size (3)");
  s = CreateStatus({.dcp_size = 2, .num_heads = 12, .tp_size = 3});
  EXPECT_EQ(s.error_id(), "CTXPAR-LAYOUT-001");
  EXPECT_EQ(s.message(), "tp_size (3) must be divisible by dcp_size (2).");
  s = CreateStatus({.dcp_size = 2, .num_heads = 6, .tp_size = 4});
  EXPECT_EQ(s.message(),
            "DcpAttention: num_heads must be divisible by tp_size, got num_heads=6 and "
            "tp_size=4");
  s = CreateStatus({.dcp_size = 2, .num_heads = 8, .scale = -1.0f});
  EXPECT_EQ(s.message(), "DcpAttention: scale must be finite and > 0, got scale=-1");
  s = CreateStatus({.dcp_size = 2, .num_heads = 8, .softcap = -1.0f});
  EXPECT_EQ(s.message(), "DcpAttention: softcap must be finite and >= 0 (0: none), got softcap=-1");
}

TEST(DcpAttentionCreate, CommunicatorMustMatchDcpSize) {
  auto comms = MakeInProcessGroup(2);
  auto attn = DcpAttention::Create(
      {.dcp_size = 4, .num_heads = 8, .head_dim_qk = 64, .head_dim_v = 64, .scale = 0.125f},
      comms[0].get());
  ASSERT_FALSE(attn.ok());
  EXPECT_EQ(attn.status().message(),
            "DcpAttention: the DCP communicator must have dcp_size=4 ranks, got 2");
}

TEST(Combine, ParsesTheFlagSpellings) {
  EXPECT_EQ(*ParseCombineBackend("shm_a2a"), CombineBackend::kShmA2a);
  EXPECT_EQ(*ParseCombineBackend("ag_rs"), CombineBackend::kAgRs);
  EXPECT_EQ(ParseCombineBackend("nccl").status().message(),
            "dcp comm backend must be one of ag_rs, a2a, fi_a2a, shm_a2a, got 'nccl'");
}

// Rows where a rank owns no key (L < N) and where every lse is -inf must merge to O = 0 exactly,
// and NaN partial lse gets weight 0, in every backend.
TEST(Combine, EmptyAndPoisonedStates) {
  for (CombineBackend b : {CombineBackend::kAgRs, CombineBackend::kA2a, CombineBackend::kShmA2a}) {
    ASSERT_TRUE(RunInProcess(2, [&](Communicator& comm) {
                  auto combiner = Combiner::Create(&comm, b);
                  EXPECT_TRUE(combiner.ok());
                  // rows 2, h 1, dv 2: row 0 all empty; row 1 rank 1 poisoned (NaN lse).
                  const float inf = std::numeric_limits<float>::infinity();
                  const float me = static_cast<float>(comm.rank());
                  std::vector<float> o_part = {1, 2, 3, 4, 10 + me, 20 + me, 30 + me, 40 + me};
                  std::vector<float> lse_part = {-inf, -inf, comm.rank() == 0 ? 0.5f : NAN,
                                                 comm.rank() == 0 ? 0.5f : NAN};
                  std::vector<float> o(4, -1), lse(2, -1);
                  EXPECT_TRUE(
                      (*combiner)
                          ->Combine({2, 1, 2}, o_part.data(), lse_part.data(), o.data(), lse.data())
                          .ok());
                  EXPECT_EQ(o[0], 0.0f);
                  EXPECT_EQ(o[1], 0.0f);
                  EXPECT_EQ(lse[0], -inf);
                  // Row 1 is rank 0's partial state alone (rank 1's lse is NaN): head 0 is
                  // {10, 20} and head 1 is {30, 40} there.
                  const float want0 = comm.rank() == 0 ? 10.0f : 30.0f;
                  EXPECT_FLOAT_EQ(o[2], want0);
                  EXPECT_FLOAT_EQ(o[3], want0 + 10.0f);
                  EXPECT_FLOAT_EQ(lse[1], 0.5f);
                  return Status::Ok();
                }).ok());
  }
}

}  // namespace
}  // namespace ctxpar

namespace ctxpar {
namespace {

// No rows, and rows that see no key on any rank (an empty sequence): O = 0 and lse = -inf, with
// every backend, and the group stays in step.
TEST(DcpAttentionForward, NoRowsAndRowsWithoutKeys) {
  for (CombineBackend b : {CombineBackend::kAgRs, CombineBackend::kA2a, CombineBackend::kShmA2a}) {
    ASSERT_TRUE(RunInProcess(2, [&](Communicator& comm) {
                  auto cache = KvPool::Create({.num_layers = 1,
                                               .num_kv_heads = 1,
                                               .head_dim_k = 16,
                                               .head_dim_v = 16,
                                               .page_size = 16,
                                               .dcp_size = 2,
                                               .dcp_rank = comm.rank(),
                                               .num_pages = 2,
                                               .max_slots = 2,
                                               .max_pages_per_slot = 1});
                  EXPECT_TRUE(cache.ok());
                  EXPECT_EQ(*cache->AcquireSlot(), 0);
                  auto attn = DcpAttention::Create({.dcp_size = 2,
                                                    .backend = b,
                                                    .num_heads = 4,
                                                    .head_dim_qk = 16,
                                                    .head_dim_v = 16,
                                                    .scale = 0.25f},
                                                   &comm);
                  EXPECT_TRUE(attn.ok()) << attn.status().ToString();
                  std::vector<float> q(3 * 2 * 16, 1.0f), o(3 * 2 * 16, 7.0f), lse(3 * 2, 7.0f);
                  std::vector<int32_t> seq = {0, 0, 0}, len = {0, 0, 0};
                  Status st = (*attn)->Forward(q.data(), cache->View(0), seq.data(), len.data(), 0,
                                               o.data(), lse.data());
                  EXPECT_TRUE(st.ok()) << st.ToString();
                  EXPECT_EQ(o[0], 7.0f);  // nothing written
                  st = (*attn)->Forward(q.data(), cache->View(0), seq.data(), len.data(), 3,
                                        o.data(), lse.data());
                  EXPECT_TRUE(st.ok()) << st.ToString();
                  for (float x : o) EXPECT_EQ(x, 0.0f);
                  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
                  return Status::Ok();
                }).ok());
  }
}

}  // namespace
}  // namespace ctxpar
