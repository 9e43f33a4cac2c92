// What the readers' corruption suites hold every malformed input to: a Status, kDataLoss (or
// kUnimplemented for what the format allows but the reader does not take), with a message.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "ctxpar/status.h"

namespace ctxpar::testing {

template <typename File>
void ExpectGracefulError(const Expected<File>& f, const std::string& what) {
  const StatusCode code = f.status().code();
  EXPECT_TRUE(code == StatusCode::kDataLoss || code == StatusCode::kUnimplemented)
      << what << ": " << f.status().ToString();
  EXPECT_FALSE(f.status().message().empty()) << what;
}

}  // namespace ctxpar::testing
