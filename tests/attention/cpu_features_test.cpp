#include "ctxpar/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ctxpar {
namespace {

TEST(CpuFeatures, BestIsaNeedsEveryFeatureOfItsLevel) {
  CpuFeatures f;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kScalar);
  f.avx2 = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kScalar) << "AVX2 without FMA";
  f.fma = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kScalar) << "AVX2 without F16C";
  f.f16c = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kAvx2);
  f.avx512f = true;
  f.avx512bw = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kAvx2) << "AVX-512 without VL";
  f.avx512vl = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kAvx512);
  f.avx512_bf16 = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kAvx512Bf16);
  f.amx_tile = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kAvx512Bf16) << "AMX tiles without AMX-BF16";
  f.amx_bf16 = true;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kAmx);
  f.avx512_bf16 = false;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kAvx512) << "AMX without AVX512-BF16";
  f.avx512_bf16 = true;
  f.avx2 = false;
  EXPECT_EQ(BestCpuIsa(f), CpuIsa::kScalar);
}

TEST(CpuFeatures, DetectedFeaturesAreConsistent) {
  const CpuFeatures& f = DetectCpuFeatures();
  if (f.avx512bw || f.avx512vl) EXPECT_TRUE(f.avx512f);
  if (f.avx512_bf16) EXPECT_TRUE(f.avx512f);
  if (f.amx_bf16 || f.amx_int8) EXPECT_TRUE(f.amx_tile);
  EXPECT_EQ(&f, &DetectCpuFeatures());
}

class IsaEnv : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("CTXPAR_CPU_ISA"); }
};

TEST_F(IsaEnv, UnsetMeansBest) {
  unsetenv("CTXPAR_CPU_ISA");
  Expected<CpuIsa> isa = SelectCpuIsa();
  ASSERT_TRUE(isa.ok());
  EXPECT_EQ(*isa, BestCpuIsa(DetectCpuFeatures()));
}

TEST_F(IsaEnv, ScalarCanAlwaysBeForced) {
  setenv("CTXPAR_CPU_ISA", "scalar", 1);
  Expected<CpuIsa> isa = SelectCpuIsa();
  ASSERT_TRUE(isa.ok());
  EXPECT_EQ(*isa, CpuIsa::kScalar);
  EXPECT_EQ(CpuIsaName(*isa), "scalar");
}

TEST_F(IsaEnv, UnknownNameIsRejected) {
  setenv("CTXPAR_CPU_ISA", "sse9", 1);
  Expected<CpuIsa> isa = SelectCpuIsa();
  ASSERT_FALSE(isa.ok());
  EXPECT_EQ(isa.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(isa.status().message(),
            "CTXPAR_CPU_ISA=sse9 is not one of scalar, avx2, avx512, avx512_bf16, amx");
}

TEST_F(IsaEnv, PathAboveTheHardwareIsRefused) {
  if (BestCpuIsa(DetectCpuFeatures()) == CpuIsa::kAmx) GTEST_SKIP() << "this CPU has every path";
  setenv("CTXPAR_CPU_ISA", "amx", 1);
  Expected<CpuIsa> isa = SelectCpuIsa();
  ASSERT_FALSE(isa.ok());
  EXPECT_EQ(isa.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ctxpar
