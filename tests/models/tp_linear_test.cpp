// The shared TP linear layers (layers/tp_linear.h) over in-process ranks.
// - Q8_0 weights, fp32 activations: a row-parallel projection (input columns split as a model's
//   heads are, output rows as its hidden rows) and the vocab-parallel head give, at tp 2 and 3,
//   the tp = 1 product bit for bit, and that product is the float64 reference's within fp32
//   rounding.
// - fp32 weights: the row-parallel partial sums, reduced, are every rank's partial in the fixed
//   fp32 order (matmul_f32.h's scalar DotF32Fixed) added in rank order, bit for bit, on every
//   rank; the vocab-parallel head equals the whole rows' fixed-order dot products at tp 1, 2 and
//   3; both within fp32 rounding of float64.
#include "models/layers/tp_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "compute/cpu_compute.h"
#include "compute/matmul_f32.h"
#include "ctxpar/communicator.h"
#include "ctxpar/dtype.h"

namespace ctxpar::model {
namespace {

constexpr int kRows = 70, kCols = 96, kTokens = 5;

struct Weights {
  std::vector<std::uint8_t> bytes;
  std::vector<double> dense;  // the dequantized values
  QuantMatrix matrix() const {
    return {WeightType::kQ8_0, bytes.data(), kRows, kCols, std::size_t(kCols / 32) * 34};
  }
};

Weights RandomQ8_0(std::mt19937& rng) {
  Weights w;
  w.bytes.resize(std::size_t(kRows) * (kCols / 32) * 34);
  w.dense.resize(std::size_t(kRows) * kCols);
  std::uniform_int_distribution<int> q(-127, 127);
  std::uniform_real_distribution<float> d(0.001f, 0.02f);
  for (int r = 0; r < kRows; ++r) {
    for (int b = 0; b < kCols / 32; ++b) {
      std::uint8_t* block = w.bytes.data() + (std::size_t(r) * (kCols / 32) + b) * 34;
      const std::uint16_t h = Fp32ToFp16(d(rng));
      std::memcpy(block, &h, 2);
      for (int j = 0; j < 32; ++j) {
        const auto v = static_cast<std::int8_t>(q(rng));
        block[2 + j] = static_cast<std::uint8_t>(v);
        w.dense[std::size_t(r) * kCols + b * 32 + j] = double(Fp16ToFp32(h)) * v;
      }
    }
  }
  return w;
}

std::vector<int> Bounds(int total, int tp) {
  std::vector<int> b;
  for (int r = 0; r <= tp; ++r) b.push_back(r * total / tp);
  return b;
}

TEST(TpLinear, RowParallelAndVocabHeadAreTpInvariant) {
  std::mt19937 rng(11);
  const Weights w = RandomQ8_0(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(std::size_t(kTokens) * kCols);
  for (float& v : x) v = normal(rng);

  // [tp][0]: row-parallel output, [tp][1]: logits.
  std::vector<std::vector<float>> got[4];
  for (int tp : {1, 2, 3}) {
    std::mutex mu;
    const Status st = RunInProcess(tp, [&](Communicator& comm) -> Status {
      compute::CpuCompute compute(nullptr, ActFormat::kF32);
      TpLinear linear(&comm, &compute);
      const std::vector<int> in = Bounds(kCols, tp), out = Bounds(kRows, tp);
      const int r = comm.rank();
      std::vector<float> mine(std::size_t(kTokens) * (in[r + 1] - in[r]));
      for (int t = 0; t < kTokens; ++t) {
        std::copy_n(x.begin() + std::size_t(t) * kCols + in[r], in[r + 1] - in[r],
                    mine.begin() + std::size_t(t) * (in[r + 1] - in[r]));
      }
      const QuantMatrix rows = w.matrix().RowRange(out[r], out[r + 1] - out[r]);
      CTXPAR_ASSIGN_OR_RETURN(const float* y,
                              linear.RowParallel(rows, mine.data(), kTokens, in, out));
      std::vector<float> proj(y, y + std::size_t(kTokens) * kRows);
      const VocabShard shard = MakeVocabShard(kRows, tp, r);
      std::vector<float> logits(std::size_t(kTokens) * kRows);
      CTXPAR_RETURN_IF_ERROR(linear.VocabLogits(w.matrix().RowRange(shard.first, shard.count),
                                                shard, kRows, x.data(), kTokens, logits.data()));
      std::lock_guard<std::mutex> lock(mu);
      if (r == 0) got[tp] = {proj, logits};
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int o = 0; o < kRows; ++o) {
      double ref = 0.0;
      for (int c = 0; c < kCols; ++c) ref += w.dense[std::size_t(o) * kCols + c] * x[t * kCols + c];
      EXPECT_NEAR(got[1][0][t * kRows + o], ref, 1e-5 * (1.0 + std::fabs(ref)));
    }
  }
  for (int tp : {2, 3}) {
    EXPECT_TRUE(got[tp][0] == got[1][0]) << "row-parallel, tp " << tp;
    EXPECT_TRUE(got[tp][1] == got[1][1]) << "vocab head, tp " << tp;
  }
  EXPECT_TRUE(got[1][0] == got[1][1]);  // the same product, cut two ways
}

TEST(TpLinear, F32PartialSumsAddInRankOrderAndTheVocabHeadIsTpInvariant) {
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(std::size_t(kRows) * kCols), x(std::size_t(kTokens) * kCols);
  for (float& v : w) v = 0.1f * normal(rng);
  for (float& v : x) v = normal(rng);
  const F32Matrix whole{w.data(), kRows, kCols, kCols};
  auto at = [](const std::vector<float>& v, int t, int o) { return v[std::size_t(t) * kRows + o]; };

  // [tp][rank][0]: the reduced row-parallel output, [tp][rank][1]: logits.
  std::vector<std::vector<std::vector<float>>> got[4];
  for (int tp : {1, 2, 3}) {
    got[tp].resize(tp);
    std::mutex mu;
    const Status st = RunInProcess(tp, [&](Communicator& comm) -> Status {
      compute::CpuCompute compute(nullptr, ActFormat::kF32);
      TpLinear linear(&comm, &compute);
      const std::vector<int> in = Bounds(kCols, tp);
      const int r = comm.rank(), width = in[r + 1] - in[r];
      std::vector<float> y(std::size_t(kTokens) * kRows);
      linear.RowParallelPartial(whole.ColRange(in[r], width), x.data() + in[r], kTokens, kCols,
                                y.data(), kRows);
      CTXPAR_RETURN_IF_ERROR(linear.ReducePartials(y.data(), y.size()));
      const VocabShard shard = MakeVocabShard(kRows, tp, r);
      std::vector<float> logits(std::size_t(kTokens) * kRows);
      CTXPAR_RETURN_IF_ERROR(linear.VocabLogits(whole.RowRange(shard.first, shard.count), shard,
                                                kRows, x.data(), kTokens, logits.data()));
      std::lock_guard<std::mutex> lock(mu);
      got[tp][r] = {y, logits};
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  for (int tp : {1, 2, 3}) {
    const std::vector<int> in = Bounds(kCols, tp);
    for (int t = 0; t < kTokens; ++t) {
      for (int o = 0; o < kRows; ++o) {
        const float* xt = x.data() + std::size_t(t) * kCols;
        const float* wo = w.data() + std::size_t(o) * kCols;
        float sum = compute::DotF32Fixed(xt, wo, in[1]);
        for (int r = 1; r < tp; ++r)
          sum += compute::DotF32Fixed(xt + in[r], wo + in[r], in[r + 1] - in[r]);
        double ref = 0.0;
        for (int c = 0; c < kCols; ++c) ref += double(xt[c]) * wo[c];
        const float row = compute::DotF32Fixed(xt, wo, kCols);
        for (int r = 0; r < tp; ++r) {
          ASSERT_EQ(at(got[tp][r][0], t, o), sum) << "tp " << tp << " rank " << r;
          ASSERT_EQ(at(got[tp][r][1], t, o), row) << "tp " << tp << " rank " << r;
        }
        EXPECT_NEAR(sum, ref, 1e-5 * (1.0 + std::fabs(ref)));
        EXPECT_NEAR(row, ref, 1e-5 * (1.0 + std::fabs(ref)));
      }
    }
  }
}

}  // namespace
}  // namespace ctxpar::model
