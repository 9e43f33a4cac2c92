// Platform specs (--platform, CTXPAR_PLATFORM) and the run-time probe.
#include "ctxpar/platform.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace ctxpar {
namespace {

TEST(ParsePlatformTest, ValidSpecs) {
  Platform cpu = *ParsePlatform("cpu");
  EXPECT_EQ(cpu.kind, PlatformKind::kCpu);
  EXPECT_EQ(cpu.origin, PlatformOrigin::kFlag);
  EXPECT_EQ(ParsePlatform("rocm")->kind, PlatformKind::kRocm);
  Platform h = *ParsePlatform("cuda:sm90");
  EXPECT_TRUE(h.is_cuda());
  EXPECT_EQ(h.sm, 90);
  EXPECT_FALSE(h.mnnvl_fabric);
  Platform gb = *ParsePlatform("cuda:sm100+mnnvl", "CTXPAR_PLATFORM");
  EXPECT_EQ(gb.sm, 100);
  EXPECT_TRUE(gb.mnnvl_fabric);
  EXPECT_EQ(gb.origin, PlatformOrigin::kEnvironment);
  for (const char* spec : {"cpu", "rocm", "cuda:sm80", "cuda:sm90+mnnvl", "cuda:sm120"}) {
    EXPECT_EQ(ParsePlatform(spec)->Spec(), spec);
  }
}

TEST(ParsePlatformTest, InvalidSpecsNameTheValueAndTheForms) {
  Status s = ParsePlatform("h100").status();
  EXPECT_EQ(s.error_id(), "CTXPAR-FLAG-006");
  EXPECT_EQ(s.message(),
            "Invalid platform 'h100' from --platform; valid values: cpu, rocm, cuda:smXY, "
            "cuda:smXY+mnnvl (e.g. cuda:sm90, cuda:sm100+mnnvl).");
  EXPECT_EQ(ParsePlatform("gpu", "CTXPAR_PLATFORM").status().message(),
            "Invalid platform 'gpu' from CTXPAR_PLATFORM; valid values: cpu, rocm, cuda:smXY, "
            "cuda:smXY+mnnvl (e.g. cuda:sm90, cuda:sm100+mnnvl).");
  for (const char* bad : {"", "CPU", "cuda", "cuda:", "cuda:90", "cuda:sm", "cuda:sm9",
                          "cuda:sm090", "cuda:sm1000", "cuda:sm9x", "cuda:sm90+", "cuda:sm90+nvl",
                          "cuda:sm90+mnnvl+mnnvl", " cpu", "rocm:gfx942"}) {
    EXPECT_EQ(ParsePlatform(bad).status().error_id(), "CTXPAR-FLAG-006") << bad;
  }
}

// An independent oracle for the probe: without the NVIDIA device node there can be no CUDA
// device, so a CUDA build must report cpu.
TEST(ProbePlatformTest, ReportsCpuWithoutAnNvidiaDevice) {
  Platform p = ProbePlatform();
  EXPECT_EQ(p.origin, PlatformOrigin::kProbe);
  EXPECT_FALSE(p.description.empty());
  if (!std::filesystem::exists("/dev/nvidia0") && !std::filesystem::exists("/dev/nvidiactl")) {
    EXPECT_EQ(p.kind, PlatformKind::kCpu) << p.description;
    EXPECT_EQ(p.Spec(), "cpu");
  } else if (p.is_cuda()) {
    EXPECT_GE(p.sm, 30) << p.description;
  }
}

TEST(ProbePlatformTest, EnvironmentOverridesTheProbe) {
  ASSERT_EQ(setenv("CTXPAR_PLATFORM", "cuda:sm100+mnnvl", 1), 0);
  Expected<Platform> p = PlatformFromEnvironmentOrProbe();
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->Spec(), "cuda:sm100+mnnvl");
  EXPECT_EQ(p->origin, PlatformOrigin::kEnvironment);
  ASSERT_EQ(setenv("CTXPAR_PLATFORM", "tpu", 1), 0);
  EXPECT_EQ(PlatformFromEnvironmentOrProbe().status().error_id(), "CTXPAR-FLAG-006");
  ASSERT_EQ(unsetenv("CTXPAR_PLATFORM"), 0);
  EXPECT_EQ(PlatformFromEnvironmentOrProbe()->origin, PlatformOrigin::kProbe);
}

}  // namespace
}  // namespace ctxpar
