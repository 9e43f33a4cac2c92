// What the Gemma 3 file tells the launch configuration, checked against its metadata as
// gguf-py reads it (docs/gemma3.md's table): the architecture, the heads, the KV layer groups
// (layers 5, 11, 17 global, the rest a window of 512), the KV heads a rank stores at each tp / dcp,
// and the rules of its hook. Skips when the model file is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ctxpar/launch.h"
#include "ctxpar/model.h"
#include "models/sequence_runner.h"

namespace ctxpar {
namespace {

class Gemma3Source : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::Gemma3ModelPath();
    if (!std::filesystem::exists(path_)) {
      GTEST_SKIP() << "no Gemma 3 model at " << path_
                   << " (scripts/fetch-model.sh gemma3, or set CTXPAR_GEMMA3_MODEL)";
    }
  }
  std::string path_;
};

TEST_F(Gemma3Source, DescribesTheNetworkAndItsKvGroups) {
  auto launch = testing::TestLaunch(path_, {{"tp_size", int64_t{4}}, {"dcp_size", int64_t{4}}});
  ASSERT_TRUE(launch.ok()) << launch.status().ToString();
  const ModelSource& source = *launch->source;
  EXPECT_EQ(source.info().architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(source.info().num_attention_heads, 4);
  EXPECT_EQ(source.info().num_key_value_heads, 1);
  EXPECT_EQ(source.desc().vocab_size, 262144);
  EXPECT_EQ(source.desc().context_length, 32768);
  const KvSpec spec = source.KvSpecFor(launch->config);
  EXPECT_EQ(spec.num_layers, 18);
  EXPECT_EQ(spec.num_kv_heads, 1);
  EXPECT_EQ(spec.head_dim_k, 256);
  ASSERT_EQ(spec.groups.size(), 2u);
  EXPECT_EQ(spec.groups[0].layers, (std::vector<int>{5, 11, 17}));
  EXPECT_EQ(spec.groups[0].window, 0);
  EXPECT_EQ(spec.groups[1].layers,
            (std::vector<int>{0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16}));
  EXPECT_EQ(spec.groups[1].window, 512);
  EXPECT_GT(launch->swa_max_total_num_tokens, 0);
}

TEST_F(Gemma3Source, HookRefusesWhatTheModelCannotRun) {
  struct Case {
    std::vector<std::pair<std::string, FieldValue>> fields;
    std::string id;
  };
  const std::vector<Case> cases = {
      {{{"tp_size", int64_t{3}}}, "CTXPAR-MODEL-002"},
      {{{"tp_size", int64_t{8}}}, "CTXPAR-MODEL-002"},
      {{{"llama_cpp_numerics", true}}, "CTXPAR-MODEL-005"},
      {{{"ep_size", int64_t{2}}, {"tp_size", int64_t{2}}}, "CTXPAR-MODEL-005"},
  };
  for (const Case& c : cases) {
    auto launch = testing::TestLaunch(path_, c.fields);
    ASSERT_FALSE(launch.ok()) << c.id;
    EXPECT_EQ(launch.status().error_id(), c.id) << launch.status().ToString();
  }
  for (int tp : {1, 2, 4}) {
    auto launch = testing::TestLaunch(path_, {{"tp_size", int64_t{tp}}});
    EXPECT_TRUE(launch.ok()) << "tp " << tp << ": " << launch.status().ToString();
  }
}

}  // namespace
}  // namespace ctxpar
