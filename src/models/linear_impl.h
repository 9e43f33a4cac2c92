// The fp32-activation matmul of linear.h written once over an ISA's primitives (internal).
// Each ISA's translation unit includes this inside its anonymous namespace after its ISA struct,
// so that the register tiles below are compiled with that ISA's flags.
//
// The ISA struct provides:
//   kParts          vectors per 32-weight block (scalar 2 of 16 floats, AVX2 4, AVX-512 2)
//   V, Acc, Block   one part; one output's 16-lane accumulator; a block's dequantized parts
//   Zero, Load, Store, DequantQ41, DequantQ80
//   Fma(acc, p, w, x)  lanes of part p: acc[l] = fma(w[l], x[l], acc[l]), element order as in
//                      linear.h (part p holds elements [p * 32 / kParts, (p + 1) * 32 / kParts))
//   Reduce(acc)        the 16 lanes by linear.h's fixed tree
//   kDirectGroup       the most tokens per register tile of the direct path
//   kDirectRows[k]     output rows per register tile of the direct path for k + 1 tokens
//   kDirectMaxTokens   n up to which a tile reads the quantized blocks directly, dequantizing
//                      each block in registers once per group of tokens
//   kWideRows, kWideTokens  the register tile of the widened path (larger n); 0: none, the
//                      direct path serves every n
// Both paths make every output by linear.h's canonical sequence, so the choice between them,
// the register tile and the output's place in it change no bit.

enum class Src { kQ41, kQ80, kWide };

// Decode streams the weights once: each block requests the same block this many rows ahead.
inline constexpr int kPrefetchRows = 8;

inline void Emit(const F32Tile& j, int r, int t, int s, float v) {
  float* out = j.y + std::size_t(t) * j.ldy + r;
  if (j.seg_stride != 0) {
    out[s * j.seg_stride] = v;
  } else {
    *out = s == 0 ? v : *out + v;
  }
}

// Rows [r0, r0 + R) times tokens [t0, t0 + T), every segment. kWide reads the tile widened to
// fp32 (row r at wide + r * wide_stride); otherwise each weight block is dequantized in
// registers once for the T tokens.
template <class Isa, Src S, int R, int T>
void Panel(const F32Tile& j, const float* wide, std::size_t wide_stride, int r0, int t0) {
  using V = typename Isa::V;
  constexpr int kLanes = kBlock / Isa::kParts;
  constexpr std::size_t kBytes = BlockBytes(S == Src::kQ41 ? WeightType::kQ4_1 : WeightType::kQ8_0);
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = j.x + std::size_t(t0 + t) * j.ldx;
  int b = 0;
  for (int s = 0; s < j.num_segs; ++s) {
    typename Isa::Acc acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = Isa::Zero();
    }
    for (; b < j.seg_ends[s]; ++b) {
      if constexpr (S == Src::kWide) {
        for (int p = 0; p < Isa::kParts; ++p) {
          V w[R];
          for (int r = 0; r < R; ++r) {
            w[r] = Isa::Load(wide + std::size_t(r0 + r) * wide_stride + b * kBlock + p * kLanes);
          }
          for (int t = 0; t < T; ++t) {
            const V xv = Isa::Load(xs[t] + b * kBlock + p * kLanes);
            for (int r = 0; r < R; ++r) Isa::Fma(acc[r][t], p, w[r], xv);
          }
        }
      } else {
        for (int r = 0; r < R; ++r) {
          const std::uint8_t* blk = j.w + std::size_t(r0 + r) * j.row_stride + b * kBytes;
          Isa::Prefetch(blk + kPrefetchRows * j.row_stride);
          const typename Isa::Block w =
              S == Src::kQ41 ? Isa::DequantQ41(blk) : Isa::DequantQ80(blk);
          for (int t = 0; t < T; ++t) {
            for (int p = 0; p < Isa::kParts; ++p) {
              Isa::Fma(acc[r][t], p, w.v[p], Isa::Load(xs[t] + b * kBlock + p * kLanes));
            }
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) Emit(j, r0 + r, t0 + t, s, Isa::Reduce(acc[r][t]));
    }
  }
}

// Rows [r0, j.rows) in panels of R rows, the rest in one smaller panel.
template <class Isa, Src S, int R, int T>
void RowsFrom(const F32Tile& j, const float* wide, std::size_t wide_stride, int r0, int t0) {
  for (; r0 + R <= j.rows; r0 += R) Panel<Isa, S, R, T>(j, wide, wide_stride, r0, t0);
  if constexpr (R > 1) {
    if (r0 < j.rows) RowsFrom<Isa, S, R - 1, T>(j, wide, wide_stride, r0, t0);
  }
}

// Tokens [t0, j.n) in groups of T, the rest in one smaller group.
template <class Isa, Src S, int R, int T>
void TokensFrom(const F32Tile& j, const float* wide, std::size_t wide_stride, int t0) {
  for (; t0 + T <= j.n; t0 += T) RowsFrom<Isa, S, R, T>(j, wide, wide_stride, 0, t0);
  if constexpr (T > 1) {
    if (t0 < j.n) TokensFrom<Isa, S, R, T - 1>(j, wide, wide_stride, t0);
  }
}

// Tokens [t0, t0 + size) for a size in [1, T], by the register tile of that size.
template <class Isa, Src S, int T>
void DirectGroup(const F32Tile& j, int t0, int size) {
  if (size == T) return RowsFrom<Isa, S, Isa::kDirectRows[T - 1], T>(j, nullptr, 0, 0, t0);
  if constexpr (T > 1) DirectGroup<Isa, S, T - 1>(j, t0, size);
}

// The tokens in as few groups of at most kDirectGroup as there can be, their sizes differing by
// at most one: a group of one or two tokens costs nearly what a full one does.
template <class Isa, Src S>
void Direct(const F32Tile& j) {
  constexpr int kGroup = Isa::kDirectGroup;
  const int groups = (j.n + kGroup - 1) / kGroup;
  for (int g = 0, t0 = 0; g < groups; ++g) {
    const int size = j.n / groups + (g < j.n % groups ? 1 : 0);
    DirectGroup<Isa, S, kGroup>(j, t0, size);
    t0 += size;
  }
}

template <class Isa>
void F32TileImpl(const F32Tile& j) {
  if (Isa::kWideRows == 0 || j.n <= Isa::kDirectMaxTokens) {
    j.type == WeightType::kQ4_1 ? Direct<Isa, Src::kQ41>(j) : Direct<Isa, Src::kQ80>(j);
    return;
  }
  if constexpr (Isa::kWideRows > 0) {
    // Each block is dequantized once into the tile and read back by every token group.
    const int nb = j.seg_ends[j.num_segs - 1];
    const std::size_t wide_stride = std::size_t(nb) * kBlock;
    constexpr int kLanes = kBlock / Isa::kParts;
    for (int r = 0; r < j.rows; ++r) {
      for (int b = 0; b < nb; ++b) {
        const std::uint8_t* blk = j.w + std::size_t(r) * j.row_stride + b * BlockBytes(j.type);
        const typename Isa::Block w =
            j.type == WeightType::kQ4_1 ? Isa::DequantQ41(blk) : Isa::DequantQ80(blk);
        float* out = j.scratch + r * wide_stride + b * kBlock;
        for (int p = 0; p < Isa::kParts; ++p) Isa::Store(out + p * kLanes, w.v[p]);
      }
    }
    TokensFrom<Isa, Src::kWide, Isa::kWideRows, Isa::kWideTokens>(j, j.scratch, wide_stride, 0);
  }
}
