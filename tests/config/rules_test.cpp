// Every rule of the pipeline, each message compared verbatim with SGLang's text (SGLang's own
// messages) or the catalog's wording.
#include <gtest/gtest.h>

#include "config/test_util.h"
#include "ctxpar/config.h"

namespace ctxpar {
namespace {

using testing::I;
using testing::Launch;
using testing::Named;
using testing::Probed;
using testing::S;

struct Failure {
  std::string id;
  std::string message;
};

Failure Fails(const LaunchConfig& raw, const Platform& platform, const ModelInfo* model = nullptr) {
  Expected<ResolvedConfig> r = Resolve(raw, platform, model);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return {};
  return {r.status().error_id(), r.status().message()};
}

ResolvedConfig Passes(const LaunchConfig& raw, const Platform& platform,
                      const ModelInfo* model = nullptr) {
  Expected<ResolvedConfig> r = Resolve(raw, platform, model);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : ResolvedConfig();
}

const Platform kCpu = Probed("cpu");

TEST(DcpRules, SizeBelowOne) {
  Failure f = Fails(Launch({{"dcp_size", I(0)}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DCP-001");
  EXPECT_EQ(f.message,
            "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be "
            ">= 1, but got dcp_size=0.");
  EXPECT_EQ(Fails(Launch({{"dcp_size", I(-3)}}), kCpu).message,
            "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be "
            ">= 1, but got dcp_size=-3.");
}

TEST(DcpRules, AllToAllBackendWithoutDcp) {
  Failure f = Fails(Launch({{"dcp_comm_backend", S("a2a")}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DCP-002");
  EXPECT_EQ(f.message,
            "--dcp-comm-backend a2a only affects the decode context-parallel attention reduction "
            "and therefore requires --dcp-size / --decode-context-parallel-size > 1, but got "
            "dcp_size=1.");
  EXPECT_EQ(Fails(Launch({{"dcp_comm_backend", S("fi_a2a")}}), Probed("cuda:sm100+mnnvl")).message,
            "--dcp-comm-backend fi_a2a only affects the decode context-parallel attention "
            "reduction and therefore requires --dcp-size / --decode-context-parallel-size > 1, "
            "but got dcp_size=1.");
  EXPECT_EQ(Fails(Launch({{"dcp_comm_backend", S("shm_a2a")}}), kCpu).id, "CTXPAR-DCP-002");
  // ag_rs is the default and stays valid without DCP.
  Passes(Launch({{"dcp_comm_backend", S("ag_rs")}}), kCpu);
}

TEST(DcpRules, FiA2aNeedsCuda) {
  const char* kSeed000 =
      "--dcp-comm-backend fi_a2a delegates the exchange to FlashInfer's MNNVL All-to-All kernel, "
      "which requires an NVIDIA CUDA platform with SM90+ and MNNVL fabric memory (e.g. GB200 "
      "NVL72). The authoritative fabric probe runs at model-runner init; use 'a2a' or 'ag_rs' on "
      "clusters without MNNVL.";
  auto raw = Launch({{"tp_size", I(4)}, {"dcp_size", I(4)}, {"dcp_comm_backend", S("fi_a2a")}});
  Failure f = Fails(raw, kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DCP-003");
  EXPECT_EQ(f.message, kSeed000);
  EXPECT_EQ(Fails(raw, Named("rocm")).message, kSeed000);
  // SGLang's up-front rule only asks is_cuda(); the fabric is the init probe's business.
  Passes(raw, Probed("cuda:sm90"));
  Passes(raw, Probed("cuda:sm80"));
}

TEST(DcpRules, ReplicateQProjNeedsDcp) {
  Failure f = Fails(Launch({{"dcp_replicate_q_proj", true}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DCP-004");
  EXPECT_EQ(f.message, "--dcp-replicate-q-proj requires --dcp-size > 1.");
  // Explicitly off is fine without DCP.
  Passes(Launch({{"dcp_replicate_q_proj", false}}), kCpu);
}

TEST(DcpRules, ReplicateQProjNeedsAllToAll) {
  Failure f =
      Fails(Launch({{"tp_size", I(4)}, {"dcp_size", I(4)}, {"dcp_replicate_q_proj", true}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DCP-005");
  EXPECT_EQ(f.message,
            "--dcp-replicate-q-proj only applies to the a2a/fi_a2a DCP communication backend (it "
            "removes the head-dim Q all-gather); got --dcp-comm-backend=ag_rs.");
  for (const char* backend : {"a2a", "shm_a2a"}) {
    Passes(Launch({{"tp_size", I(4)},
                   {"dcp_size", I(4)},
                   {"dcp_comm_backend", S(backend)},
                   {"dcp_replicate_q_proj", true}}),
           kCpu);
  }
}

TEST(DcpRules, CheckedInSglangOrder) {
  // dcp_size 1 with a2a and replicated Q breaks rules 2 and 4: rule 2 is reported.
  EXPECT_EQ(
      Fails(Launch({{"dcp_comm_backend", S("a2a")}, {"dcp_replicate_q_proj", true}}), kCpu).id,
      "CTXPAR-DCP-002");
  // fi_a2a without DCP on CPU breaks rules 2 and 3: rule 2 is reported.
  EXPECT_EQ(Fails(Launch({{"dcp_comm_backend", S("fi_a2a")}}), kCpu).id, "CTXPAR-DCP-002");
}

TEST(PrefillCpRules, StrategyRequired) {
  Failure f = Fails(Launch({{"enable_prefill_cp", true}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-CP-001");
  EXPECT_EQ(f.message, "--cp-strategy must be set when --enable-prefill-cp is enabled.");
  Passes(Launch({{"enable_prefill_cp", true}, {"cp_strategy", S("zigzag")}}), kCpu);
}

TEST(PrefillCpRules, AttnCpDividesTp) {
  Failure f = Fails(Launch({{"tp_size", I(6)}, {"attn_cp_size", I(4)}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-CP-002");
  EXPECT_EQ(f.message, "tp_size must be divisible by attn_cp_size");
  Passes(Launch({{"tp_size", I(8)}, {"attn_cp_size", I(4)}}), kCpu);
}

TEST(LayoutRules, DcpDividesTp) {
  Failure f = Fails(Launch({{"tp_size", I(6)}, {"dcp_size", I(4)}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-LAYOUT-001");
  EXPECT_EQ(f.message, "tp_size (6) must be divisible by dcp_size (4).");
}

TEST(LayoutRules, AttentionTpMultipleOfDcp) {
  Failure f = Fails(Launch({{"tp_size", I(8)}, {"attn_cp_size", I(4)}, {"dcp_size", I(4)}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-LAYOUT-002");
  EXPECT_EQ(f.message,
            "attention tp size (2 = tp_size // attn_dp_size // attn_cp_size) must be a multiple "
            "of dcp_size (4).");
  // DP attention takes its share of TP too: 8 // 4 // 1 = 2.
  EXPECT_EQ(Fails(Launch({{"tp_size", I(8)},
                          {"dp_size", I(4)},
                          {"enable_dp_attention", true},
                          {"dcp_size", I(4)}}),
                  kCpu)
                .message,
            "attention tp size (2 = tp_size // attn_dp_size // attn_cp_size) must be a multiple "
            "of dcp_size (4).");
  // Without --enable-dp-attention, dp_size does not split attention.
  Passes(Launch({{"tp_size", I(8)}, {"dp_size", I(4)}, {"dcp_size", I(4)}}), kCpu);
}

TEST(LayoutRules, HeadsDivisibleByDcpWhenModelKnown) {
  ModelInfo smol{"LlamaForCausalLM", 9, 3};
  auto raw = Launch({{"tp_size", I(2)}, {"dcp_size", I(2)}});
  Failure f = Fails(raw, kCpu, &smol);
  EXPECT_EQ(f.id, "CTXPAR-LAYOUT-003");
  EXPECT_EQ(f.message, "num_heads (9) must be divisible by dcp_size (2)");
  Passes(raw, kCpu);  // unknown model: no head rule
  Passes(Launch({{"tp_size", I(3)}, {"dcp_size", I(3)}}), kCpu, &smol);
}

LaunchConfig DeepseekV4(std::vector<std::pair<std::string, FieldValue>> more) {
  more.insert(more.begin(),
              {{"model_arch", S("DeepseekV4ForCausalLM")}, {"enable_prefill_cp", true}});
  return Launch(std::move(more));
}

TEST(DeepseekV4Cp, InterleaveOnly) {
  Failure f = Fails(DeepseekV4({{"tp_size", I(8)}, {"cp_strategy", S("zigzag")}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DSV4-001");
  EXPECT_EQ(f.message, "DeepSeekV4 only supports interleave CP strategy, got zigzag");
}

TEST(DeepseekV4Cp, DeclaresDpAttentionDenseTpAndAttnCp) {
  ResolvedConfig c = Passes(
      DeepseekV4(
          {{"tp_size", I(8)}, {"cp_strategy", S("interleave")}, {"moe_a2a_backend", S("deepep")}}),
      kCpu);
  EXPECT_EQ(c.attn_cp_size(), 8);
  EXPECT_TRUE(c.enable_dp_attention());
  EXPECT_EQ(c.moe_dense_tp_size(), 1);
  for (const char* field : {"attn_cp_size", "enable_dp_attention", "moe_dense_tp_size"}) {
    EXPECT_EQ(c.Provenance(field)->source, "validate_deepseek_v4_cp") << field;
  }
  EXPECT_EQ(c.Provenance("attn_cp_size")->raw, FieldValue(int64_t{1}));
  EXPECT_EQ(Passes(DeepseekV4({{"tp_size", I(4)}, {"cp_strategy", S("interleave")}}), kCpu)
                .attn_cp_size(),
            4);
}

TEST(DeepseekV4Cp, DpMustBeOne) {
  Failure f = Fails(
      DeepseekV4({{"tp_size", I(8)}, {"dp_size", I(2)}, {"cp_strategy", S("interleave")}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DSV4-002");
  EXPECT_EQ(f.message, "For round-robin split mode, dp attention is not supported.");
}

TEST(DeepseekV4Cp, SingleMachineOnly) {
  Failure f = Fails(DeepseekV4({{"tp_size", I(16)}, {"cp_strategy", S("interleave")}}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-DSV4-003");
  EXPECT_EQ(f.message,
            "Context parallel only supports single machine (tp_size <= 8). Cross-machine CP has "
            "precision issues.");
}

TEST(DeepseekV4Cp, MoeBackendTuple) {
  for (const char* backend : {"flashinfer", "mooncake", "nixl", "ascend_fuseep"}) {
    Failure f = Fails(
        DeepseekV4(
            {{"tp_size", I(8)}, {"cp_strategy", S("interleave")}, {"moe_a2a_backend", S(backend)}}),
        kCpu);
    EXPECT_EQ(f.id, "CTXPAR-DSV4-004");
    EXPECT_EQ(f.message,
              "DeepSeekV4 CP supports moe_a2a_backend in ('none', 'deepep', "
              "'megamoe', 'mori'), got '" +
                  std::string(backend) + "'.");
  }
  for (const char* backend : {"none", "deepep", "megamoe", "mori"}) {
    Passes(
        DeepseekV4(
            {{"tp_size", I(8)}, {"cp_strategy", S("interleave")}, {"moe_a2a_backend", S(backend)}}),
        kCpu);
  }
}

TEST(DeepseekV4Cp, InactiveWithoutPrefillCp) {
  ResolvedConfig c = Passes(Launch({{"model_arch", S("DeepseekV4ForCausalLM")},
                                    {"tp_size", I(16)},
                                    {"moe_a2a_backend", S("flashinfer")}}),
                            kCpu);
  EXPECT_EQ(c.attn_cp_size(), 1);
  EXPECT_EQ(c.Provenance("attn_cp_size")->source, "default");
}

TEST(KimiK3, DcpDefaultsWithoutFabric) {
  ResolvedConfig c = Passes(
      Launch({{"model_arch", S("KimiK3ForCausalLM")}, {"tp_size", I(4)}, {"dcp_size", I(4)}}),
      kCpu);
  EXPECT_EQ(c.dcp_comm_backend(), "a2a");
  EXPECT_TRUE(c.dcp_replicate_q_proj());
  EXPECT_EQ(c.Provenance("dcp_comm_backend")->source, "apply_kimi_k3_dcp_defaults");
  EXPECT_EQ(c.Provenance("dcp_replicate_q_proj")->source, "apply_kimi_k3_dcp_defaults");
  EXPECT_EQ(c.Provenance("dcp_replicate_q_proj")->raw, FieldValue());
}

TEST(KimiK3, FiA2aWhereTheFabricIs) {
  auto raw =
      Launch({{"model_arch", S("KimiK3ForCausalLM")}, {"tp_size", I(4)}, {"dcp_size", I(4)}});
  EXPECT_EQ(Passes(raw, Named("cuda:sm100+mnnvl")).dcp_comm_backend(), "fi_a2a");
  EXPECT_EQ(Passes(raw, Named("cuda:sm90")).dcp_comm_backend(), "a2a");
  EXPECT_EQ(Passes(raw, Probed("cuda:sm80+mnnvl")).dcp_comm_backend(), "a2a");
}

TEST(KimiK3, UserChoicesWin) {
  ResolvedConfig c = Passes(Launch({{"model_arch", S("KimiK3ForCausalLM")},
                                    {"tp_size", I(4)},
                                    {"dcp_size", I(4)},
                                    {"dcp_comm_backend", S("shm_a2a")},
                                    {"dcp_replicate_q_proj", false}}),
                            kCpu);
  EXPECT_EQ(c.dcp_comm_backend(), "shm_a2a");
  EXPECT_FALSE(c.dcp_replicate_q_proj());
  EXPECT_EQ(c.Provenance("dcp_comm_backend")->source, "user");
  EXPECT_EQ(c.Provenance("dcp_replicate_q_proj")->source, "user");
  // The user's ag_rs keeps Q sharded: replicating it would break CTXPAR-DCP-005.
  ResolvedConfig ag = Passes(Launch({{"model_arch", S("KimiK3ForCausalLM")},
                                     {"tp_size", I(4)},
                                     {"dcp_size", I(4)},
                                     {"dcp_comm_backend", S("ag_rs")}}),
                             kCpu);
  EXPECT_FALSE(ag.dcp_replicate_q_proj());
  EXPECT_FALSE(ag.dcp_replicate_q_proj_is_set());
}

TEST(KimiK3, NothingWithoutDcp) {
  ResolvedConfig c =
      Passes(Launch({{"model_arch", S("KimiK3ForCausalLM")}, {"tp_size", I(4)}}), kCpu);
  EXPECT_EQ(c.dcp_comm_backend(), "ag_rs");
  EXPECT_FALSE(c.dcp_replicate_q_proj_is_set());
}

TEST(LegacyCpArgs, MapOntoPrefillCp) {
  ResolvedConfig c = Passes(Launch({{"enable_nsa_prefill_context_parallel", true},
                                    {"nsa_prefill_cp_mode", S("round-robin-split")}}),
                            kCpu);
  EXPECT_TRUE(c.enable_prefill_cp());
  EXPECT_EQ(c.cp_strategy(), "interleave");
  EXPECT_EQ(c.Provenance("cp_strategy")->source, "_handle_legacy_cp_args");
  EXPECT_EQ(c.Provenance("enable_prefill_cp")->source, "_handle_legacy_cp_args");
  EXPECT_EQ(Passes(Launch({{"enable_nsa_prefill_context_parallel", true},
                           {"nsa_prefill_cp_mode", S("in-seq-split")}}),
                   kCpu)
                .cp_strategy(),
            "zigzag");
  // The legacy flag alone still needs a strategy.
  EXPECT_EQ(Fails(Launch({{"enable_nsa_prefill_context_parallel", true}}), kCpu).id,
            "CTXPAR-CP-001");
  // The new spelling wins over the legacy one.
  EXPECT_EQ(Passes(Launch({{"cp_strategy", S("zigzag")},
                           {"enable_prefill_cp", true},
                           {"nsa_prefill_cp_mode", S("round-robin-split")}}),
                   kCpu)
                .cp_strategy(),
            "zigzag");
}

TEST(PlatformChecks, MoeBackendOnNamedPlatform) {
  Failure f = Fails(Launch({{"moe_a2a_backend", S("mooncake")}}), Named("cpu"));
  EXPECT_EQ(f.id, "CTXPAR-MOE-001");
  EXPECT_EQ(f.message,
            "--moe-a2a-backend mooncake needs an NVIDIA CUDA GPU, but the platform is cpu; use "
            "--moe-a2a-backend none or deepep instead.");
  // ctxpar's CPU engine runs deepep's dispatch and combine over MPI; ROCm does not.
  Passes(Launch({{"moe_a2a_backend", S("deepep")}}), Named("cpu"));
  EXPECT_EQ(Fails(Launch({{"moe_a2a_backend", S("deepep")}}), Named("rocm")).message,
            "--moe-a2a-backend deepep needs an NVIDIA CUDA GPU or the CPU engine, but the platform "
            "is rocm; use --moe-a2a-backend none or mori instead.");
  EXPECT_EQ(Fails(Launch({{"moe_a2a_backend", S("mori")}}), Named("cuda:sm90")).message,
            "--moe-a2a-backend mori needs an AMD ROCm GPU, but the platform is cuda:sm90; use "
            "--moe-a2a-backend none, deepep, mooncake, nixl or megamoe instead.");
  EXPECT_EQ(Fails(Launch({{"moe_a2a_backend", S("megamoe")}}), Named("cuda:sm80")).message,
            "--moe-a2a-backend megamoe needs an NVIDIA CUDA GPU of SM90 or newer, but the "
            "platform is cuda:sm80; use --moe-a2a-backend none, deepep, mooncake or nixl "
            "instead.");
  EXPECT_EQ(Fails(Launch({{"moe_a2a_backend", S("flashinfer")}}), Named("rocm")).message,
            "--moe-a2a-backend flashinfer needs an NVIDIA CUDA GPU of SM90 or newer with MNNVL "
            "fabric memory, but the platform is rocm; use --moe-a2a-backend none or mori "
            "instead.");
  Passes(Launch({{"moe_a2a_backend", S("flashinfer")}}), Named("cuda:sm100+mnnvl"));
  Passes(Launch({{"moe_a2a_backend", S("mori")}}), Named("rocm"));
}

TEST(PlatformChecks, ProbedPlatformLeavesInitChecksToInit) {
  Passes(Launch({{"moe_a2a_backend", S("mooncake")}}), Probed("cpu"));
  EXPECT_EQ(CheckMoeBackendRuntime("mooncake", Probed("cpu")).error_id(), "CTXPAR-MOE-001");
  EXPECT_EQ(CheckMoeBackendRuntime("ascend_fuseep", Named("cuda:sm100+mnnvl")).message(),
            "--moe-a2a-backend ascend_fuseep needs a Huawei Ascend NPU, which ctxpar does not run "
            "on, but the platform is cuda:sm100+mnnvl; use --moe-a2a-backend none, deepep, "
            "mooncake, nixl, flashinfer or megamoe instead.");
  EXPECT_EQ(CheckMoeBackendRuntime("bogus", Named("cpu")).error_id(), "CTXPAR-FLAG-001");
}

TEST(PlatformChecks, FiA2aRuntimeProbe) {
  Status s = CheckFiA2aRuntime(Named("cuda:sm90"));
  EXPECT_EQ(s.error_id(), "CTXPAR-DCP-006");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "--dcp-comm-backend fi_a2a needs MNNVL fabric memory on an SM90+ GPU, but the runtime "
            "probe found no MNNVL fabric support (platform cuda:sm90); use --dcp-comm-backend a2a "
            "(or ag_rs, or shm_a2a within one node) on machines without MNNVL fabric.");
  EXPECT_EQ(CheckFiA2aRuntime(Named("cuda:sm80+mnnvl")).message(),
            "--dcp-comm-backend fi_a2a needs MNNVL fabric memory on an SM90+ GPU, but the runtime "
            "probe found compute capability sm80, below SM90 (platform cuda:sm80+mnnvl); use "
            "--dcp-comm-backend a2a (or ag_rs, or shm_a2a within one node) on machines without "
            "MNNVL fabric.");
  EXPECT_EQ(CheckFiA2aRuntime(Named("cpu")).message(),
            "--dcp-comm-backend fi_a2a needs MNNVL fabric memory on an SM90+ GPU, but the runtime "
            "probe found no CUDA GPU (platform cpu); use --dcp-comm-backend a2a (or ag_rs, or "
            "shm_a2a within one node) on machines without MNNVL fabric.");
  EXPECT_TRUE(CheckFiA2aRuntime(Named("cuda:sm100+mnnvl")).ok());
  // In the pipeline: a named platform gets the runtime probe's verdict at the end.
  auto raw = Launch({{"tp_size", I(4)}, {"dcp_size", I(4)}, {"dcp_comm_backend", S("fi_a2a")}});
  EXPECT_EQ(Fails(raw, Named("cuda:sm90")).id, "CTXPAR-DCP-006");
  Passes(raw, Named("cuda:sm100+mnnvl"));
}

TEST(FlagValues, IntegersAndChoices) {
  const FieldSpec& tp = *FindField("tp_size");
  EXPECT_EQ(ParseFieldText(tp, "--tp-size", "four").status().message(),
            "Invalid value 'four' for --tp-size: not an integer; valid values: integers from 1 "
            "to 2147483647.");
  EXPECT_EQ(ParseFieldText(tp, "--tp-size", "four").status().error_id(), "CTXPAR-FLAG-002");
  EXPECT_EQ(ParseFieldText(tp, "--tp-size", "").status().error_id(), "CTXPAR-FLAG-002");
  EXPECT_EQ(ParseFieldText(tp, "--tp-size", "1.5").status().error_id(), "CTXPAR-FLAG-002");
  EXPECT_EQ(ParseFieldText(tp, "--tp-size", "-").status().error_id(), "CTXPAR-FLAG-002");
  EXPECT_EQ(ParseFieldText(tp, "--tp-size", "0").status().message(),
            "Invalid value '0' for --tp-size: out of range; valid values: integers from 1 to "
            "2147483647.");
  EXPECT_EQ(ParseFieldText(tp, "--tp-size", "99999999999999999999").status().error_id(),
            "CTXPAR-FLAG-003");
  EXPECT_EQ(*ParseFieldText(tp, "--tp-size", " +4 "), FieldValue(int64_t{4}));
  // Python's int() as the reference: whitespace around, underscores between digits (PEP 515).
  EXPECT_EQ(*ParseFieldText(tp, "--tp-size", "\t1_024\n"), FieldValue(int64_t{1024}));
  EXPECT_EQ(*ParseFieldText(tp, "--tp-size", "0_0_7"), FieldValue(int64_t{7}));
  for (const char* bad : {"1__0", "_1", "1_", "+-4", "++4", "+_4", "1 0", "0x10"}) {
    EXPECT_EQ(ParseFieldText(tp, "--tp-size", bad).status().error_id(), "CTXPAR-FLAG-002") << bad;
  }
  const FieldSpec& sc = *FindField("schedule_conservativeness");
  EXPECT_EQ(*ParseFieldText(sc, "--schedule-conservativeness", " 1_0.2_5 "), FieldValue(10.25));
  EXPECT_EQ(*ParseFieldText(sc, "--schedule-conservativeness", "+1e0_0"), FieldValue(1.0));
  for (const char* bad : {"1._5", "1_.5", "+-1.0", "1e", ""}) {
    EXPECT_EQ(ParseFieldText(sc, "--schedule-conservativeness", bad).status().error_id(),
              "CTXPAR-FLAG-010")
        << bad;
  }
  const FieldSpec& dcp = *FindField("dcp_size");
  // Negative DCP sizes pass the flag layer: CTXPAR-DCP-001 owns that rule and its text.
  EXPECT_EQ(*ParseFieldText(dcp, "--dcp-size", "-2"), FieldValue(int64_t{-2}));
  const FieldSpec& backend = *FindField("dcp_comm_backend");
  Expected<FieldValue> bad = ParseFieldText(backend, "--dcp-comm-backend", "nccl");
  EXPECT_EQ(bad.status().error_id(), "CTXPAR-FLAG-001");
  EXPECT_EQ(bad.status().message(),
            "Invalid value 'nccl' for --dcp-comm-backend; valid values: ag_rs, a2a, fi_a2a, "
            "shm_a2a.");
  EXPECT_EQ(ParseFieldText(*FindField("moe_a2a_backend"), "--moe-a2a-backend", "DeepEP")
                .status()
                .message(),
            "Invalid value 'DeepEP' for --moe-a2a-backend; valid values: none, deepep, mooncake, "
            "nixl, mori, ascend_fuseep, flashinfer, megamoe.");
}

// --speculative-algorithm: NGRAM resolves its draft length (SGLang: the max match window) and a
// chain's breadth; what ctxpar does not implement is refused, never ignored.
TEST(SpeculativeRules, NgramResolvesItsDefaults) {
  ResolvedConfig c = Passes(Launch({{"speculative_algorithm", S("NGRAM")}}), kCpu);
  EXPECT_EQ(c.Int("speculative_num_draft_tokens"), 12);
  EXPECT_EQ(c.Provenance("speculative_num_draft_tokens")->source, "_handle_speculative_decoding");
  EXPECT_EQ(c.Int("speculative_ngram_max_bfs_breadth"), 1);
  c = Passes(Launch({{"speculative_algorithm", S("NGRAM")},
                     {"speculative_ngram_max_match_window_size", I(5)},
                     {"speculative_num_draft_tokens", I(4)}}),
             kCpu);
  EXPECT_EQ(c.Int("speculative_num_draft_tokens"), 4);
  // The shared n-gram cache takes its size.
  c = Passes(
      Launch({{"speculative_algorithm", S("NGRAM")}, {"speculative_ngram_capacity", I(1000)}}),
      kCpu);
  EXPECT_EQ(c.Int("speculative_ngram_capacity"), 1000);
  // Without an algorithm nothing is declared (SGLang's NGRAM options are inert).
  c = Passes(Launch({{"speculative_ngram_max_bfs_breadth", I(10)}}), kCpu);
  EXPECT_FALSE(c.IsSet("speculative_num_draft_tokens"));
}

// STANDALONE drafts one chain of speculative_num_steps tokens with the draft model: SGLang's
// default of 5 steps, and speculative_num_draft_tokens = steps + 1 as SGLang adjusts it for chains
// (topk 1), even over a given value.
TEST(SpeculativeRules, StandaloneResolvesItsDraftLength) {
  const std::pair<std::string, FieldValue> draft = {"speculative_draft_model_path", S("d.gguf")};
  const std::pair<std::string, FieldValue> standalone = {"speculative_algorithm", S("STANDALONE")};
  ResolvedConfig c = Passes(Launch({standalone, draft}), kCpu);
  EXPECT_EQ(c.Int("speculative_num_draft_tokens"), 6);
  EXPECT_EQ(c.Provenance("speculative_num_draft_tokens")->source, "_handle_speculative_decoding");
  c = Passes(Launch({standalone, draft, {"speculative_num_steps", I(3)}}), kCpu);
  EXPECT_EQ(c.Int("speculative_num_draft_tokens"), 4);
  c = Passes(Launch({standalone,
                     draft,
                     {"speculative_num_steps", I(3)},
                     {"speculative_num_draft_tokens", I(8)}}),
             kCpu);
  EXPECT_EQ(c.Int("speculative_num_draft_tokens"), 4);
  c = Passes(Launch({standalone, draft, {"speculative_num_draft_tokens", I(3)}}), kCpu);
  EXPECT_EQ(c.Int("speculative_num_draft_tokens"), 3);
  // The draft model itself is opened by PrepareLaunch (engine_standalone_test).
  Failure f = Fails(Launch({standalone}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-SPEC-004");
  EXPECT_EQ(f.message,
            "STANDALONE speculative decoding requires setting --speculative-draft-model-path.");
  f = Fails(Launch({{"speculative_algorithm", S("NGRAM")}, draft}), kCpu);
  EXPECT_EQ(f.id, "CTXPAR-SPEC-005");
  EXPECT_EQ(f.message,
            "--speculative-draft-model-path is only read by --speculative-algorithm STANDALONE; "
            "--speculative-algorithm NGRAM drafts without a draft model.");
  // Without an algorithm the draft model is inert, as in SGLang.
  EXPECT_FALSE(Passes(Launch({draft}), kCpu).IsSet("speculative_num_draft_tokens"));
}

TEST(SpeculativeRules, WhatIsNotImplementedIsRefused) {
  for (const char* algorithm : {"EAGLE", "EAGLE3", "NEXTN"}) {
    Failure f = Fails(Launch({{"speculative_algorithm", S(algorithm)}}), kCpu);
    EXPECT_EQ(f.id, "CTXPAR-SPEC-001");
    EXPECT_EQ(f.message, std::string("--speculative-algorithm ") + algorithm +
                             " is not implemented by ctxpar's engine: only NGRAM (from the "
                             "request's own prompt and output) and STANDALONE (with a draft "
                             "model) draft.");
  }
  Failure f = Fails(
      Launch({{"speculative_algorithm", S("NGRAM")}, {"speculative_ngram_max_bfs_breadth", I(10)}}),
      kCpu);
  EXPECT_EQ(f.id, "CTXPAR-SPEC-002");
  EXPECT_EQ(f.message,
            "--speculative-ngram-max-bfs-breadth 10 asks for a draft tree of several branches; "
            "ctxpar drafts one chain (breadth 1); leave it unset.");
  EXPECT_EQ(Fails(Launch({{"speculative_algorithm", S("NGRAM")},
                          {"speculative_ngram_min_bfs_breadth", I(2)},
                          {"speculative_ngram_max_bfs_breadth", I(1)}}),
                  kCpu)
                .id,
            "CTXPAR-SPEC-002");
  EXPECT_EQ(Fails(Launch({{"speculative_algorithm", S("NGRAM")},
                          {"speculative_ngram_match_type", S("PROB")}}),
                  kCpu)
                .id,
            "CTXPAR-SPEC-002");
  f = Fails(Launch({{"speculative_algorithm", S("NGRAM")},
                    {"speculative_ngram_min_match_window_size", I(13)}}),
            kCpu);
  EXPECT_EQ(f.id, "CTXPAR-SPEC-003");
  EXPECT_EQ(f.message,
            "--speculative-ngram-min-match-window-size 13 is larger than "
            "--speculative-ngram-max-match-window-size 12.");
}

}  // namespace
}  // namespace ctxpar
