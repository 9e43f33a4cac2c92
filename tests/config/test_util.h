// Helpers for the configuration tests: build a LaunchConfig, name a platform.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "ctxpar/config.h"

namespace ctxpar::testing {

inline LaunchConfig Launch(std::vector<std::pair<std::string, FieldValue>> fields) {
  LaunchConfig raw;
  for (auto& [name, value] : fields) {
    Status s = raw.Set(name, value);
    EXPECT_TRUE(s.ok()) << name << ": " << s.message();
  }
  return raw;
}

// A platform as --platform would give it (so the init-time platform checks apply).
inline Platform Named(std::string_view spec) {
  Expected<Platform> p = ParsePlatform(spec);
  EXPECT_TRUE(p.ok()) << spec;
  return p.ok() ? *p : Platform{};
}

// The same platform as if the probe had found it (the init-time checks are left to init).
inline Platform Probed(std::string_view spec) {
  Platform p = Named(spec);
  p.origin = PlatformOrigin::kProbe;
  return p;
}

inline FieldValue I(int64_t v) { return v; }
inline FieldValue S(const char* v) { return std::string(v); }

}  // namespace ctxpar::testing
