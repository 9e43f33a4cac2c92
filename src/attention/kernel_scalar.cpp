// The portable path: one lane, no SIMD (the reference for the others, and the fallback).
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
  static uint32_t LoadWords(const uint16_t* p) { return p[0] | static_cast<uint32_t>(p[1]) << 16; }
  static V Lo(uint32_t w) { return Bf16ToFloat(static_cast<uint16_t>(w)); }
  static V Hi(uint32_t w) { return Bf16ToFloat(static_cast<uint16_t>(w >> 16)); }
  static V Zero() { return 0.0f; }
  static V Set1(float x) { return x; }
  static V Load(const float* p) { return *p; }
  static V Load(const uint16_t* p) { return Bf16ToFloat(*p); }
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

}  // namespace ctxpar::attention_internal
