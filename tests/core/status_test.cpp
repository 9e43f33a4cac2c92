#include "ctxpar/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace ctxpar {
namespace {

Expected<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Chain(int x, int* out) {
  CTXPAR_ASSIGN_OR_RETURN(int h, Half(x));
  CTXPAR_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(Status, OkAndErrorCarryCodeMessageAndCatalogId) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s(StatusCode::kInvalidArgument, "bad", "CTXPAR-DCP-001");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "bad");
  EXPECT_EQ(s.error_id(), "CTXPAR-DCP-001");
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: bad");
}

TEST(Expected, HoldsValueOrStatusAndPropagates) {
  int out = 0;
  EXPECT_TRUE(Chain(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Chain(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
  Expected<std::unique_ptr<int>> moved(std::make_unique<int>(7));
  std::unique_ptr<int> p = std::move(moved).value();
  EXPECT_EQ(*p, 7);
}

}  // namespace
}  // namespace ctxpar
