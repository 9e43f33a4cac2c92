// MatMul (src/compute/linear.h) on every ISA this CPU runs (CTXPAR_CPU_ISA forces the lower
// ones): against float64 references, batch invariance (a row's bits alone equal its bits among
// n = 1..40 rows, on 1, 2 and 3 threads; rows long enough to go in pieces), the fp32 sequence
// equal on every ISA, and fused products equal to separate ones.
#include "compute/linear.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/cpu_features.h"

namespace ctxpar::compute {
namespace {

struct RandomMatrix {
  std::vector<std::uint8_t> bytes;
  QuantMatrix m;
};

RandomMatrix MakeMatrix(WeightType type, int rows, int cols, std::mt19937& rng) {
  RandomMatrix r;
  const std::size_t row_bytes = cols / 32 * BlockBytes(type);
  r.bytes.resize(row_bytes * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (int row = 0; row < rows; ++row) {
    for (int b = 0; b < cols / 32; ++b) {
      std::uint8_t* blk = r.bytes.data() + row * row_bytes + b * BlockBytes(type);
      const std::uint16_t d = Fp32ToFp16(scale(rng));
      std::memcpy(blk, &d, 2);
      std::size_t first = 2;
      if (type == WeightType::kQ4_1) {
        const std::uint16_t m = Fp32ToFp16(-8.0f * scale(rng));
        std::memcpy(blk + 2, &m, 2);
        first = 4;
      }
      for (std::size_t j = first; j < BlockBytes(type); ++j) {
        int v = byte(rng);
        if (type == WeightType::kQ8_0 && v == 128) v = 129;  // ggml's Q8_0 never holds -128
        blk[j] = std::uint8_t(v);
      }
    }
  }
  r.m = QuantMatrix{type, r.bytes.data(), rows, cols, row_bytes};
  return r;
}

std::vector<float> Normal(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  return v;
}

// The ISAs this CPU runs, lowest first, as CTXPAR_CPU_ISA names.
std::vector<std::string> Isas() {
  std::vector<std::string> names = {"scalar"};
  const CpuIsa best = BestCpuIsa(DetectCpuFeatures());
  if (best >= CpuIsa::kAvx2) names.push_back("avx2");
  if (best >= CpuIsa::kAvx512) names.push_back("avx512");
  return names;
}

class MatMulIsas : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("CTXPAR_CPU_ISA"); }
  static void Force(const std::string& isa) {
    setenv("CTXPAR_CPU_ISA", isa.c_str(), 1);
    ASSERT_EQ(std::string(MatMulIsa()), isa);
  }
};

// float64 y = x W^T over the int8 activations as ggml defines the product (Q4_1's offset term
// uses the stored s = fp16(d * sum q)).
std::vector<double> ReferenceQ8(const QuantMatrix& w, const Acts& x) {
  std::vector<double> y(std::size_t(x.n) * w.rows);
  for (int r = 0; r < w.rows; ++r) {
    for (int t = 0; t < x.n; ++t) {
      const ActBlock* xa = x.Row(t);
      double acc = 0.0;
      for (int b = 0; b < w.cols / 32; ++b) {
        const std::uint8_t* blk = w.data + std::size_t(r) * w.row_stride + b * BlockBytes(w.type);
        std::uint16_t dh, mh;
        std::memcpy(&dh, blk, 2);
        double sumi = 0.0;
        if (w.type == WeightType::kQ4_1) {
          std::memcpy(&mh, blk + 2, 2);
          for (int j = 0; j < 16; ++j) {
            sumi +=
                double(blk[4 + j] & 0xF) * xa[b].q[j] + double(blk[4 + j] >> 4) * xa[b].q[j + 16];
          }
          acc += double(Fp16ToFp32(dh)) * xa[b].d * sumi + double(Fp16ToFp32(mh)) * xa[b].s;
        } else {
          const auto* q = reinterpret_cast<const std::int8_t*>(blk + 2);
          for (int j = 0; j < 32; ++j) sumi += double(q[j]) * xa[b].q[j];
          acc += double(Fp16ToFp32(dh)) * xa[b].d * sumi;
        }
      }
      y[std::size_t(t) * w.rows + r] = acc;
    }
  }
  return y;
}

// float64 y = x W^T over DequantizeRow's weights, checked independently against the blocks.
std::vector<double> ReferenceF32(const QuantMatrix& w, const float* x, int n) {
  std::vector<double> y(std::size_t(n) * w.rows);
  std::vector<float> row(w.cols);
  for (int r = 0; r < w.rows; ++r) {
    DequantizeRow(w, r, row.data());
    for (int c = 0; c < w.cols; ++c) {
      const std::uint8_t* blk =
          w.data + std::size_t(r) * w.row_stride + c / 32 * BlockBytes(w.type);
      std::uint16_t dh, mh;
      std::memcpy(&dh, blk, 2);
      double q, m = 0.0;
      if (w.type == WeightType::kQ4_1) {
        std::memcpy(&mh, blk + 2, 2);
        const int j = c % 32;
        q = j < 16 ? (blk[4 + j] & 0xF) : (blk[4 + j - 16] >> 4);
        m = Fp16ToFp32(mh);
      } else {
        q = reinterpret_cast<const std::int8_t*>(blk + 2)[c % 32];
      }
      const double exact = double(Fp16ToFp32(dh)) * q + m;
      EXPECT_LE(std::fabs(row[c] - exact), std::fabs(exact) * 0x1p-24) << "r " << r << " c " << c;
    }
    for (int t = 0; t < n; ++t) {
      double acc = 0.0;
      for (int c = 0; c < w.cols; ++c) acc += double(row[c]) * x[std::size_t(t) * w.cols + c];
      y[std::size_t(t) * w.rows + r] = acc;
    }
  }
  return y;
}

TEST_F(MatMulIsas, F32MatchesFloat64) {
  for (const std::string& isa : Isas()) {
    Force(isa);
    for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0}) {
      std::mt19937 rng(99);
      const int rows = 50, cols = 576, n = 11;
      RandomMatrix w = MakeMatrix(type, rows, cols, rng);
      const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
      const std::vector<double> ref = ReferenceF32(w.m, x.data(), n);
      Acts a;
      PrepareActs(ActFormat::kF32, type, x.data(), n, cols, cols, &a);
      std::vector<float> y(std::size_t(n) * rows);
      MatMul(w.m, a, y.data(), rows, nullptr);
      for (std::size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], ref[i], 1e-5 * (1.0 + std::fabs(ref[i]))) << isa << " i " << i;
      }
    }
  }
}

TEST_F(MatMulIsas, Q8MatchesFloat64) {
  for (const std::string& isa : Isas()) {
    Force(isa);
    for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0}) {
      std::mt19937 rng(1234);
      const int rows = 37, cols = 1536, n = 7;
      RandomMatrix w = MakeMatrix(type, rows, cols, rng);
      const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
      Acts q;
      PrepareActs(ActFormat::kQ8, type, x.data(), n, cols, cols, &q);
      auto pool = ThreadPool::Create(3);
      ASSERT_TRUE(pool.ok());
      std::vector<float> y(std::size_t(n) * rows);
      MatMul(w.m, q, y.data(), rows, pool->get());
      const std::vector<double> ref = ReferenceQ8(w.m, q);
      double norm = 0.0;
      for (double v : ref) norm = std::max(norm, std::fabs(v));
      for (std::size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], ref[i], 1e-5 * norm + 1e-6) << isa << " element " << i;
        const int t = int(i) / rows, r = int(i) % rows;
        const float s =
            DotScalar(type, w.m.data + std::size_t(r) * w.m.row_stride, q.Row(t), cols / 32);
        ASSERT_NEAR(s, ref[i], 1e-5 * norm + 1e-6) << "scalar element " << i;
      }
    }
  }
}

// y [count, w.rows] of x [count, w.cols], each row of x in a call of its own (n = 1: the direct
// path, the whole row at once): what a row must give among others.
std::vector<float> AloneRows(const QuantMatrix& w, ActFormat format, const std::vector<float>& x,
                             int count) {
  std::vector<float> y(std::size_t(count) * w.rows);
  for (int t = 0; t < count; ++t) {
    Acts a;
    PrepareActs(format, w.type, x.data() + std::size_t(t) * w.cols, 1, w.cols, w.cols, &a);
    MatMul(w, a, y.data() + std::size_t(t) * w.rows, w.rows, nullptr);
  }
  return y;
}

// Row t of an n-row call, for every n in 1..40, 100, 1000 and 1, 2, 3 threads, has the bits of
// row t computed alone; on every ISA and both activation formats. 37 rows: a partial row tile;
// 100 rows: MatMul's token chunks (45 rows of 576 columns) and a partial last chunk; 1000 rows:
// the widened path's spans (450 rows of 576 columns), each widening the tiles again.
TEST_F(MatMulIsas, RowsAreBatchInvariant) {
  const int rows = 37, cols = 576, max_n = 1000;
  std::vector<int> ns(40);
  std::iota(ns.begin(), ns.end(), 1);
  ns.push_back(100);
  ns.push_back(max_n);
  auto one = ThreadPool::Create(1), two = ThreadPool::Create(2), three = ThreadPool::Create(3);
  ASSERT_TRUE(one.ok() && two.ok() && three.ok());
  for (const std::string& isa : Isas()) {
    Force(isa);
    for (ActFormat format : {ActFormat::kF32, ActFormat::kQ8}) {
      for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0}) {
        std::mt19937 rng(7 + int(type));
        RandomMatrix w = MakeMatrix(type, rows, cols, rng);
        const std::vector<float> x = Normal(std::size_t(max_n) * cols, rng);
        const std::vector<float> alone = AloneRows(w.m, format, x, max_n);
        for (int n : ns) {
          Acts a;
          PrepareActs(format, type, x.data(), n, cols, cols, &a);
          for (ThreadPool* pool : {one->get(), two->get(), three->get()}) {
            std::vector<float> y(std::size_t(n) * rows);
            MatMul(w.m, a, y.data(), rows, pool);
            for (std::size_t i = 0; i < y.size(); ++i) {
              ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(alone[i]))
                  << isa << (format == ActFormat::kF32 ? " f32" : " q8") << " type " << int(type)
                  << " n " << n << " threads " << pool->size() << " row " << i / rows << " col "
                  << i % rows;
            }
          }
        }
      }
    }
  }
}

// Rows of 1536 columns (ffn_down's) are longer than the widened path's runs, so it cuts them
// into pieces whose lanes carry over: each row among n others has the bits it gets alone, where
// the direct path takes the whole row at once.
TEST_F(MatMulIsas, LongRowsCarryTheirLanesAcrossPieces) {
  const int rows = 21, cols = 1536, max_n = 100;
  auto two = ThreadPool::Create(2);
  ASSERT_TRUE(two.ok());
  for (const std::string& isa : Isas()) {
    Force(isa);
    for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0}) {
      std::mt19937 rng(5 + int(type));
      RandomMatrix w = MakeMatrix(type, rows, cols, rng);
      const std::vector<float> x = Normal(std::size_t(max_n) * cols, rng);
      const std::vector<float> alone = AloneRows(w.m, ActFormat::kF32, x, max_n);
      for (int n : {9, 17, 50, max_n}) {
        Acts a;
        PrepareActs(ActFormat::kF32, type, x.data(), n, cols, cols, &a);
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), two->get()}) {
          std::vector<float> y(std::size_t(n) * rows);
          MatMul(w.m, a, y.data(), rows, pool);
          for (std::size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(alone[i]))
                << isa << " type " << int(type) << " n " << n << " row " << i / rows << " col "
                << i % rows;
          }
        }
      }
    }
  }
}

// The fp32 sequence is one for all ISAs: each gives the scalar path's bits, decode and prefill.
TEST_F(MatMulIsas, F32BitsEqualAcrossIsas) {
  const int rows = 21, cols = 1536;
  for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0}) {
    for (int n : {1, 2, 3, 9}) {
      std::mt19937 rng(11 + n);
      RandomMatrix w = MakeMatrix(type, rows, cols, rng);
      const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
      Acts a;
      PrepareActs(ActFormat::kF32, type, x.data(), n, cols, cols, &a);
      std::vector<float> scalar(std::size_t(n) * rows);
      Force("scalar");
      MatMul(w.m, a, scalar.data(), rows, nullptr);
      for (const std::string& isa : Isas()) {
        Force(isa);
        std::vector<float> y(scalar.size());
        MatMul(w.m, a, y.data(), rows, nullptr);
        for (std::size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(scalar[i]))
              << isa << " type " << int(type) << " n " << n << " i " << i;
        }
      }
    }
  }
}

// MatMulMany of q-, k- and v-like matrices (row counts that end in partial tiles and share pool
// chunks) gives each product MatMul's bits, for the direct and the widened path and 1-3 threads.
TEST_F(MatMulIsas, ManyProductsGiveEachMatMulsBits) {
  const int cols = 576;
  const int rows[] = {37, 16, 21};
  for (const std::string& isa : Isas()) {
    Force(isa);
    for (ActFormat format : {ActFormat::kF32, ActFormat::kQ8}) {
      for (int n : {1, 4, 9, 50}) {
        std::mt19937 rng(41 + n);
        std::vector<RandomMatrix> w;
        for (int r : rows) w.push_back(MakeMatrix(WeightType::kQ4_1, r, cols, rng));
        const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
        Acts a;
        PrepareActs(format, WeightType::kQ4_1, x.data(), n, cols, cols, &a);
        std::vector<std::vector<float>> alone(3), fused(3);
        for (int i = 0; i < 3; ++i) {
          alone[i].resize(std::size_t(n) * rows[i]);
          MatMul(w[i].m, a, alone[i].data(), rows[i], nullptr);
        }
        for (int threads : {1, 2, 3}) {
          auto pool = ThreadPool::Create(threads);
          ASSERT_TRUE(pool.ok());
          std::vector<MatMulOut> outs;
          for (int i = 0; i < 3; ++i) {
            fused[i].assign(std::size_t(n) * rows[i], 0.0f);
            outs.push_back({w[i].m, fused[i].data(), rows[i]});
          }
          MatMulMany(outs, a, pool->get());
          for (int i = 0; i < 3; ++i) {
            for (std::size_t j = 0; j < alone[i].size(); ++j) {
              ASSERT_EQ(std::bit_cast<std::uint32_t>(fused[i][j]),
                        std::bit_cast<std::uint32_t>(alone[i][j]))
                  << isa << (format == ActFormat::kF32 ? " f32" : " q8") << " n " << n
                  << " threads " << threads << " product " << i << " element " << j;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ctxpar::compute
