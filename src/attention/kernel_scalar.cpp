// The portable path: one lane, no SIMD (the reference for the others, and the fallback).
#include <cstring>

#include "attention/kernel.h"
#include "ctxpar/dtype.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/kernel_tiles.h"

struct ScalarIsa {
  using V = float;
  using QElem = float;
  static constexpr int kLanes = 1;
  static constexpr int kDotStep = 1;
  static constexpr int kQkHeads = 4;
  static constexpr bool kPairedPv = false;
  static constexpr int kPvHeads = 4;
  static constexpr int kTileHeads = 4;
  static constexpr int kTileSplit = 1;
  static constexpr int kTilePvVecs = 4;
  static constexpr bool kDpTiles = false;
  template <class KElem>
  static uint32_t LoadWords(const KElem* p) {
    uint32_t w;
    std::memcpy(&w, p, sizeof(w));
    return w;
  }
  // Element x of a word: its bytes from 8 * sizeof(KElem) * x on (little-endian, as stored).
  template <class KElem, int x>
  static V Part(uint32_t w) {
    const uint32_t bits = w >> (8 * sizeof(KElem) * x);
    KElem e;
    std::memcpy(&e, &bits, sizeof(e));
    return Load(&e);
  }
  static V Zero() { return 0.0f; }
  static V Set1(float x) { return x; }
  static V Load(const float* p) { return *p; }
  static V Load(const uint16_t* p) { return Bf16ToFloat(*p); }
  static V Load(const Fp8E4M3* p) { return Fp8E4M3ToFloat(p->bits); }
  static V Load(const Fp8E5M2* p) { return Fp8E5M2ToFloat(p->bits); }
  static void Store(float* p, V v) { *p = v; }
  static V Add(V a, V b) { return a + b; }
  static V Mul(V a, V b) { return a * b; }
  static V Max(V a, V b) { return a > b ? a : b; }
  static V Fma(V a, V b, V c) { return a * b + c; }
  static float ReduceMax(V v) { return v; }
  static float ReduceAdd(V v) { return v; }
  static V Exp2(V x) { return x < -127.0f ? 0.0f : __builtin_exp2f(x); }
  static void Reduce4(V a, V b, V c, V d, float* out) {
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
  }
  static void PrepareQ(const float* q, float scale, QElem* out, int n) {
    for (int i = 0; i < n; ++i) out[i] = q[i] * scale;
  }
  template <class KElem>
  static V Dot(V acc, const QElem* q, const KElem* k) {
    return Fma(*q, Load(k), acc);
  }
};

}  // namespace

void AttendScalarF32(const KernelArgs& args) {
  args.tiles ? AttendTiles<ScalarIsa, float>(args) : Attend<ScalarIsa, float>(args);
}
void AttendScalarBf16(const KernelArgs& args) {
  args.tiles ? AttendTiles<ScalarIsa, uint16_t>(args) : Attend<ScalarIsa, uint16_t>(args);
}
void AttendScalarFp8E4M3(const KernelArgs& args) {
  args.tiles ? AttendTiles<ScalarIsa, Fp8E4M3>(args) : Attend<ScalarIsa, Fp8E4M3>(args);
}
void AttendScalarFp8E5M2(const KernelArgs& args) {
  args.tiles ? AttendTiles<ScalarIsa, Fp8E5M2>(args) : Attend<ScalarIsa, Fp8E5M2>(args);
}

}  // namespace ctxpar::attention_internal
