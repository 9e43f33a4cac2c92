// The planner against the engine: its capacity is the engine's max_total_num_tokens, its
// simulated scheduler takes the engine's decisions on the same trace, and a refused candidate
// names the catalog rule that refused it.
#include "ctxpar/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "ctxpar/error_catalog.h"
#include "ctxpar/launch.h"
#include "models/sequence_runner.h"

namespace ctxpar::plan {
namespace {

const std::string kDeepseek = std::string(CTXPAR_REFERENCE_DIR) + "/deepseek_v3_tiny";

bool Have(const std::string& path) { return std::filesystem::exists(path); }

// Any rates: decisions in a closed loop do not depend on the clock.
Hardware TestCpu() {
  Hardware h;
  h.cpu = true;
  h.name = "test";
  h.platform = ProbePlatform();
  h.memory_gib = 24;
  h.mem_gbps = 20;
  h.flops = 5e10;
  h.link_gbps = 20;
  h.domain_devices = 1 << 20;
  return h;
}

// A closed loop of `clients` over 8 devices: every prompt `input` tokens, every output `output`.
PlanRequest ClosedLoop(int64_t input, int64_t output, int clients, int requests) {
  PlanRequest req;
  req.devices = 8;
  req.workload.input = {input, input};
  req.workload.output = {output, output};
  req.workload.concurrency = clients;
  req.workload.num_requests = requests;
  return req;
}

struct Config {
  int tp, dcp, kv_mib, page;
  std::string dtype = "auto";
  int64_t max_total_tokens = 0;
};

LaunchConfig Raw(const std::string& model, const Config& c) {
  LaunchConfig raw;
  EXPECT_TRUE(raw.Set("model_path", model).ok());
  EXPECT_TRUE(raw.Set("tp_size", int64_t{c.tp}).ok());
  EXPECT_TRUE(raw.Set("dcp_size", int64_t{c.dcp}).ok());
  EXPECT_TRUE(raw.Set("dcp_comm_backend", std::string("ag_rs")).ok());
  EXPECT_TRUE(raw.Set("kv_cache_mib", int64_t{c.kv_mib}).ok());
  EXPECT_TRUE(raw.Set("page_size", int64_t{c.page}).ok());
  EXPECT_TRUE(raw.Set("kv_cache_dtype", c.dtype).ok());
  EXPECT_TRUE(raw.Set("threads", int64_t{1}).ok());
  if (c.max_total_tokens > 0) EXPECT_TRUE(raw.Set("max_total_tokens", c.max_total_tokens).ok());
  return raw;
}

// The engine's own number: every rank of an in-process TP group creates its Engine.
int64_t EngineCapacity(const LaunchConfig& raw) {
  Expected<Launch> launch = PrepareLaunch(raw);
  EXPECT_TRUE(launch.ok()) << launch.status().ToString();
  if (!launch.ok()) return -1;
  const int tp = launch->config.tp_size;
  auto world = MakeInProcessGroup(tp);
  std::vector<int64_t> caps(tp, -1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < tp; ++r) {
    ranks.emplace_back([&, r] {
      auto engine = Engine::Create(launch->config, *launch->source, *world[r], nullptr);
      if (engine.ok()) caps[r] = (*engine)->Snapshot().max_total_num_tokens;
    });
  }
  for (std::thread& t : ranks) t.join();
  return caps[0];
}

const Candidate* Accepted(const PlanReport& report) {
  return report.ranked.empty() ? nullptr : &report.ranked.front();
}

void ExpectCapacityMatches(const std::string& model_path, const std::vector<Config>& sweep) {
  Expected<PlanModel> model = CheckpointModel(model_path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (const Config& c : sweep) {
    SCOPED_TRACE(::testing::Message() << "tp " << c.tp << " dcp " << c.dcp << " kv_mib " << c.kv_mib
                                      << " page " << c.page << " " << c.dtype);
    PlanRequest req;
    req.base = Raw(model_path, c);
    req.devices = c.tp;
    req.workload.input = {8, 8};
    req.workload.output = {2, 2};
    req.workload.concurrency = 1;
    req.workload.num_requests = 2;
    Expected<PlanReport> report = MakePlan(*model, TestCpu(), req);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    const Candidate* cand = Accepted(*report);
    ASSERT_NE(cand, nullptr) << (report->refused.empty() ? ""
                                                         : report->refused[0].refused.ToString());
    EXPECT_EQ(cand->max_total_num_tokens, EngineCapacity(req.base));
  }
}

TEST(PlanCapacity, EqualsTheEnginesOverASweepOfSmolLM2) {
  const std::string path = DefaultModelPath();
  if (!Have(path)) GTEST_SKIP() << "SmolLM2 is not at " << path;
  ExpectCapacityMatches(path, {{1, 1, 4, 16},
                               {1, 1, 7, 32, "bf16"},
                               {1, 1, 3, 8},
                               {3, 1, 5, 16},
                               {3, 3, 5, 16},
                               {3, 3, 3, 48, "bf16"},
                               {1, 1, 7, 32, "fp8_e4m3"},
                               {3, 3, 3, 48, "fp8_e5m2"},
                               {9, 3, 2, 16, "fp8_e4m3"},
                               {9, 3, 2, 16},
                               {1, 1, 64, 16, "auto", 1000}});
}

// Gemma 3's two KV groups: max_total_num_tokens is the full-attention group's.
TEST(PlanCapacity, EqualsTheEnginesOverASweepOfGemma3) {
  const std::string path = testing::Gemma3ModelPath();
  if (!Have(path)) GTEST_SKIP() << "Gemma 3 is not at " << path;
  ExpectCapacityMatches(path, {{1, 1, 8, 16},
                               {4, 1, 8, 16},
                               {4, 4, 8, 16},
                               {4, 2, 6, 32, "bf16"},
                               {4, 2, 6, 32, "fp8_e4m3"},
                               {1, 1, 8, 16, "fp8_e5m2"}});
}

TEST(PlanCapacity, EqualsTheEnginesOverASweepOfTheTinyDeepseek) {
  if (!Have(kDeepseek + "/config.json")) GTEST_SKIP() << "no DeepSeek reference at " << kDeepseek;
  ExpectCapacityMatches(kDeepseek,
                        {{1, 1, 1, 16}, {2, 2, 1, 16}, {4, 4, 2, 64}, {4, 2, 1, 8}, {4, 1, 3, 1}});
}

// The tiny checkpoints of every GGUF architecture (tests/data/hf_tiny): plan reads the shape the
// golden script gave transformers (2 layers, 4 heads of 32 over 2 KV heads) from the model's own
// source, and its KV capacity is the engine's (Gemma 2's two KV groups included); Qwen3-MoE's
// experts as its config states them.
TEST(PlanCapacity, EveryTinyArchitectureHasItsShapeAndTheEnginesCapacity) {
  for (const char* arch :
       {"llama", "qwen2", "qwen3", "phi3", "olmo2", "gemma2", "qwen3moe", "ministral3"}) {
    SCOPED_TRACE(arch);
    const std::string path =
        std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/" + arch + "/" + arch + "-q8_0.gguf";
    Expected<PlanModel> model = CheckpointModel(path);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_EQ(model->num_layers, 2);
    EXPECT_EQ(model->num_heads, 4);
    EXPECT_EQ(model->num_kv_heads, 2);
    EXPECT_EQ(model->head_dim, 32);
    EXPECT_EQ(model->vocab, 128);
    // Gemma 2's: tied embeddings, a window of 64 on the even layers (make_goldens.py).
    const bool gemma2 = std::string_view(arch) == "gemma2";
    EXPECT_EQ(model->tied_embeddings, gemma2);
    EXPECT_EQ(model->sliding_window, gemma2 ? 64 : 0);
    EXPECT_EQ(model->global_every, gemma2 ? 2 : 0);
    // Qwen3-MoE's: 8 experts of 64 features, 2 a token, no dense layer.
    const bool moe = std::string_view(arch) == "qwen3moe";
    EXPECT_EQ(model->experts, moe ? 8 : 0);
    EXPECT_EQ(model->experts_per_token, moe ? 2 : 0);
    EXPECT_EQ(model->expert_ffn, moe ? 64 : 0);
    EXPECT_EQ(model->dense_layers, moe ? 0 : 2);
    ExpectCapacityMatches(path, {{1, 1, 1, 16}, {2, 2, 1, 16}, {4, 2, 1, 8}});
  }
}

// A closed loop of 4 clients over a pool too small for them: the engine admits, chunks, retracts
// and resumes; the simulation must plan the very same steps.
void ExpectSameTrace(const std::string& path, const Config& c, Workload w, int vocab) {
  w.in_process = true;  // the engine below is driven by Submit, as the simulation assumes
  LaunchConfig raw = Raw(path, c);
  ASSERT_TRUE(raw.Set("chunked_prefill_size", int64_t{32}).ok());
  ASSERT_TRUE(raw.Set("schedule_conservativeness", 0.3).ok());
  Expected<PlanModel> model = CheckpointModel(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  PlanRequest req{raw, c.tp, w};
  Expected<PlanReport> report = MakePlan(*model, TestCpu(), req);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const Candidate* cand = Accepted(*report);
  ASSERT_NE(cand, nullptr);
  std::vector<StepRecord> simulated;
  Expected<SimResult> sim = Simulate(*model, TestCpu(), cand->config, cand->pool, w,
                                     [&](const StepRecord& r) { simulated.push_back(r); });
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();

  Expected<Launch> launch = PrepareLaunch(raw);
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  auto world = MakeInProcessGroup(1);
  auto engine = Engine::Create(launch->config, *launch->source, *world[0], nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  std::vector<StepRecord> real;
  (*engine)->SetStepObserver([&](const StepRecord& r) { real.push_back(r); });
  Expected<std::vector<SimRequest>> reqs = MakeRequests(w);
  ASSERT_TRUE(reqs.ok());
  std::size_t next = 0;
  std::function<void()> submit = [&] {
    const SimRequest& r = (*reqs)[next++];
    GenerateRequest g;
    for (int64_t k = 0; k < r.input_len; ++k) {
      g.prompt.push_back(int32_t(1 + (next * 31 + k) % (vocab - 1)));
    }
    g.sampling.max_new_tokens = r.output_len;
    g.sampling.temperature = 0;
    g.sampling.ignore_eos = true;
    auto id = (*engine)->Submit(std::move(g), [&](const RequestUpdate& u) {
      if (u.finish != FinishReason::kNone && next < reqs->size()) submit();
    });
    ASSERT_TRUE(id.ok()) << id.status().ToString();
  };
  for (int i = 0; i < w.concurrency; ++i) submit();
  ASSERT_TRUE((*engine)->Run(Engine::RunUntil::kIdle).ok());

  ASSERT_GT((*engine)->Snapshot().retractions, 0u) << "the trace must exercise retraction";
  EXPECT_EQ(sim->retractions, (*engine)->Snapshot().retractions);
  ASSERT_EQ(simulated.size(), real.size());
  for (std::size_t i = 0; i < real.size(); ++i) {
    EXPECT_EQ(simulated[i], real[i]) << "step " << i;
  }
}

TEST(PlanTrace, TheSimulatedSchedulerTakesTheEnginesDecisionsOnSmolLM2) {
  const std::string path = DefaultModelPath();
  if (!Have(path)) GTEST_SKIP() << "SmolLM2 is not at " << path;
  Workload w;
  w.input = {40, 90};
  w.output = {12, 24};
  w.concurrency = 4;
  w.num_requests = 9;
  w.seed = 7;
  ExpectSameTrace(path, {1, 1, 8, 16, "bf16"}, w, 9000);
}

// Gemma 3's window group slides and is admitted against as the engine does.
TEST(PlanTrace, TheSimulatedSchedulerTakesTheEnginesDecisionsOnGemma3) {
  const std::string path = testing::Gemma3ModelPath();
  if (!Have(path)) GTEST_SKIP() << "Gemma 3 is not at " << path;
  Workload w;
  w.input = {40, 90};
  w.output = {12, 24};
  w.concurrency = 4;
  w.num_requests = 9;
  w.seed = 7;
  ExpectSameTrace(path, {1, 1, 8, 16, "auto", 256}, w, 262144);
}

// The tiny DeepSeek's pool of 64 tokens a page holds few requests; prefill chunks of 32.
TEST(PlanTrace, TheSimulatedSchedulerTakesTheEnginesDecisionsOnTheTinyDeepseek) {
  if (!Have(kDeepseek + "/config.json")) GTEST_SKIP() << "no DeepSeek reference at " << kDeepseek;
  Workload w;
  w.input = {30, 120};
  w.output = {10, 40};
  w.concurrency = 5;
  w.num_requests = 12;
  w.seed = 3;
  ExpectSameTrace(kDeepseek, {1, 1, 1, 16, "auto", 320}, w, 1000);
}

PlanReport PresetPlan(const std::string& model, const std::string& hw, int gpus) {
  Expected<PlanModel> m = PresetModel(model);
  Expected<Hardware> h = PresetHardware(hw);
  EXPECT_TRUE(m.ok() && h.ok());
  PlanRequest req;
  req.devices = gpus;
  req.workload.input = {4096, 4096};
  req.workload.output = {64, 64};
  req.workload.concurrency = 8;
  Expected<PlanReport> r = MakePlan(*m, *h, req);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : PlanReport{};
}

std::string RefusedId(const PlanReport& r, int dcp, std::string_view backend, bool q) {
  for (const Candidate& c : r.refused) {
    if (c.dcp_size == dcp && c.backend == backend && c.replicate_q.has_value() == q) {
      return c.refused_id;
    }
  }
  return "(accepted)";
}

TEST(PlanRefusals, CarryTheCatalogIdOfTheRule) {
  const PlanReport h200 = PresetPlan("deepseek-v3", "h200", 8);
  EXPECT_EQ(RefusedId(h200, 1, "a2a", false), "CTXPAR-DCP-002");
  EXPECT_EQ(RefusedId(h200, 1, "ag_rs", true), "CTXPAR-DCP-004");
  EXPECT_EQ(RefusedId(h200, 8, "ag_rs", true), "CTXPAR-DCP-005");
  EXPECT_EQ(RefusedId(h200, 8, "fi_a2a", false), "CTXPAR-DCP-006");  // no MNNVL on HGX H200
  EXPECT_EQ(RefusedId(h200, 8, "a2a", true), "(accepted)");
  // GB200 NVL72 has the fabric; MI300X is not CUDA.
  EXPECT_EQ(RefusedId(PresetPlan("deepseek-v3", "gb200-nvl72", 8), 8, "fi_a2a", true),
            "(accepted)");
  EXPECT_EQ(RefusedId(PresetPlan("deepseek-v3", "mi300x", 8), 8, "fi_a2a", false),
            "CTXPAR-DCP-003");
  // Llama-3.1-70B: 8 KV heads, so tp 16 replicates each twice and dcp 4 cannot shard them.
  EXPECT_EQ(RefusedId(PresetPlan("llama-3.1-70b", "h100", 16), 4, "a2a", false),
            "CTXPAR-MODEL-004");
  // DeepSeek-V3's weights do not fit 4 H100s.
  EXPECT_EQ(RefusedId(PresetPlan("deepseek-v3", "h100", 4), 1, "ag_rs", false), "CTXPAR-PLAN-005");
  for (const Candidate& c : h200.refused) {
    EXPECT_NE(FindCatalogEntry(c.refused_id), nullptr) << c.flags << ": " << c.refused.ToString();
  }
}

TEST(PlanPresets, DcpMultipliesTheMlaCapacityAndEveryPresetPlans) {
  const PlanReport r = PresetPlan("deepseek-v3", "h200", 8);
  int64_t dcp1 = 0, dcp8 = 0;
  for (const Candidate& c : r.ranked) {
    if (c.dcp_size == 1) dcp1 = c.max_total_num_tokens;
    if (c.dcp_size == 8 && !c.replicate_q) dcp8 = c.max_total_num_tokens;
  }
  // One latent head: without DCP every rank holds every token; DCP 8 shards it 8 ways.
  EXPECT_EQ(dcp8, 8 * dcp1);
  // Gemma 3 27B's pool has its window layers' group (W = 1024) beside the global layers'.
  const PlanReport gemma = PresetPlan("gemma-3-27b", "h200", 8);
  ASSERT_FALSE(gemma.ranked.empty());
  const std::vector<KvGroupSpec> groups = KvPool::GroupsOf(gemma.ranked.front().pool);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].layers.size(), 10u);  // layers 5, 11, ..., 59 of 62
  EXPECT_EQ(groups[1].window, 1024);
  for (const std::string& name : PresetModelNames()) {
    EXPECT_FALSE(PresetPlan(name, "b200", 8).ranked.empty()) << name;
  }
  EXPECT_EQ(PresetModel("gpt-5").status().error_id(), "CTXPAR-PLAN-001");
  EXPECT_EQ(PresetHardware("h300").status().error_id(), "CTXPAR-PLAN-002");
}

TEST(PlanWorkload, RefusesWhatCannotRun) {
  Workload w;
  w.input = {0, 10};
  EXPECT_EQ(MakeRequests(w).status().error_id(), "CTXPAR-PLAN-004");
  w.input = {10, 5};
  EXPECT_EQ(MakeRequests(w).status().error_id(), "CTXPAR-PLAN-004");
  w.input = {10, 10};
  w.concurrency = 2;
  w.request_rate = 1;
  EXPECT_EQ(MakeRequests(w).status().error_id(), "CTXPAR-PLAN-004");
  w.request_rate = std::nan("");
  EXPECT_EQ(MakeRequests(w).status().error_id(), "CTXPAR-PLAN-004");
  w.request_rate = 0;
  Expected<std::vector<SimRequest>> reqs = MakeRequests(w);
  ASSERT_TRUE(reqs.ok());
  EXPECT_EQ(reqs->size(), 16u);
  for (int bad : {0, -1, 1000001}) {
    w.num_requests = bad;
    EXPECT_EQ(CheckWorkload(w).error_id(), "CTXPAR-PLAN-004") << bad;
  }
  w.num_requests = 1;
  EXPECT_EQ(MakeRequests(w)->size(), 1u);
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    Workload t = w;
    t.ttft_slo_ms = bad;
    EXPECT_EQ(CheckWorkload(t).error_id(), "CTXPAR-PLAN-004") << bad;
    t = w;
    t.itl_slo_ms = bad;
    EXPECT_EQ(CheckWorkload(t).error_id(), "CTXPAR-PLAN-004") << bad;
  }
  w.concurrency = 0;
  EXPECT_EQ(CheckWorkload(w).error_id(), "CTXPAR-PLAN-004");
  w.request_rate = HUGE_VAL;
  EXPECT_EQ(CheckWorkload(w).error_id(), "CTXPAR-PLAN-004");
  EXPECT_EQ(HardwareFromJson("{\"mem_gbps\": 1}", "x.json").status().error_id(), "CTXPAR-PLAN-003");
  EXPECT_EQ(HardwareFromJson("[1]", "x.json").status().error_id(), "CTXPAR-PLAN-003");
}

// Hosts joined by a network: host_ranks needs the network's rate, and a layout over more ranks
// than one host holds pays the network's latency in every collective.
TEST(PlanHosts, CollectivesBeyondAHostCrossTheNetwork) {
  const std::string rates = R"("memory_gib": 24, "mem_gbps": 20, "flops": 1e11)";
  EXPECT_EQ(HardwareFromJson("{" + rates + R"(, "host_ranks": 1})", "x.json").status().error_id(),
            "CTXPAR-PLAN-003");
  EXPECT_EQ(HardwareFromJson("{" + rates + R"(, "host_ranks": 0, "net_gbps": 1})", "x.json")
                .status()
                .error_id(),
            "CTXPAR-PLAN-003");
  Expected<Hardware> one = HardwareFromJson("{" + rates + "}", "x.json");
  Expected<Hardware> hosts = HardwareFromJson(
      "{" + rates + R"(, "host_ranks": 1, "net_gbps": 0.1, "net_latency_us": 500})", "x.json");
  ASSERT_TRUE(one.ok() && hosts.ok());
  EXPECT_EQ(hosts->domain_devices, 1);
  Expected<PlanModel> m = PresetModel("llama-3.1-70b");
  ASSERT_TRUE(m.ok());
  PlanRequest req = ClosedLoop(256, 8, 1, 1);
  req.devices = 2;
  ASSERT_TRUE(req.base.Set("dcp_size", int64_t{2}).ok());
  Expected<PlanReport> a = MakePlan(*m, *one, req);
  Expected<PlanReport> b = MakePlan(*m, *hosts, req);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_FALSE(a->ranked.empty());
  ASSERT_FALSE(b->ranked.empty());
  // 80 layers, at least four collectives each, 0.5 ms apiece.
  EXPECT_GT(b->ranked[0].sim.decode_step_ms, a->ranked[0].sim.decode_step_ms + 80 * 4 * 0.5);
}

// The machine's side of a plan is checked before any candidate is simulated.
TEST(PlanInputs, RefusesAMachineOutOfRange) {
  Expected<PlanModel> m = PresetModel("llama-3.1-70b");
  Expected<Hardware> h = PresetHardware("h200");
  ASSERT_TRUE(m.ok() && h.ok());
  PlanRequest req = ClosedLoop(1024, 16, 4, 4);
  for (double fraction : {5.0, 1.0000001, 0.0, -0.5, std::nan("")}) {
    Hardware hw = *h;
    hw.mem_fraction_static = fraction;
    EXPECT_EQ(MakePlan(*m, hw, req).status().error_id(), "CTXPAR-PLAN-006") << fraction;
  }
  for (int devices : {0, -1, 4097}) {
    req.devices = devices;
    EXPECT_EQ(MakePlan(*m, *h, req).status().error_id(), "CTXPAR-PLAN-006") << devices;
  }
  req.devices = 8;
  Hardware hw = *h;
  hw.mem_fraction_static = 1;
  EXPECT_TRUE(MakePlan(*m, hw, req).ok());
}

// The engine's cost beyond the kernels, by the sequences of a step: linear between the measured
// points, the last slope beyond them, and a file of the fields it replaced is refused.
TEST(PlanStepCost, FollowsTheCurveOfTheMachineFile) {
  const std::string rates = R"("memory_gib": 24, "mem_gbps": 20, "flops": 1e11)";
  auto hw = [&](const std::string& extra) {
    return HardwareFromJson("{" + rates + extra + "}", "x.json");
  };
  Expected<PlanModel> m = PresetModel("llama-3.1-70b");
  ASSERT_TRUE(m.ok());
  auto step_ms = [&](const Hardware& h, int clients) {
    Expected<PlanReport> r = MakePlan(*m, h, ClosedLoop(256, 32, clients, clients));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    for (const Candidate& c : r.ok() ? r->ranked : std::vector<Candidate>{}) {
      if (c.dcp_size == 1) return c.sim.decode_step_ms;
    }
    ADD_FAILURE() << "no dcp 1 candidate";
    return -1.0;
  };
  Expected<Hardware> bare = hw("");
  Expected<Hardware> costed = hw(R"(, "step_cost_us": [[1, 1000], [2, 3000]])");
  ASSERT_TRUE(bare.ok() && costed.ok()) << costed.status().ToString();
  EXPECT_NEAR(step_ms(*costed, 1) - step_ms(*bare, 1), 1.0, 1e-9);
  EXPECT_NEAR(step_ms(*costed, 2) - step_ms(*bare, 2), 3.0, 1e-9);
  EXPECT_NEAR(step_ms(*costed, 4) - step_ms(*bare, 4), 7.0, 1e-9);
  // The matmul efficiency by the step's tokens: a curve through one value is that value.
  auto ttft_ms = [&](const Hardware& h) {
    Expected<PlanReport> r = MakePlan(*m, h, ClosedLoop(2000, 4, 1, 1));
    EXPECT_TRUE(r.ok() && !r->ranked.empty()) << r.status().ToString();
    return r.ok() && !r->ranked.empty() ? r->ranked.front().sim.ttft_ms_p50 : -1.0;
  };
  const double half = ttft_ms(*hw(R"(, "flops_efficiency": 0.5)"));
  EXPECT_DOUBLE_EQ(ttft_ms(*hw(R"(, "flops_efficiency": [[64, 0.5], [9000, 0.5]])")), half);
  const double full = ttft_ms(*hw(""));
  const double sloped = ttft_ms(*hw(R"(, "flops_efficiency": [[64, 1.0], [4000, 0.5]])"));
  EXPECT_LT(full, sloped);
  EXPECT_LT(sloped, half);
  for (const std::string bad :
       {R"(, "flops_efficiency": 0)", R"(, "flops_efficiency": [[64, 0]])",
        R"(, "flops_efficiency": "fast")", R"(, "step_cost_us": [[2, 5], [1, 5]])",
        R"(, "step_cost_us": [[0, 5]])", R"(, "step_cost_us": [[1, -5]])",
        R"(, "step_cost_us": [])", R"(, "per_seq_us": 500)", R"(, "step_overhead_us": 500)"}) {
    EXPECT_EQ(hw(bad).status().error_id(), "CTXPAR-PLAN-003") << bad;
  }
}

// A server's client sends its next request when the last token is streamed, and it arrives while
// the engine runs the step after: the request joins the step after that. In the engine's process
// (Engine::Submit from the finish callback) it joins the next step.
TEST(PlanWorkload, AServersNextRequestJoinsTheStepAfterTheNext) {
  Expected<PlanModel> m = PresetModel("llama-3.1-70b");
  Expected<Hardware> h = PresetHardware("h200");
  ASSERT_TRUE(m.ok() && h.ok());
  for (const bool in_process : {false, true}) {
    SCOPED_TRACE(in_process ? "in process" : "server");
    PlanRequest req = ClosedLoop(64, 4, 2, 3);
    req.workload.in_process = in_process;
    Expected<PlanReport> report = MakePlan(*m, *h, req);
    ASSERT_TRUE(report.ok() && !report->ranked.empty()) << report.status().ToString();
    const Candidate& c = report->ranked.front();
    std::vector<StepRecord> steps;
    ASSERT_TRUE(Simulate(*m, *h, c.config, c.pool, req.workload, [&](const StepRecord& r) {
                  steps.push_back(r);
                }).ok());
    auto has = [&](std::size_t step, uint64_t id) {
      for (const StepRecord::Entry& e : steps[step].batch) {
        if (e.id == id) return true;
      }
      return false;
    };
    std::size_t last1 = 0, first3 = steps.size();
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (has(i, 1)) last1 = i;
      if (has(i, 3) && first3 == steps.size()) first3 = i;
    }
    // Request 1 runs in 4 steps (1 prefill + 3 decodes); request 2 joins it in the first step in
    // the engine's process, in the second from a server.
    EXPECT_EQ(last1, 3u);
    EXPECT_EQ(has(0, 2), in_process);
    EXPECT_TRUE(has(1, 2));
    EXPECT_EQ(first3, last1 + (in_process ? 1 : 2));
  }
}

// One request of 64 output tokens at tp 8 on H200 (weight-bound decode), 3 drafts a step at most.
struct SpeculativeRun {
  SimResult sim, plain;
  std::vector<int32_t> drafts;  // per decode step
};
SpeculativeRun RunSpeculative(double accept_rate, int clients = 1, int requests = 1,
                              int output = 64, int dcp = 1, int input = 256) {
  Expected<PlanModel> m = PresetModel("llama-3.1-70b");
  Expected<Hardware> h = PresetHardware("h200");
  EXPECT_TRUE(m.ok() && h.ok());
  PlanRequest req = ClosedLoop(input, output, clients, requests);
  req.workload.in_process = true;
  Expected<PlanReport> report = MakePlan(*m, *h, req);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  auto c_it = std::find_if(report->ranked.begin(), report->ranked.end(),
                           [&](const Candidate& c) { return c.dcp_size == dcp; });
  EXPECT_NE(c_it, report->ranked.end());
  const Candidate& c = *c_it;
  EngineConfig config = c.config;
  config.speculative_algorithm = SpeculativeAlgorithm::kNgram;
  config.speculative_num_draft_tokens = 4;
  req.workload.spec_accept_rate = accept_rate;
  SpeculativeRun run;
  Expected<SimResult> sim =
      Simulate(*m, *h, config, c.pool, req.workload, [&](const StepRecord& r) {
        if (r.batch.size() == 1 && r.batch[0].pos0 > 0) run.drafts.push_back(r.batch[0].drafts);
      });
  EXPECT_TRUE(sim.ok()) << sim.status().ToString();
  if (sim.ok()) run.sim = *sim;
  run.plain = c.sim;
  return run;
}

// Every draft accepted: the record's prior (one half) drafts 1 token (2 tokens in a step of 1.2
// gain as much as 2.25 in 1.4, and the rule takes the fewer drafts), then the cap of 3 (at
// p = 1.9 / 2.8, 3 drafts give 2.45 tokens in 1.6 steps, 2 give 2.14 in 1.4); the 63 tokens after
// the prefill's come 2 + 15 x 4 + 1, in 17 verify steps, the last with no draft (max_new_tokens).
TEST(PlanSpeculation, AVerifyStepGivesItsAcceptedDraftsAndOneToken) {
  const SpeculativeRun all = RunSpeculative(1.0);
  EXPECT_EQ(all.sim.steps, 1 + 17);
  EXPECT_DOUBLE_EQ(all.sim.accept_length, 63.0 / 17);
  ASSERT_EQ(all.drafts.size(), 17u);
  EXPECT_EQ(all.drafts.front(), 1);
  for (std::size_t i = 1; i + 1 < all.drafts.size(); ++i) EXPECT_EQ(all.drafts[i], 3) << i;
  EXPECT_EQ(all.drafts.back(), 0);
  // Decode reads the weights once a step whatever its rows: four rows cost about one.
  EXPECT_GT(all.sim.output_tokens_per_s, 2.5 * all.plain.output_tokens_per_s);
  EXPECT_EQ(all.plain.steps, 1 + 63);
  // Under DCP the verify rows combine as decode rows do: no context all-gather of a prefill.
  const SpeculativeRun dcp8 = RunSpeculative(1.0, 8, 8, 64, 8, 16384);
  EXPECT_LT(dcp8.sim.decode_step_ms, 1.5 * dcp8.plain.decode_step_ms);
}

// Nothing accepted: one token a step as without drafts, and the rule stops drafting after three
// rejections (p = 0.9 / 2.8, 0.81 / 3.52: a draft still gains, 1.32 and 1.23 tokens in 1.2 steps;
// at 0.73 / 4.17 it loses), probing one token every 8 steps; the rows it paid for make it slower
// than plain decoding, but not by much.
TEST(PlanSpeculation, DraftsThatAreNeverAcceptedCostLittle) {
  const SpeculativeRun none = RunSpeculative(0.0);
  EXPECT_EQ(none.sim.steps, none.plain.steps);
  EXPECT_DOUBLE_EQ(none.sim.accept_length, 1.0);
  ASSERT_EQ(none.drafts.size(), 63u);
  EXPECT_EQ(std::vector<int32_t>(none.drafts.begin(), none.drafts.begin() + 4),
            (std::vector<int32_t>{1, 1, 1, 0}));
  int drafting = 0;
  for (int32_t d : none.drafts) drafting += d > 0;
  EXPECT_LE(drafting, 3 + 63 / 8);
  EXPECT_LE(none.sim.output_tokens_per_s, none.plain.output_tokens_per_s);
  EXPECT_GT(none.sim.output_tokens_per_s, 0.9 * none.plain.output_tokens_per_s);
}

// Each draft accepted with p = 0.9 (the rule keeps 3 drafts while its estimate stays above 0.68):
// a verify step gives (1 - p^4) / (1 - p) = 3.439 tokens, a little less where a run of
// rejections shortens the drafts and at the ends of the requests.
TEST(PlanSpeculation, TheAcceptLengthIsTheGeometricSeriesOfTheRate) {
  const SpeculativeRun run = RunSpeculative(0.9, 8, 64, 128);
  EXPECT_LE(run.sim.accept_length, 3.439);
  EXPECT_GT(run.sim.accept_length, 0.95 * 3.439);
}

TEST(PlanSpeculation, RefusesWhatItCannotPrice) {
  Expected<PlanModel> m = PresetModel("llama-3.1-70b");
  Expected<Hardware> h = PresetHardware("h200");
  ASSERT_TRUE(m.ok() && h.ok());
  auto refusal = [&](std::optional<std::string> algorithm, std::optional<double> rate) {
    PlanRequest req = ClosedLoop(256, 16, 1, 1);
    if (algorithm) EXPECT_TRUE(req.base.Set("speculative_algorithm", *algorithm).ok());
    req.workload.spec_accept_rate = rate;
    const Status st = MakePlan(*m, *h, req).status();
    EXPECT_EQ(st.error_id(), "CTXPAR-PLAN-004") << st.ToString();
    return st.message();
  };
  EXPECT_NE(refusal("NGRAM", std::nullopt).find("--speculative-accept-rate = (not given)"),
            std::string::npos);
  EXPECT_NE(refusal(std::nullopt, 0.5).find("--speculative-accept-rate = 0.5"), std::string::npos);
  EXPECT_NE(refusal("STANDALONE", 0.5).find("--speculative-algorithm = STANDALONE"),
            std::string::npos);
  EXPECT_NE(refusal("NGRAM", 1.5).find("--speculative-accept-rate = 1.5"), std::string::npos);
  EXPECT_NE(refusal("NGRAM", std::nan("")).find("--speculative-accept-rate"), std::string::npos);
}

}  // namespace
}  // namespace ctxpar::plan
