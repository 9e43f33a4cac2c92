// CudaCompute against the CPU kernels of src/compute, on random inputs (fixed seeds) of ragged
// shapes, in managed memory from its own Allocate; outputs are poisoned (NaN) first.
//
// Tolerances: the matmuls of every weight type, the fp32 matmul, RmsNorm, AddRmsNorm,
// SumsOfSquares, ScaleRows, AddBias, Add and Rope perform the CPU's operations in its order, so
// they must give its bits (0 ulp). The gated activations use CUDA's expf (2 ulp from glibc's):
// 2e-6 relative. PartialAttention against a float64 reference: 1e-4 relative 2-norm over O, lse
// within 1e-4 (as cuda_attention_test's GQA cases); with split_kv_keys, a row's O and lse are the
// same bits alone and in a longer batch.
//
// Creation without a device and the device-free argument checks run everywhere; the rest skip,
// naming the runtime's reason, where there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "compute/elementwise.h"
#include "compute/linear.h"
#include "compute/matmul_f32.h"
#include "ctxpar/dtype.h"
#include "ctxpar/quant.h"
#include "cuda/cuda_compute.h"
#include "cuda_test_util.h"

namespace ctxpar {
namespace {

using compute::Tensor;
using compute::WeightType;
using cuda::CudaCompute;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Exact equality of the bits, reporting the first difference.
void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]) && !bad++) {
      first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << ": got " << got[first]
                     << ", want " << want[first];
}

// ---- Without a device ----

TEST(CudaComputeCreate, UnavailableWithoutDevice) {
  const Expected<int> devices = CudaDeviceCount();
  if (devices.ok()) GTEST_SKIP() << "a CUDA device is present";
  const auto compute = CudaCompute::Create();
  ASSERT_FALSE(compute.ok());
  EXPECT_EQ(compute.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(compute.status().message(), devices.status().message());
}

TEST(CudaComputeChecks, WeightTypes) {
  for (WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ8_0,
                          WeightType::kQ4_0, WeightType::kQ4_1}) {
    EXPECT_TRUE(CudaCompute::CheckWeightType(type).ok());
  }
  for (WeightType type : {WeightType::kQ5_0, WeightType::kQ5_1, WeightType::kQ4_K,
                          WeightType::kQ6_K, WeightType::kIQ4_NL, WeightType::kMXFP4}) {
    const Status s = CudaCompute::CheckWeightType(type);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    EXPECT_NE(s.message().find(std::string(GgmlTypeName(compute::GgmlTypeOf(type)))),
              std::string::npos)
        << s.message();
  }
}

TEST(CudaComputeChecks, Tensors) {
  float fake[4];
  const Tensor good = compute::F32(fake, 2, 2, 0, Device::kCuda);
  EXPECT_TRUE(CudaCompute::CheckTensor(good, "x").ok());

  const Status cpu = CudaCompute::CheckTensor(compute::F32(fake, 2, 2), "x");
  EXPECT_EQ(cpu.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cpu.message().find("cpu"), std::string::npos) << cpu.message();

  Tensor bf16 = good;
  bf16.dtype = DataType::kBF16;
  const Status dtype = CudaCompute::CheckTensor(bf16, "x");
  EXPECT_EQ(dtype.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dtype.message().find("bf16"), std::string::npos) << dtype.message();

  Tensor narrow = good;
  narrow.ld = 1;
  EXPECT_EQ(CudaCompute::CheckTensor(narrow, "x").code(), StatusCode::kInvalidArgument);
  Tensor null = good;
  null.data = nullptr;
  EXPECT_EQ(CudaCompute::CheckTensor(null, "x").code(), StatusCode::kInvalidArgument);
  null.rows = 0;
  EXPECT_TRUE(CudaCompute::CheckTensor(null, "x").ok());
}

// ---- On a device ----

class CudaComputeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CTXPAR_SKIP_WITHOUT_CUDA_DEVICE();
    auto created = CudaCompute::Create();
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    compute_ = std::move(*created);
  }

  // Managed memory of `count` T, poisoned with 0xff bytes (NaN for floats).
  template <typename T>
  T* NewArray(std::size_t count) {
    auto buffer = compute_->Allocate(std::max<std::size_t>(count, 1) * sizeof(T));
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    buffers_.push_back(*buffer);
    std::memset(buffer->data(), 0xff, buffer->size());
    return buffer->as<T>();
  }

  // A [rows, cols] tensor (ld 0: cols) holding `values` (dense [rows, cols]; empty: NaN).
  Tensor NewTensor(std::int64_t rows, std::int64_t cols, std::int64_t ld = 0,
                   const std::vector<float>& values = {}) {
    if (ld == 0) ld = cols;
    float* p = NewArray<float>(static_cast<std::size_t>(rows * ld));
    const Tensor t = compute::F32(p, rows, cols, ld, Device::kCuda);
    if (!values.empty()) Write(t, values);
    return t;
  }

  static void Write(const Tensor& t, const std::vector<float>& values) {
    for (std::int64_t r = 0; r < t.rows; ++r) {
      std::copy_n(values.begin() + r * t.cols, t.cols, t.Row(r));
    }
  }

  // The dense [rows, cols] contents, after the queued work.
  std::vector<float> Read(const Tensor& t) {
    EXPECT_TRUE(compute_->Synchronize().ok());
    std::vector<float> v(static_cast<std::size_t>(t.rows * t.cols));
    for (std::int64_t r = 0; r < t.rows; ++r) std::copy_n(t.Row(r), t.cols, &v[r * t.cols]);
    return v;
  }

  // Host weights that live as long as the compute: it caches uploads by address.
  template <typename T>
  std::vector<T>& Keep(std::vector<T> v) {
    if constexpr (std::is_same_v<T, float>) {
      return kept_f32_.emplace_back(std::move(v));
    } else {
      return kept_bytes_.emplace_back(std::move(v));
    }
  }

  std::unique_ptr<CudaCompute> compute_;
  std::vector<DeviceBuffer> buffers_;
  std::deque<std::vector<float>> kept_f32_;
  std::deque<std::vector<std::uint8_t>> kept_bytes_;
  std::mt19937 rng_{20240611};
};

TEST_F(CudaComputeTest, DescribeAndAllocate) {
  EXPECT_EQ(compute_->device(), Device::kCuda);
  EXPECT_EQ(compute_->act_format(), compute::ActFormat::kF32);
  EXPECT_NE(compute_->Describe().find("sm_"), std::string::npos) << compute_->Describe();
  auto empty = compute_->Allocate(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
  auto buffer = compute_->Allocate(1000);
  ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
  EXPECT_EQ(buffer->device(), Device::kCuda);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer->data()) % 256, 0u);
  const auto* bytes = buffer->as<std::uint8_t>();
  EXPECT_TRUE(std::all_of(bytes, bytes + 1000, [](std::uint8_t b) { return b == 0; }));
}

// Random rows of `type` in ggml's blocks with sane scales, row_stride bytes apart.
std::vector<std::uint8_t> RandomWeights(WeightType type, int rows, int cols, std::size_t row_stride,
                                        std::mt19937& rng) {
  std::vector<std::uint8_t> data(static_cast<std::size_t>(rows) * row_stride);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  const std::size_t block = compute::BlockBytes(type);
  auto put16 = [](std::uint8_t* p, std::uint16_t h) { std::memcpy(p, &h, 2); };
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < cols / compute::kBlock; ++b) {
      std::uint8_t* blk = data.data() + r * row_stride + b * block;
      for (std::size_t i = 0; i < block; ++i) blk[i] = static_cast<std::uint8_t>(byte(rng));
      switch (type) {
        case WeightType::kF32:
          for (int i = 0; i < compute::kBlock; ++i) {
            const float f = value(rng);
            std::memcpy(blk + 4 * i, &f, 4);
          }
          break;
        case WeightType::kF16:
          for (int i = 0; i < compute::kBlock; ++i) put16(blk + 2 * i, Fp32ToFp16(value(rng)));
          break;
        case WeightType::kBF16:
          for (int i = 0; i < compute::kBlock; ++i) put16(blk + 2 * i, FloatToBf16(value(rng)));
          break;
        case WeightType::kQ4_1:
          put16(blk + 2, Fp32ToFp16(-8.0f * scale(rng)));
          [[fallthrough]];
        case WeightType::kQ8_0:
        case WeightType::kQ4_0:
          put16(blk, Fp32ToFp16(scale(rng)));
          break;
        default:
          break;
      }
    }
  }
  return data;
}

struct MatMulShape {
  int rows, cols, n;
  int ldx_pad, ldy_pad, stride_pad;  // stride_pad: bytes, a multiple of 4 (F32 rows)
};

TEST_F(CudaComputeTest, MatMulEqualsTheCpuFp32Sequence) {
  const WeightType types[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                              WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_1};
  const MatMulShape shapes[] = {
      {1, 64, 1, 0, 0, 0}, {7, 96, 3, 5, 3, 0}, {33, 2048, 17, 0, 1, 8}, {9, 320, 8, 3, 0, 4}};
  for (WeightType type : types) {
    for (const MatMulShape& c : shapes) {
      const std::string what = std::string(GgmlTypeName(compute::GgmlTypeOf(type))) + " [" +
                               std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] x " +
                               std::to_string(c.n);
      compute::QuantMatrix w;
      w.type = type;
      w.rows = c.rows;
      w.cols = c.cols;
      w.row_stride = c.cols / compute::kBlock * compute::BlockBytes(type) + c.stride_pad;
      w.data = Keep(RandomWeights(type, c.rows, c.cols, w.row_stride, rng_)).data();
      const std::vector<float> xv = testing::RandomFloats(rng_, c.n * c.cols, -1.0f, 1.0f);
      const Tensor x = NewTensor(c.n, c.cols, c.cols + c.ldx_pad, xv);
      const int ldy = c.rows + c.ldy_pad;
      const Tensor y = NewTensor(c.n, c.rows, ldy);
      const compute::MatMulOut outs[] = {{w, y.f32(), ldy}};
      compute_->MatMul(outs, x);

      compute::Acts acts;
      compute::PrepareActs(compute::ActFormat::kF32, type, xv.data(), c.n, c.cols, c.cols, &acts);
      std::vector<float> want(static_cast<std::size_t>(c.n) * c.rows);
      compute::MatMul(w, acts, want.data(), c.rows, nullptr);
      ExpectSameBits(Read(y), want, what);
      // Again: the uploaded weights are reused.
      compute_->MatMul(outs, x);
      ExpectSameBits(Read(y), want, what + " (cached weights)");
    }
  }
}

TEST_F(CudaComputeTest, MatMulManyOutputsAndARefusedType) {
  const int cols = 128, n = 5;
  const std::vector<float> xv = testing::RandomFloats(rng_, n * cols, -1.0f, 1.0f);
  const Tensor x = NewTensor(n, cols, 0, xv);
  auto matrix = [&](WeightType type, int rows) {
    compute::QuantMatrix w;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.row_stride = cols / compute::kBlock * compute::BlockBytes(type);
    w.data = Keep(RandomWeights(type, rows, cols, w.row_stride, rng_)).data();
    return w;
  };
  const compute::QuantMatrix q = matrix(WeightType::kQ4_1, 40);
  const compute::QuantMatrix k = matrix(WeightType::kQ8_0, 8);
  const compute::QuantMatrix refused = matrix(WeightType::kQ5_0, 8);
  const Tensor yq = NewTensor(n, 40), yk = NewTensor(n, 8), yr = NewTensor(n, 8);
  const compute::MatMulOut outs[] = {{q, yq.f32(), 40}, {refused, yr.f32(), 8}, {k, yk.f32(), 8}};
  // Zeros first, so that the NaN shows it was written.
  Write(yr, std::vector<float>(n * 8, 0.0f));
  compute_->MatMul(outs, x);
  const Status s = compute_->Synchronize();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("Q5_0"), std::string::npos) << s.message();
  EXPECT_TRUE(compute_->Synchronize().ok()) << "the error is returned once";

  for (const auto& [w, y] : {std::pair{q, yq}, std::pair{k, yk}}) {
    compute::Acts acts;
    compute::PrepareActs(compute::ActFormat::kF32, w.type, xv.data(), n, cols, cols, &acts);
    std::vector<float> want(static_cast<std::size_t>(n) * w.rows);
    compute::MatMul(w, acts, want.data(), w.rows, nullptr);
    ExpectSameBits(Read(y), want, std::string(GgmlTypeName(compute::GgmlTypeOf(w.type))));
  }
  for (float v : Read(yr)) EXPECT_TRUE(std::isnan(v));
}

TEST_F(CudaComputeTest, MatMulF32EqualsMatMulF32) {
  struct Case {
    int rows, cols, n, ld_pad;
  };
  for (const Case c :
       {Case{1, 1, 1, 0}, Case{9, 17, 3, 3}, Case{40, 64, 17, 0}, Case{13, 1000, 9, 7}}) {
    const std::string what =
        "[" + std::to_string(c.rows) + ", " + std::to_string(c.cols) + "] x " + std::to_string(c.n);
    const int ldw = c.cols + c.ld_pad;
    const std::vector<float>& wv =
        Keep(testing::RandomFloats(rng_, static_cast<std::size_t>(c.rows) * ldw, -1.0f, 1.0f));
    const compute::F32Matrix w{wv.data(), c.rows, c.cols, ldw};
    const std::vector<float> xv = testing::RandomFloats(rng_, c.n * c.cols, -1.0f, 1.0f);
    const Tensor x = NewTensor(c.n, c.cols, c.cols + c.ld_pad, xv);
    const Tensor y = NewTensor(c.n, c.rows, c.rows + c.ld_pad);
    compute_->MatMul(w, x, y);
    std::vector<float> want(static_cast<std::size_t>(c.n) * c.rows);
    compute::MatMulF32(w, xv.data(), c.n, c.cols, want.data(), c.rows, nullptr);
    ExpectSameBits(Read(y), want, what);
  }
}

struct NormCase {
  int n, dim, ld_pad;
};
constexpr NormCase kNormCases[] = {{1, 64, 0}, {3, 100, 4}, {17, 2048, 0}, {5, 4096, 16}};

std::vector<float> HostRmsNorm(const std::vector<float>& x, const std::vector<float>& w, int n,
                               int dim, float eps) {
  std::vector<float> y(x.size());
  for (int t = 0; t < n; ++t) compute::RmsNorm(&x[t * dim], w.data(), 1, dim, eps, &y[t * dim]);
  return y;
}

TEST_F(CudaComputeTest, RmsNormEqualsTheCpu) {
  const float eps = 1e-6f;
  for (const NormCase c : kNormCases) {
    const std::string what = std::to_string(c.n) + " x " + std::to_string(c.dim);
    const std::vector<float> xv = testing::RandomFloats(rng_, c.n * c.dim, -3.0f, 3.0f);
    const std::vector<float> w = testing::RandomFloats(rng_, c.dim, 0.5f, 1.5f);
    const std::vector<float> want = HostRmsNorm(xv, w, c.n, c.dim, eps);

    const Tensor x = NewTensor(c.n, c.dim, c.dim + c.ld_pad, xv);
    const Tensor y = NewTensor(c.n, c.dim);
    compute_->RmsNorm(x, w.data(), eps, y);
    ExpectSameBits(Read(y), want, what);
    compute_->RmsNorm(x, w.data(), eps, x);  // y aliasing x
    ExpectSameBits(Read(x), want, what + " in place");
  }
}

TEST_F(CudaComputeTest, AddRmsNormEqualsTheCpu) {
  const float eps = 1e-5f;
  for (const NormCase c : kNormCases) {
    const std::vector<float> yv = testing::RandomFloats(rng_, c.n * c.dim, -3.0f, 3.0f);
    const std::vector<float> xv = testing::RandomFloats(rng_, c.n * c.dim, -3.0f, 3.0f);
    const std::vector<float> w = testing::RandomFloats(rng_, c.dim, 0.5f, 1.5f);
    std::vector<float> want = HostRmsNorm(yv, w, c.n, c.dim, eps);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = xv[i] + want[i];

    const Tensor y = NewTensor(c.n, c.dim, c.dim + c.ld_pad, yv);
    const Tensor x = NewTensor(c.n, c.dim, 0, xv);
    compute_->AddRmsNorm(y, w.data(), eps, x);
    ExpectSameBits(Read(x), want, std::to_string(c.n) + " x " + std::to_string(c.dim));
  }
}

TEST_F(CudaComputeTest, SumsOfSquaresEqualTheCpu) {
  struct Case {
    int rows, cols, group, out_pad;
  };
  for (const Case c :
       {Case{1, 64, 64, 0}, Case{5, 256, 64, 2}, Case{3, 300, 100, 1}, Case{17, 2048, 512, 0}}) {
    const std::vector<float> xv = testing::RandomFloats(rng_, c.rows * c.cols, -2.0f, 2.0f);
    const Tensor x = NewTensor(c.rows, c.cols, c.cols + 3, xv);
    const int groups = c.cols / c.group;
    const int out_ld = groups + c.out_pad;
    double* out = NewArray<double>(static_cast<std::size_t>(c.rows) * out_ld);
    compute_->SumsOfSquares(x, c.group, out, out_ld);
    ASSERT_TRUE(compute_->Synchronize().ok());
    for (int r = 0; r < c.rows; ++r) {
      for (int g = 0; g < groups; ++g) {
        const double want = compute::SumOfSquares(&xv[r * c.cols + g * c.group], c.group);
        EXPECT_EQ(std::bit_cast<std::uint64_t>(out[r * out_ld + g]),
                  std::bit_cast<std::uint64_t>(want))
            << "row " << r << " group " << g << ": " << out[r * out_ld + g] << " vs " << want;
      }
    }
  }
}

TEST_F(CudaComputeTest, ScaleRowsAddBiasAndAdd) {
  const int rows = 17, cols = 1000, ld = 1003;
  const std::vector<float> xv = testing::RandomFloats(rng_, rows * cols, -2.0f, 2.0f);
  const std::vector<float> yv = testing::RandomFloats(rng_, rows * cols, -2.0f, 2.0f);
  const std::vector<float> scales = testing::RandomFloats(rng_, rows, 0.1f, 2.0f);
  const std::vector<float> weight = testing::RandomFloats(rng_, cols, 0.5f, 1.5f);
  const std::vector<float> bias = testing::RandomFloats(rng_, cols, -1.0f, 1.0f);

  std::vector<float> want = xv;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want[r * cols + c] = want[r * cols + c] * scales[r];
  }
  const Tensor x = NewTensor(rows, cols, ld, xv);
  compute_->ScaleRows(x, scales.data(), nullptr);
  ExpectSameBits(Read(x), want, "ScaleRows");

  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      want[r * cols + c] = want[r * cols + c] * scales[r] * weight[c];
    }
  }
  compute_->ScaleRows(x, scales.data(), weight.data());
  ExpectSameBits(Read(x), want, "ScaleRows with weight");

  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want[r * cols + c] += bias[c];
  }
  compute_->AddBias(x, bias.data());
  ExpectSameBits(Read(x), want, "AddBias");

  for (std::size_t i = 0; i < want.size(); ++i) want[i] += yv[i];
  const Tensor y = NewTensor(rows, cols, 0, yv);
  compute_->Add(x, y);
  ExpectSameBits(Read(x), want, "Add");
  // The padding between rows is not written.
  for (int r = 0; r < rows; ++r) {
    for (int c = cols; c < ld; ++c) EXPECT_TRUE(std::isnan(x.Row(r)[c]));
  }
}

TEST_F(CudaComputeTest, RopeEqualsTheCpu) {
  struct Case {
    const char* name;
    compute::RopeAngles angles;
    int head_dim;
  };
  const Case cases[] = {
      {"ggml, partial rotary", compute::RopeAngles::Ggml(64, 10000.0f), 128},
      {"hf bf16 table", compute::RopeAngles::HfTable(128, 500000.0f, DataType::kBF16), 128},
      {"ggml scaled", compute::RopeAngles::Ggml(96, 1e6f, compute::RopeScaling{{}, 0.25f}), 96}};
  const int n = 17;
  std::vector<int> positions(n);
  std::uniform_int_distribution<int> pos(0, 9000);
  for (int& p : positions) p = pos(rng_);
  positions[0] = 0;
  for (const Case& c : cases) {
    for (compute::RopeStyle style : {compute::RopeStyle::kNormal, compute::RopeStyle::kNeox}) {
      const std::string what =
          std::string(c.name) + (style == compute::RopeStyle::kNeox ? ", neox" : ", normal");
      // q: 8 heads packed; k: 2 heads at a wider stride in rows with padding.
      const int q_cols = 8 * c.head_dim, k_stride = c.head_dim + 64, k_cols = 2 * k_stride;
      const std::vector<float> qv = testing::RandomFloats(rng_, n * q_cols, -2.0f, 2.0f);
      const std::vector<float> kv = testing::RandomFloats(rng_, n * k_cols, -2.0f, 2.0f);
      const Tensor q = NewTensor(n, q_cols, 0, qv);
      const Tensor k = NewTensor(n, k_cols, k_cols + 8, kv);
      const compute::RopeTarget targets[] = {{q, 8, c.head_dim}, {k, 2, k_stride}};
      compute_->Rope(style, c.angles, positions, targets);

      std::vector<float> want_q = qv, want_k = kv;
      for (int r = 0; r < n; ++r) {
        compute::Rope(style, &want_q[r * q_cols], 8, c.head_dim, c.angles, positions[r]);
        compute::Rope(style, &want_k[r * k_cols], 2, k_stride, c.angles, positions[r]);
      }
      ExpectSameBits(Read(q), want_q, what + " q");
      ExpectSameBits(Read(k), want_k, what + " k");
    }
  }
}

TEST_F(CudaComputeTest, GatedWithinUlpsOfTheCpu) {
  const int rows = 3, cols = 1000;
  for (compute::GatedActivation act :
       {compute::GatedActivation::kSwiGlu, compute::GatedActivation::kGeGlu,
        compute::GatedActivation::kSwiGluOai}) {
    const std::vector<float> gv = testing::RandomFloats(rng_, rows * cols, -12.0f, 12.0f);
    const std::vector<float> uv = testing::RandomFloats(rng_, rows * cols, -10.0f, 10.0f);
    const Tensor gate = NewTensor(rows, cols, cols + 3, gv);
    const Tensor up = NewTensor(rows, cols, 0, uv);
    const Tensor out = NewTensor(rows, cols, cols + 1);
    compute_->Gated(act, gate, up, out);
    std::vector<float> want(gv.size());
    compute::Gated(act, gv.data(), uv.data(), rows * cols, want.data());
    const std::vector<float> got = Read(out);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), 2e-6f * std::fabs(want[i]) + 1e-30f)
          << "act " << static_cast<int>(act) << " at " << i << ": gate " << gv[i] << ", up "
          << uv[i];
    }
  }
}

TEST_F(CudaComputeTest, RefusedArgumentsAreReportedBySynchronize) {
  const Tensor x = NewTensor(2, 64);
  const Tensor y = NewTensor(3, 64);
  compute_->Add(x, y);
  Status s = compute_->Synchronize();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();

  std::vector<float> host(2 * 64, 1.0f);
  compute_->Add(x, compute::F32(host.data(), 2, 64, 0, Device::kCuda));  // pageable memory
  s = compute_->Synchronize();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("pageable"), std::string::npos) << s.message();
  EXPECT_TRUE(compute_->Synchronize().ok());
}

// A paged bf16 GQA cache in managed memory and its float64 attention.
class CudaComputeAttentionTest : public CudaComputeTest {
 protected:
  static constexpr int kHeads = 8, kKvHeads = 2, kDim = 128, kPage = 16;

  void Build(const std::vector<int>& seq_lens) {
    lens_ = seq_lens;
    const int num_seqs = static_cast<int>(lens_.size());
    max_pages_ = 1;
    for (int len : lens_) max_pages_ = std::max(max_pages_, (len + kPage - 1) / kPage);
    const int num_pages = num_seqs * max_pages_;
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    table_ = NewArray<int32_t>(perm.size());
    std::copy(perm.begin(), perm.end(), table_);
    const std::size_t elements = static_cast<std::size_t>(num_pages) * kPage * kKvHeads * kDim;
    std::vector<std::uint16_t> bits;
    testing::RandomBf16(rng_, elements, bits, k_);
    k_bits_ = NewArray<std::uint16_t>(elements);
    std::copy(bits.begin(), bits.end(), k_bits_);
    testing::RandomBf16(rng_, elements, bits, v_);
    v_bits_ = NewArray<std::uint16_t>(elements);
    std::copy(bits.begin(), bits.end(), v_bits_);
  }

  // Params for rows (sequence, start, len), with fresh q (the same values per sequence).
  PartialAttentionParams Params(const std::vector<std::array<int, 3>>& rows, int split_kv_keys) {
    const int n = static_cast<int>(rows.size());
    PartialAttentionParams p;
    float* q = NewArray<float>(static_cast<std::size_t>(n) * kHeads * kDim);
    auto* seq = NewArray<int32_t>(n);
    auto* start = NewArray<int32_t>(n);
    auto* len = NewArray<int32_t>(n);
    for (int i = 0; i < n; ++i) {
      seq[i] = rows[i][0];
      start[i] = rows[i][1];
      len[i] = rows[i][2];
      std::mt19937 qrng(1000 + rows[i][0]);
      const std::vector<float> qv = testing::RandomFloats(qrng, kHeads * kDim, -1.0f, 1.0f);
      std::copy(qv.begin(), qv.end(), q + static_cast<std::size_t>(i) * kHeads * kDim);
    }
    p.q = q;
    p.o = NewArray<float>(static_cast<std::size_t>(n) * kHeads * kDim);
    p.lse = NewArray<float>(static_cast<std::size_t>(n) * kHeads);
    p.num_rows = n;
    p.num_q_heads = kHeads;
    p.row_seq = seq;
    p.row_kv_start = start;
    p.row_kv_len = len;
    p.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
    p.kv.k = k_bits_;
    p.kv.v = v_bits_;
    p.kv.dtype = DataType::kBF16;
    p.kv.page_size = kPage;
    p.kv.num_kv_heads = kKvHeads;
    p.kv.head_dim_qk = kDim;
    p.kv.head_dim_v = kDim;
    p.kv.block_table = table_;
    p.kv.max_pages_per_seq = max_pages_;
    p.kv.num_pages = static_cast<int>(lens_.size()) * max_pages_;
    p.kv.format = KvPageFormat::kRows;
    p.num_seqs = static_cast<int>(lens_.size());
    p.split_kv_keys = split_kv_keys;
    return p;
  }

  std::size_t Slot(int seq, int j, int kvh) const {
    const int page = table_[seq * max_pages_ + j / kPage];
    return (static_cast<std::size_t>(page) * kPage + j % kPage) * kKvHeads + kvh;
  }

  void Reference(const PartialAttentionParams& p, std::vector<double>& o,
                 std::vector<double>& lse) const {
    o.assign(static_cast<std::size_t>(p.num_rows) * kHeads * kDim, 0.0);
    lse.assign(static_cast<std::size_t>(p.num_rows) * kHeads, -INFINITY);
    for (int r = 0; r < p.num_rows; ++r) {
      for (int h = 0; h < kHeads; ++h) {
        const int kvh = h / (kHeads / kKvHeads);
        const float* q = p.q + (static_cast<std::size_t>(r) * kHeads + h) * kDim;
        const int first = p.row_kv_start[r], last = p.row_kv_len[r];
        if (last == first) continue;
        std::vector<double> s(last);
        double mx = -INFINITY;
        for (int j = first; j < last; ++j) {
          const float* k = &k_[Slot(p.row_seq[r], j, kvh) * kDim];
          double dot = 0.0;
          for (int d = 0; d < kDim; ++d) dot += static_cast<double>(q[d]) * k[d];
          s[j] = dot * p.scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        double* out = &o[(static_cast<std::size_t>(r) * kHeads + h) * kDim];
        for (int j = first; j < last; ++j) {
          const double w = std::exp(s[j] - mx);
          sum += w;
          const float* v = &v_[Slot(p.row_seq[r], j, kvh) * kDim];
          for (int d = 0; d < kDim; ++d) out[d] += w * v[d];
        }
        for (int d = 0; d < kDim; ++d) out[d] /= sum;
        lse[static_cast<std::size_t>(r) * kHeads + h] = mx + std::log(sum);
      }
    }
  }

  std::vector<int> lens_;
  int max_pages_ = 1;
  int32_t* table_ = nullptr;
  std::uint16_t* k_bits_ = nullptr;
  std::uint16_t* v_bits_ = nullptr;
  std::vector<float> k_, v_;
};

TEST_F(CudaComputeAttentionTest, MatchesFloat64Reference) {
  Build({1, 300, 1000, 2500});
  for (int split : {0, 256}) {
    // Decode rows, a sliding window, and an empty row.
    const PartialAttentionParams p =
        Params({{0, 0, 1}, {1, 0, 300}, {2, 0, 1000}, {3, 700, 2500}, {2, 40, 40}}, split);
    ASSERT_TRUE(compute_->PartialAttention(p).ok());
    ASSERT_TRUE(compute_->Synchronize().ok());
    std::vector<double> want_o, want_lse;
    Reference(p, want_o, want_lse);
    const std::vector<float> o(p.o, p.o + want_o.size());
    EXPECT_LT(testing::RelativeError(o, want_o), 1e-4) << "split_kv_keys " << split;
    for (std::size_t i = 0; i < want_lse.size(); ++i) {
      if (std::isinf(want_lse[i])) {
        EXPECT_EQ(p.lse[i], -INFINITY) << i;
      } else {
        EXPECT_NEAR(p.lse[i], want_lse[i], 1e-4) << i;
      }
    }
  }
}

TEST_F(CudaComputeAttentionTest, SplitKvKeysKeepsARowsBits) {
  Build({1000, 3000});
  const PartialAttentionParams alone = Params({{0, 0, 1000}}, 256);
  const PartialAttentionParams batch = Params({{1, 0, 3000}, {0, 0, 1000}}, 256);
  ASSERT_TRUE(compute_->PartialAttention(alone).ok());
  ASSERT_TRUE(compute_->PartialAttention(batch).ok());
  ASSERT_TRUE(compute_->Synchronize().ok());
  const std::size_t o_count = kHeads * kDim;
  ExpectSameBits(std::vector<float>(batch.o + o_count, batch.o + 2 * o_count),
                 std::vector<float>(alone.o, alone.o + o_count), "O");
  ExpectSameBits(std::vector<float>(batch.lse + kHeads, batch.lse + 2 * kHeads),
                 std::vector<float>(alone.lse, alone.lse + kHeads), "lse");
}

TEST_F(CudaComputeAttentionTest, RefusesOtherKvAndDeviceOnlyLengths) {
  Build({64});
  PartialAttentionParams p = Params({{0, 0, 64}}, 0);
  p.kv.dtype = DataType::kF32;
  Status s = compute_->PartialAttention(p);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("f32"), std::string::npos) << s.message();

  p.kv.dtype = DataType::kBF16;
  testing::DeviceBuffer device_len(sizeof(int32_t));
  CTXPAR_ASSERT_CUDA(
      cudaMemcpy(device_len.get(), p.row_kv_len, sizeof(int32_t), cudaMemcpyDefault));
  p.row_kv_len = device_len.get<int32_t>();
  s = compute_->PartialAttention(p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row_kv_len"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ctxpar
