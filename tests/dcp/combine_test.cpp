// Combiner over consecutive calls of different shapes (a prefill then decode steps, as a model
// makes them), every backend against a float64 merge of the same partial states.
#include "ctxpar/combine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ctxpar/communicator.h"

namespace ctxpar {
namespace {

constexpr int kRanks = 3, kHeads = 3, kDim = 64;

struct Partials {
  std::vector<float> o;    // [rank][rows, kRanks * kHeads, kDim]
  std::vector<float> lse;  // [rank][rows, kRanks * kHeads]
};

// The exact merge of the kRanks partial states of every (row, head) of `owner`, in float64.
std::vector<double> ReferenceMerge(const std::vector<Partials>& p, int rows, int owner) {
  std::vector<double> out(static_cast<size_t>(rows) * kHeads * kDim, 0.0);
  for (int row = 0; row < rows; ++row) {
    for (int h = 0; h < kHeads; ++h) {
      const size_t state = static_cast<size_t>(row) * kRanks * kHeads + owner * kHeads + h;
      double m = -INFINITY;
      for (int r = 0; r < kRanks; ++r) m = std::max<double>(m, p[r].lse[state]);
      double sum = 0.0;
      for (int r = 0; r < kRanks; ++r) sum += std::exp(double(p[r].lse[state]) - m);
      for (int r = 0; r < kRanks; ++r) {
        const double w = std::exp(double(p[r].lse[state]) - m) / sum;
        for (int d = 0; d < kDim; ++d) {
          out[(static_cast<size_t>(row) * kHeads + h) * kDim + d] += w * p[r].o[state * kDim + d];
        }
      }
    }
  }
  return out;
}

class CombineSequence : public ::testing::TestWithParam<CombineBackend> {};

TEST_P(CombineSequence, ShrinkingAndGrowingShapesMatchFloat64) {
  const std::vector<int> calls = {37, 1, 1, 5, 40, 2};
  std::mt19937 rng(20261130);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<Partials>> inputs(calls.size(), std::vector<Partials>(kRanks));
  for (size_t c = 0; c < calls.size(); ++c) {
    for (Partials& p : inputs[c]) {
      p.o.resize(static_cast<size_t>(calls[c]) * kRanks * kHeads * kDim);
      p.lse.resize(static_cast<size_t>(calls[c]) * kRanks * kHeads);
      for (float& x : p.o) x = normal(rng);
      for (float& x : p.lse) x = normal(rng);
    }
  }
  // Repeated: a race between a fast writer and a slow reader shows only in some interleavings.
  for (int repeat = 0; repeat < 20; ++repeat) {
    std::vector<std::vector<std::vector<float>>> out(calls.size(),
                                                     std::vector<std::vector<float>>(kRanks));
    Status st = RunInProcess(kRanks, [&](Communicator& comm) -> Status {
      CTXPAR_ASSIGN_OR_RETURN(auto combiner, Combiner::Create(&comm, GetParam(), DataType::kF32));
      const int me = comm.rank();
      for (size_t c = 0; c < calls.size(); ++c) {
        out[c][me].resize(static_cast<size_t>(calls[c]) * kHeads * kDim);
        CTXPAR_RETURN_IF_ERROR(combiner->Combine({calls[c], kHeads, kDim}, inputs[c][me].o.data(),
                                                 inputs[c][me].lse.data(), out[c][me].data(),
                                                 nullptr));
      }
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (size_t c = 0; c < calls.size(); ++c) {
      for (int r = 0; r < kRanks; ++r) {
        const std::vector<double> ref = ReferenceMerge(inputs[c], calls[c], r);
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_NEAR(out[c][r][i], ref[i], 1e-5 * (1.0 + std::fabs(ref[i])))
              << "call " << c << " rank " << r << " element " << i << " repeat " << repeat;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CombineSequence,
                         ::testing::Values(CombineBackend::kAgRs, CombineBackend::kA2a,
                                           CombineBackend::kShmA2a),
                         [](const auto& info) {
                           return std::string(CombineBackendName(info.param));
                         });

}  // namespace
}  // namespace ctxpar
