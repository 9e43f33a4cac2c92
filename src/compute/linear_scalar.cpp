// The scalar kernels: linear.h's canonical fp32 sequence lane by lane with std::fma (one
// rounding, like the SIMD fused multiply-adds, so every ISA gives the same bits), the int8 dot
// products, and the dequantization the embedding lookup shares with the kernels.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/linear_kernels.h"

namespace ctxpar::compute {

namespace linear_internal {
namespace {

float HalfAt(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return Fp16ToFp32(h);
}

struct ScalarIsa {
  static constexpr int kParts = 2;
  struct V {
    float l[16];
  };
  using Acc = V;
  struct Block {
    V v[kParts];
  };
  static constexpr int kDirectGroup = 1;
  static constexpr int kDirectRows[kDirectGroup] = {1};
  static constexpr bool kDirectWeightsFirst = false;
  static constexpr int kDirectMaxTokens = 1;
  static constexpr int kWideRows = 1;
  static constexpr int kWideTokens = 1;
  static constexpr int kWideRunBlocks = 24;
  static constexpr int kChains = 1;

  static void Prefetch(const std::uint8_t*) {}
  static Acc Zero() { return Acc{}; }
  static V Load(const float* p) {
    V v;
    std::memcpy(v.l, p, sizeof v.l);
    return v;
  }
  static void Store(float* p, const V& v) { std::memcpy(p, v.l, sizeof v.l); }
  static Block DequantQ41(const std::uint8_t* blk) {
    const float d = HalfAt(blk);
    const float m = HalfAt(blk + 2);
    Block w;
    for (int j = 0; j < 16; ++j) {
      w.v[0].l[j] = std::fma(float(blk[4 + j] & 0xF), d, m);
      w.v[1].l[j] = std::fma(float(blk[4 + j] >> 4), d, m);
    }
    return w;
  }
  static Block DequantQ80(const std::uint8_t* blk) {
    const float d = HalfAt(blk);
    const auto* q = reinterpret_cast<const std::int8_t*>(blk + 2);
    Block w;
    for (int j = 0; j < 16; ++j) {
      w.v[0].l[j] = float(q[j]) * d;
      w.v[1].l[j] = float(q[16 + j]) * d;
    }
    return w;
  }
  static Block DequantQ50(const std::uint8_t* blk) {
    const float d = HalfAt(blk);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    const std::uint8_t* qs = blk + 6;
    Block w;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int hi = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      w.v[0].l[j] = float(lo - 16) * d;
      w.v[1].l[j] = float(hi - 16) * d;
    }
    return w;
  }
  static Block LoadGroup(const float* f) {
    Block w;
    std::memcpy(w.v, f, sizeof w.v);
    return w;
  }
  static Block DequantQ40(const std::uint8_t* blk) {
    const float d = HalfAt(blk);
    Block w;
    for (int j = 0; j < 16; ++j) {
      w.v[0].l[j] = float((blk[2 + j] & 0xF) - 8) * d;
      w.v[1].l[j] = float((blk[2 + j] >> 4) - 8) * d;
    }
    return w;
  }
  static Block DequantQ51(const std::uint8_t* blk) {
    const float d = HalfAt(blk);
    const float m = HalfAt(blk + 2);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 4, 4);
    const std::uint8_t* qs = blk + 8;
    Block w;
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0xF) | int((qh >> j) & 1) << 4;
      const int hi = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
      w.v[0].l[j] = std::fma(float(lo), d, m);
      w.v[1].l[j] = std::fma(float(hi), d, m);
    }
    return w;
  }
  // Unquantized groups: element 16p + j is lane j of part p.
  static Block DequantF32(const std::uint8_t* blk) {
    Block w;
    std::memcpy(w.v, blk, sizeof w.v);
    return w;
  }
  static Block DequantF16(const std::uint8_t* blk) {
    Block w;
    for (int l = 0; l < kBlock; ++l) w.v[l / 16].l[l % 16] = HalfAt(blk + 2 * l);
    return w;
  }
  static Block DequantBF16(const std::uint8_t* blk) {
    Block w;
    for (int l = 0; l < kBlock; ++l) {
      std::uint16_t h;
      std::memcpy(&h, blk + 2 * l, 2);
      const std::uint32_t bits = std::uint32_t(h) << 16;
      std::memcpy(&w.v[l / 16].l[l % 16], &bits, 4);
    }
    return w;
  }
  template <int kShift, int kBit>
  static Block DequantK45(const std::uint8_t* qs, const std::uint8_t* qh, float d, float m) {
    Block w;
    for (int l = 0; l < kBlock; ++l) {
      int q = (qs[l] >> kShift) & 0xF;
      if constexpr (kBit >= 0) q |= ((qh[l] >> kBit) & 1) << 4;
      w.v[l / 16].l[l % 16] = float(q) * d - m;
    }
    return w;
  }
  template <int kShiftL, int kShiftH>
  static Block DequantQ6K(const std::uint8_t* ql, const std::uint8_t* qh, float d0, float d1) {
    Block w;
    for (int l = 0; l < kBlock; ++l) {
      const int q = ((ql[l] >> kShiftL) & 0xF) | ((qh[l] >> kShiftH) & 3) << 4;
      w.v[l / 16].l[l % 16] = float(q - 32) * (l < 16 ? d0 : d1);
    }
    return w;
  }
  static V ZeroV() { return Zero(); }
  static void FmaV(V& a, const V& w, const V& x) {
    for (int l = 0; l < 16; ++l) a.l[l] = std::fma(w.l[l], x.l[l], a.l[l]);
  }
  static void Fma(Acc& a, int, const V& w, const V& x) { FmaV(a, w, x); }
  static void SetChain(Acc& a, int, const V& v) { a = v; }
  static float Reduce(const Acc& a) {
    float r[8];
    for (int l = 0; l < 8; ++l) r[l] = a.l[l] + a.l[l + 8];
    for (int l = 0; l < 4; ++l) r[l] = r[l] + r[l + 4];
    for (int l = 0; l < 2; ++l) r[l] = r[l] + r[l + 2];
    return r[0] + r[1];
  }
};

#include "compute/linear_impl.h"

float DotQ41Scalar(const std::uint8_t* w, const ActBlock* x, int nb) {
  return DotScalar(WeightType::kQ4_1, w, x, nb);
}
float DotQ80Scalar(const std::uint8_t* w, const ActBlock* x, int nb) {
  return DotScalar(WeightType::kQ8_0, w, x, nb);
}

}  // namespace

const F32Kernel kF32Scalar = {&F32TileImpl<ScalarIsa>, ScalarIsa::kDirectMaxTokens,
                              ScalarIsa::kWideTokens};
const Q8Dots kQ8DotsScalar = {&DotQ41Scalar, &DotQ80Scalar};

}  // namespace linear_internal

float DotScalar(WeightType type, const std::uint8_t* w, const ActBlock* x, int num_blocks) {
  float sum = 0.0f;
  for (int b = 0; b < num_blocks; ++b) {
    const std::uint8_t* blk = w + b * BlockBytes(type);
    const float dw = linear_internal::HalfAt(blk);
    int sumi = 0;
    if (type == WeightType::kQ4_1) {
      for (int j = 0; j < 16; ++j) {
        sumi += (blk[4 + j] & 0xF) * x[b].q[j] + (blk[4 + j] >> 4) * x[b].q[j + 16];
      }
      sum += dw * x[b].d * float(sumi) + linear_internal::HalfAt(blk + 2) * x[b].s;
    } else {
      const auto* q = reinterpret_cast<const std::int8_t*>(blk + 2);
      for (int j = 0; j < kBlock; ++j) sumi += q[j] * x[b].q[j];
      sum += dw * x[b].d * float(sumi);
    }
  }
  return sum;
}

void DequantizeRow(const QuantMatrix& w, int r, float* out) {
  using linear_internal::ScalarIsa;
  const std::uint8_t* row = w.data + std::size_t(r) * w.row_stride;
  if (w.type != WeightType::kQ4_1 && w.type != WeightType::kQ8_0) {
    // gguf-py's dequantization; the kernels' dequantization equals it (linear_test.cpp).
    const Status s = ctxpar::DequantizeRow(GgmlTypeOf(w.type), row, out, w.cols);
    (void)s;  // ok for every WeightType and a cols that QuantMatrix requires
    return;
  }
  for (int b = 0; b < w.cols / kBlock; ++b) {
    const std::uint8_t* blk = row + b * BlockBytes(w.type);
    const ScalarIsa::Block d =
        w.type == WeightType::kQ4_1 ? ScalarIsa::DequantQ41(blk) : ScalarIsa::DequantQ80(blk);
    std::memcpy(out + b * kBlock, d.v, sizeof d.v);
  }
}

}  // namespace ctxpar::compute
