// DcpAttention over MPI (CTest runs this under mpiexec with 2 and 4 ranks): every backend, with
// and without replicated Q, GQA and MLA, against the float64 reference of dcp_reference.h; and
// DCP groups of 2 split out of the world (a DCP group inside a TP group).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "dcp_reference.h"

namespace ctxpar {
namespace {

using testing::DcpCase;

std::vector<DcpCase> WorldCases(int n) {
  std::vector<DcpCase> cases;
  int variant = 0;
  for (CombineBackend b : {CombineBackend::kAgRs, CombineBackend::kA2a, CombineBackend::kShmA2a}) {
    for (bool rep : {false, true}) {
      if (rep && b == CombineBackend::kAgRs) continue;
      DcpCase c{.name = std::string(CombineBackendName(b)) + (rep ? "_repq" : ""),
                .n = n,
                .backend = b,
                .replicate_q = rep,
                .interleave = (int[]){1, 4, 16}[variant % 3],
                .head_dim = variant % 2 ? 128 : 64,
                .lengths = {1, n - 1, 37, 70}};
      cases.push_back(c);
      DcpCase mla = c;
      mla.name += "_mla";
      mla.mla = true;
      mla.lengths = {2, 29};
      mla.kv_dtype = variant % 2 ? DataType::kBF16 : DataType::kF32;
      cases.push_back(mla);
      ++variant;
    }
  }
  DcpCase prefill{.name = "prefill_a2a_bf16wire",
                  .n = n,
                  .backend = CombineBackend::kA2a,
                  .interleave = 4,
                  .o_wire = DataType::kBF16,
                  .lengths = {3, 40},
                  .prefill_rows = 9};
  cases.push_back(prefill);
  return cases;
}

TEST(DcpMpi, EveryBackendMatchesReference) {
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  for (const DcpCase& c : WorldCases((*world)->size())) {
    SCOPED_TRACE(c.name);
    testing::RunRankAndCheck(c, testing::MakeProblem(c), **world);
  }
}

TEST(DcpMpi, DcpGroupsOfTwoInsideTheWorld) {
  auto world = MakeMpiWorld();
  ASSERT_TRUE(world.ok());
  if ((*world)->size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  auto dcp = (*world)->Split((*world)->rank() / 2, (*world)->rank());
  ASSERT_TRUE(dcp.ok()) << dcp.status().ToString();
  ASSERT_EQ((*dcp)->size(), 2);
  for (CombineBackend b : {CombineBackend::kAgRs, CombineBackend::kShmA2a}) {
    DcpCase c{.name = "split_" + std::string(CombineBackendName(b)),
              .n = 2,
              .backend = b,
              .lengths = {1, 17, 33},
              .tp_mult = (*world)->size() / 2};
    testing::RunRankAndCheck(c, testing::MakeProblem(c), **dcp);
  }
}

}  // namespace
}  // namespace ctxpar
