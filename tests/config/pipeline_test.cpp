// The resolution pipeline: handler order, append-only declarations, the live and the frozen
// view, provenance, unknown fields.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "config/test_util.h"
#include "ctxpar/config.h"

namespace ctxpar {
namespace {

using testing::I;
using testing::Launch;
using testing::Probed;
using testing::S;

template <typename T>
concept Writable = requires(T t) {
  t.Set(std::string_view(), FieldValue());
}
|| requires(T t) { t.Declare(std::string_view(), {}); };

// The views expose no way to write, and what they hand out is const.
static_assert(!Writable<ResolvingView>);
static_assert(!Writable<ResolvedConfig>);
static_assert(Writable<LaunchConfig>);
static_assert(
    std::is_const_v<std::remove_reference_t<decltype(std::declval<ResolvedConfig>().fields())>>);
static_assert(std::is_const_v<
              std::remove_pointer_t<decltype(std::declval<ResolvedConfig>().Provenance(""))>>);

TEST(ConfigPipeline, DocumentedHandlerOrder) {
  std::vector<std::string_view> names;
  for (const Handler& h : DefaultHandlers()) names.push_back(h.name);
  EXPECT_EQ(names, (std::vector<std::string_view>{
                       "_handle_legacy_cp_args", "_handle_dcp_validation", "_handle_parallelism",
                       "_handle_model_specific_adjustments", "_handle_platform_checks",
                       "_handle_cpu_engine", "_handle_speculative_decoding"}));
}

TEST(ConfigPipeline, DeclarationsAreAppendOnlyAndTheViewIsLive) {
  Resolution r(Launch({{"tp_size", I(8)}}));
  ResolvingView view = r.view();
  EXPECT_EQ(view.tp_size(), 8);
  EXPECT_EQ(view.attn_cp_size(), 1);
  ResolvedConfig before = r.Freeze();
  ASSERT_TRUE(r.Declare("first", {{"attn_cp_size", I(2)}, {"enable_dp_attention", true}}).ok());
  EXPECT_EQ(view.attn_cp_size(), 2);  // live
  ASSERT_TRUE(r.Declare("second", {{"attn_cp_size", I(4)}}).ok());
  EXPECT_EQ(view.attn_cp_size(), 4);    // newest first
  EXPECT_EQ(before.attn_cp_size(), 1);  // frozen
  ASSERT_EQ(r.declarations().size(), 3u);
  EXPECT_EQ(r.declarations()[0].source, "first");
  EXPECT_EQ(r.declarations()[0].field, "attn_cp_size");
  EXPECT_EQ(r.declarations()[2].source, "second");
  // The raw snapshot never changes.
  EXPECT_EQ(r.raw().raw("attn_cp_size"), FieldValue(int64_t{1}));
  EXPECT_FALSE(r.raw().given("attn_cp_size"));

  ResolvedConfig after = r.Freeze();
  const FieldResolution* cp = after.Provenance("attn_cp_size");
  ASSERT_NE(cp, nullptr);
  EXPECT_EQ(cp->raw, FieldValue(int64_t{1}));
  EXPECT_EQ(cp->value, FieldValue(int64_t{4}));
  EXPECT_EQ(cp->source, "second");  // last writer wins
  EXPECT_EQ(after.Provenance("enable_dp_attention")->source, "first");
  EXPECT_EQ(after.Provenance("tp_size")->source, "user");
  EXPECT_EQ(after.Provenance("page_size")->source, "default");
  EXPECT_EQ(after.Provenance("no_such_field"), nullptr);
}

TEST(ConfigPipeline, UnknownFieldNamesTheSourceAndLeavesNoTrace) {
  Resolution r(LaunchConfig{});
  Status s = r.Declare("my_model_hook", {{"tp_size", I(2)}, {"dcp_sise", I(2)}});
  EXPECT_EQ(s.error_id(), "CTXPAR-CONFIG-001");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "my_model_hook declared 'dcp_sise', which is not a configuration field.");
  EXPECT_TRUE(r.declarations().empty());
  EXPECT_EQ(r.view().tp_size(), 1);
}

TEST(ConfigPipeline, WrongTypeNamesTheSource) {
  Resolution r(LaunchConfig{});
  Status s = r.Declare("my_model_hook", {{"tp_size", S("2")}});
  EXPECT_EQ(s.error_id(), "CTXPAR-CONFIG-002");
  EXPECT_EQ(s.message(), "my_model_hook declared tp_size='2', but tp_size holds an integer.");
  EXPECT_EQ(r.Declare("h", {{"tp_size", FieldValue()}}).message(),
            "h declared tp_size=None, but tp_size holds an integer.");
  // Nullable fields take None.
  EXPECT_TRUE(r.Declare("h", {{"dcp_replicate_q_proj", FieldValue()}}).ok());
}

TEST(ConfigPipeline, RunsHandlersInOrderAndStopsAtTheFirstFailure) {
  static std::vector<std::string> trace;
  trace.clear();
  const Handler handlers[] = {
      {"a",
       [](Resolution& r, const ResolveContext&) {
         trace.push_back("a");
         return r.Declare("a", {{"page_size", I(16)}});
       }},
      {"b",
       [](Resolution& r, const ResolveContext&) {
         trace.push_back("b:" + std::to_string(r.view().page_size()));
         return r.Declare("b", {{"not_a_field", I(1)}});
       }},
      {"c",
       [](Resolution&, const ResolveContext&) {
         trace.push_back("c");
         return Status::Ok();
       }},
  };
  Platform cpu = Probed("cpu");
  ResolveOutcome out = RunPipeline(LaunchConfig{}, ResolveContext{cpu, nullptr}, handlers);
  EXPECT_EQ(trace, (std::vector<std::string>{"a", "b:16"}));
  EXPECT_EQ(out.status.message(), "b declared 'not_a_field', which is not a configuration field.");
  // What was resolved before the failure is kept for printing.
  EXPECT_EQ(out.config.page_size(), 16);
  EXPECT_EQ(out.config.Provenance("page_size")->source, "a");
}

TEST(ConfigPipeline, PlatformIsDeclaredWhenNotGiven) {
  ResolvedConfig c = *Resolve(LaunchConfig{}, Probed("cuda:sm90+mnnvl"), nullptr);
  EXPECT_EQ(c.platform(), "cuda:sm90+mnnvl");
  EXPECT_EQ(c.Provenance("platform")->source, "_handle_platform_checks");
  EXPECT_EQ(c.Provenance("platform")->raw, FieldValue());
  LaunchConfig raw = Launch({{"platform", S("rocm")}});
  ResolvedConfig given = *Resolve(raw, *PlatformForLaunch(raw), nullptr);
  EXPECT_EQ(given.Provenance("platform")->source, "user");
  EXPECT_EQ(given.platform(), "rocm");
}

TEST(ConfigPipeline, ModelArchitectureFromTheModel) {
  ModelInfo kimi{"KimiK3ForCausalLM", 64, 64};
  ResolvedConfig c =
      *Resolve(Launch({{"tp_size", I(4)}, {"dcp_size", I(4)}}), Probed("cpu"), &kimi);
  EXPECT_EQ(c.model_arch(), "KimiK3ForCausalLM");
  EXPECT_EQ(c.Provenance("model_arch")->source, "_handle_model_specific_adjustments");
  EXPECT_EQ(c.dcp_comm_backend(), "a2a");  // the Kimi hook ran
}

TEST(ConfigPipeline, NonDefaultFieldsInTableOrder) {
  ResolvedConfig c = *Resolve(
      Launch({{"dcp_size", I(2)}, {"tp_size", I(2)}, {"kv_cache_mib", I(1024)}, {"threads", I(1)}}),
      Probed("cpu"), nullptr);
  std::vector<std::string_view> names;
  for (const FieldResolution& f : c.NonDefaultFields()) names.push_back(f.field->name);
  // kv_cache_mib was given but equals its default, so it is not listed; the CPU engine's step
  // declares the values SGLang derives from GPU memory.
  EXPECT_EQ(names, (std::vector<std::string_view>{"platform", "tp_size", "dcp_size", "page_size",
                                                  "max_running_requests", "chunked_prefill_size",
                                                  "threads"}));
  EXPECT_EQ(c.Provenance("page_size")->source, "_handle_cpu_engine");
  EXPECT_EQ(c.Provenance("threads")->source, "user");
}

// The default --threads counts the cores this process may use (taskset, a container's cpuset),
// not the machine's: with one core allowed, one thread, where more would take turns on it.
TEST(ConfigPipeline, DefaultThreadsFollowTheAffinityMask) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const Expected<ResolvedConfig> narrowed = Resolve(Launch({}), Probed("cpu"), nullptr);
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status().message();
  EXPECT_EQ(narrowed->threads(), 1);
  const ResolvedConfig whole = *Resolve(Launch({{"tp_size", I(2)}}), Probed("cpu"), nullptr);
  EXPECT_EQ(whole.threads(), std::max(1, CPU_COUNT(&all) / 2));
}

TEST(LaunchConfigTest, SetValidatesAtTheBoundary) {
  LaunchConfig raw;
  EXPECT_EQ(raw.Set("tp_sise", I(2)).message(),
            "user declared 'tp_sise', which is not a configuration field.");
  EXPECT_EQ(raw.Set("tp_size", true).message(),
            "user declared tp_size=True, but tp_size holds an integer.");
  EXPECT_EQ(raw.Set("tp_size", I(0)).error_id(), "CTXPAR-FLAG-003");
  EXPECT_EQ(raw.Set("tp_size", I(int64_t{1} << 40)).error_id(), "CTXPAR-FLAG-003");
  EXPECT_EQ(raw.Set("cp_strategy", S("ring")).message(),
            "Invalid value 'ring' for --cp-strategy; valid values: interleave, zigzag.");
  EXPECT_FALSE(raw.given("tp_size"));
  EXPECT_EQ(raw.raw("tp_size"), FieldValue(int64_t{1}));
  EXPECT_TRUE(raw.Set("tp_size", I(8)).ok());
  EXPECT_TRUE(raw.given("tp_size"));
}

TEST(FieldValues, PythonFormatting) {
  EXPECT_EQ(FieldValueRepr(FieldValue()), "None");
  EXPECT_EQ(FieldValueRepr(true), "True");
  EXPECT_EQ(FieldValueRepr(false), "False");
  EXPECT_EQ(FieldValueRepr(int64_t{-4}), "-4");
  EXPECT_EQ(FieldValueRepr(std::string("a2a")), "'a2a'");
  EXPECT_EQ(FieldValueStr(std::string("a2a")), "a2a");
  EXPECT_EQ(FieldValueStr(FieldValue()), "None");
}

TEST(FieldTable, FlagsFollowSglangSpelling) {
  for (const FieldSpec& f : ConfigFields()) {
    std::string expected = "--" + std::string(f.name);
    for (char& c : expected) c = c == '_' ? '-' : c;
    EXPECT_EQ(f.flag, expected) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
  EXPECT_EQ(FindField("dcp_size")->alias, "--decode-context-parallel-size");
  EXPECT_EQ(FindField("dcp_replicate_q_proj")->negation, "--no-dcp-replicate-q-proj");
  EXPECT_EQ(FindField("dcp_comm_backend")->default_value, FieldValue(std::string("ag_rs")));
  EXPECT_EQ(FindField("moe_a2a_backend")->default_value, FieldValue(std::string("none")));
  EXPECT_EQ(FindField("dcp_kv_cache_interleave_size")->default_value, FieldValue(int64_t{1}));
  EXPECT_EQ(FindField("nope"), nullptr);
}

}  // namespace
}  // namespace ctxpar
