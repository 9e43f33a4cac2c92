// CheckFinite and CheckLayerFinite: finite values pass; NaN and infinities anywhere (alone, or as
// inf - inf would give) are counted and the first is named with the model file.
#include "models/check_finite.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace ctxpar {
namespace {

TEST(CheckFinite, PassesFiniteValues) {
  std::vector<float> v = {0.0f, -0.0f, 1e38f, -3.4e38f, 1e-45f, 42.0f};
  EXPECT_TRUE(CheckFinite(v.data(), v.size(), "the logits", "m.gguf").ok());
  EXPECT_TRUE(CheckFinite(nullptr, 0, "the logits", "m.gguf").ok());
}

TEST(CheckFinite, NamesTheFirstValueThatIsNotANumber) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(49152, 0.5f);
  v[7] = inf;
  v[9] = -inf;
  v[40000] = std::numeric_limits<float>::quiet_NaN();
  const Status s = CheckFinite(v.data(), v.size(), "the output of layer 3", "/m/x.gguf");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.error_id(), "CTXPAR-MODEL-009");
  EXPECT_EQ(s.message(),
            "The model '/m/x.gguf' computed values that are not finite in the output of layer 3: "
            "3 of them, the first at index 7 (inf).");
  std::vector<float> one = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(CheckFinite(one.data(), one.size(), "the logits", "m.gguf").message(),
            "The model 'm.gguf' computed values that are not finite in the logits: 1 of them, the "
            "first at index 1 (nan).");
}

TEST(CheckLayerFinite, NamesTheLayerOnlyWhenAValueIsNotANumber) {
  std::vector<float> v(576, -2.0f);
  EXPECT_TRUE(CheckLayerFinite(v.data(), v.size(), 29, "m.gguf").ok());
  v[100] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(CheckLayerFinite(v.data(), v.size(), 29, "m.gguf").message(),
            "The model 'm.gguf' computed values that are not finite in the output of layer 29: 1 "
            "of them, the first at index 100 (-inf).");
}

}  // namespace
}  // namespace ctxpar
