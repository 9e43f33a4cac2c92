// The fixed-order fp32 matmul: every output equals the scalar reference order bit for bit on the
// path this CPU takes, whatever the tile, the row count or the threads, and is within fp32
// rounding of a float64 dot product.
#include "compute/matmul_f32.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ctxpar::compute {
namespace {

TEST(MatMulF32, EveryOutputIsTheFixedOrderBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  auto pool = ThreadPool::Create(2);
  ASSERT_TRUE(pool.ok());
  std::printf("path: %s\n", MatMulF32Isa());
  const int shapes[][3] = {{1, 1, 1},   {3, 5, 17},   {7, 33, 96},
                           {2, 4, 256}, {9, 130, 64}, {1, 8, 15}};
  for (const auto& sh : shapes) {
    const int n = sh[0], rows = sh[1], cols = sh[2];
    // Strided views: x and w inside wider buffers, y with a wider row.
    const int ldx = cols + 3, ldw = cols + 5, ldy = rows + 2;
    std::vector<float> x(n * ldx), w(rows * ldw), y(n * ldy, -1.0f), y1(n * ldy, -1.0f);
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = normal(rng);
    const F32Matrix m{w.data(), rows, cols, ldw};
    MatMulF32(m, x.data(), n, ldx, y.data(), ldy, pool->get());
    MatMulF32(m, x.data(), n, ldx, y1.data(), ldy, nullptr);
    for (int t = 0; t < n; ++t) {
      // Each row alone, as a batch of one would compute it.
      std::vector<float> alone(rows);
      MatMulF32(m, x.data() + t * ldx, 1, ldx, alone.data(), rows, nullptr);
      for (int r = 0; r < rows; ++r) {
        const float want = DotF32Fixed(x.data() + t * ldx, w.data() + r * ldw, cols);
        ASSERT_EQ(y[t * ldy + r], want)
            << n << "x" << rows << "x" << cols << " at " << t << "," << r;
        ASSERT_EQ(y1[t * ldy + r], want);
        ASSERT_EQ(alone[r], want);
        double exact = 0.0, mag = 0.0;
        for (int c = 0; c < cols; ++c) {
          exact += double(x[t * ldx + c]) * double(w[r * ldw + c]);
          mag += std::fabs(double(x[t * ldx + c]) * double(w[r * ldw + c]));
        }
        EXPECT_NEAR(want, exact, 1e-6 * mag + 1e-30);
      }
      EXPECT_EQ(y[t * ldy + rows], -1.0f);  // nothing written past the row
    }
  }
}

}  // namespace
}  // namespace ctxpar::compute
