// The fp32-activation matmul of linear.h written once over an ISA's primitives (internal).
// Each ISA's translation unit includes this inside its anonymous namespace after its ISA struct,
// so that the register tiles below are compiled with that ISA's flags.
//
// The ISA struct provides:
//   kParts          vectors per 32-weight block (scalar 2 of 16 floats, AVX2 4, AVX-512 2)
//   V, Acc, Block   one part; one output's 16-lane accumulator; a block's dequantized parts
//   Zero, Load, Store, DequantQ41, DequantQ80, DequantQ50 (a block's 32 weights)
//   DequantF32, DequantF16, DequantBF16 (a group of 32 unquantized weights, widened exactly)
//   DequantQ40, DequantQ51 (a block's 32 weights: (q - 8) * d; fma(q, d, m) with 5-bit q)
//   LoadGroup(f)       32 weights already in fp32 (Q2_K, Q3_K: the block dequantized whole)
//   DequantK45<kShift, kBit>(qs, qh, d, m)  a Q4_K / Q5_K group: q[l] = (qs[l] >> kShift) & 15,
//                      plus 16 where bit kBit of qh[l] is set (kBit >= 0), weight float(q) * d - m
//   DequantQ6K<kShiftL, kShiftH>(ql, qh, d0, d1)  a Q6_K group: q[l] = ((ql[l] >> kShiftL) & 15)
//                      | ((qh[l] >> kShiftH) & 3) << 4, weight float(q - 32) * (l < 16 ? d0 : d1)
//   Fma(acc, p, w, x)  lanes of part p: acc[l] = fma(w[l], x[l], acc[l]), element order as in
//                      linear.h (part p holds elements [p * 32 / kParts, (p + 1) * 32 / kParts))
//   kChains            registers of an Acc; chain c holds the lanes of parts c, c + kChains, ...
//                      and no other part touches them, so the chains can run one after another
//   ZeroV, FmaV(a, w, x), SetChain(acc, c, v)  one chain's register: zero, fma, into the Acc
//   Reduce(acc)        the 16 lanes by linear.h's fixed tree
//   Reduce4(a, b, c, d, out)  optional: four outputs by that tree at once, into out[0..3]
//   kDirectGroup       the most tokens per register tile of the direct path
//   kDirectRows[k]     output rows per register tile of the direct path for k + 1 tokens
//   kDirectWeightsFirst  the direct path dequantizes a group of all its rows before the FMAs
//                      (registers for R blocks beside the R x T accumulators), or row by row
//   kDirectMaxTokens   n (of the whole MatMul) up to which a tile reads the quantized blocks
//                      directly, dequantizing each block in registers once per group of tokens
//   kWideRows, kWideTokens  the register tile of the widened path (larger n), in chains: one
//                      chain of each of its outputs is live at a time
//   kWideRunBlocks     the widened path runs a longer row in pieces of at most this many blocks,
//                      carrying its outputs' lanes from piece to piece
// Both paths make every output by linear.h's canonical sequence, so the choice between them,
// the register tile and the output's place in it change no bit.

// kPiece: the widened tile, for a piece of a row whose lanes carry over (F32Tile::carry).
enum class Src {
  kQ41,
  kQ80,
  kQ50,
  kQ4K,
  kQ5K,
  kQ6K,
  kF32,
  kF16,
  kBF16,
  kQ40,
  kQ51,
  kQ2K,
  kQ3K,
  kIQ4NL,
  kIQ4XS,
  kMXFP4,
  kWide,
  kPiece
};

inline std::uint16_t HalfBitsOf(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

template <Src S>
constexpr WeightType TypeOf() {
  constexpr WeightType kTypes[] = {
      WeightType::kQ4_1, WeightType::kQ8_0,   WeightType::kQ5_0,   WeightType::kQ4_K,
      WeightType::kQ5_K, WeightType::kQ6_K,   WeightType::kF32,    WeightType::kF16,
      WeightType::kBF16, WeightType::kQ4_0,   WeightType::kQ5_1,   WeightType::kQ2_K,
      WeightType::kQ3_K, WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kMXFP4};
  return kTypes[static_cast<int>(S)];
}

// Groups of 32 weights per block of S.
template <Src S>
constexpr int GroupsPerBlock() {
  return BlockSize(TypeOf<S>()) / kBlock;
}

// A K-quant block's per-group factors, rounded as ctxpar/quant.h's DequantizeRow (gguf-py) rounds
// them: Q4_K / Q5_K f[g] = d * sc_g and f[8 + g] = dmin * m_g for its 8 groups; Q6_K f[i] =
// d * sc_i for its 16 sub-blocks of 16. Nothing for the 32-element types.
struct BlockScales {
  float f[16];
};
// Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4: the whole block by ctxpar/quant.h's DequantizeRow
// (gguf-py's bits); each group is then loaded from it.
struct BlockFloats {
  float f[256];
};
template <Src S>
constexpr bool kDequantizedWhole =
    S == Src::kQ2K || S == Src::kQ3K || S == Src::kIQ4NL || S == Src::kIQ4XS || S == Src::kMXFP4;
template <Src S>
using ScalesFor = std::conditional_t<kDequantizedWhole<S>, BlockFloats, BlockScales>;

template <Src S>
void ScalesOf(const std::uint8_t* blk, ScalesFor<S>* s) {
  if constexpr (kDequantizedWhole<S>) {
    const Status ok =
        ctxpar::DequantizeRow(GgmlTypeOf(TypeOf<S>()), blk, s->f, BlockSize(TypeOf<S>()));
    (void)ok;  // ok for these types and a whole block
  } else if constexpr (S == Src::kQ4K || S == Src::kQ5K) {
    // The 12 bytes to 8 scales then 8 mins in one pass (UnpackScaleMinK4 for every group, as
    // ggml's dot products unpack them); the loops vectorize.
    constexpr std::uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
    std::uint32_t u[4];
    std::memcpy(u, blk + 4, 12);
    u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
    const std::uint32_t mins = u[1] & kLow6;
    u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
    u[2] = mins;
    u[0] &= kLow6;
    std::uint8_t v[16];
    std::memcpy(v, u, 16);
    const float d = Fp16ToFp32(HalfBitsOf(blk));
    const float dmin = Fp16ToFp32(HalfBitsOf(blk + 2));
    for (int i = 0; i < 8; ++i) s->f[i] = d * float(v[i]);
    for (int i = 0; i < 8; ++i) s->f[8 + i] = dmin * float(v[8 + i]);
  } else if constexpr (S == Src::kQ6K) {
    const float d = Fp16ToFp32(HalfBitsOf(blk + offsetof(BlockQ6K, d)));
    const auto* sc = reinterpret_cast<const std::int8_t*>(blk + offsetof(BlockQ6K, scales));
    for (int i = 0; i < 16; ++i) s->f[i] = d * float(sc[i]);
  } else {
    (void)blk;
    (void)s;
  }
}

// Group G of the block at blk, its scales from ScalesOf. G is a constant so that the bit
// positions are immediates: a shift by a register count costs two micro-ops on x86.
template <class Isa, Src S, int G>
typename Isa::Block DequantGroup(const std::uint8_t* blk, const ScalesFor<S>& s) {
  if constexpr (kDequantizedWhole<S>) {
    (void)blk;
    return Isa::LoadGroup(s.f + G * kBlock);
  } else if constexpr (S == Src::kQ41) {
    return Isa::DequantQ41(blk);
  } else if constexpr (S == Src::kQ80) {
    return Isa::DequantQ80(blk);
  } else if constexpr (S == Src::kQ50) {
    return Isa::DequantQ50(blk);
  } else if constexpr (S == Src::kQ40) {
    return Isa::DequantQ40(blk);
  } else if constexpr (S == Src::kQ51) {
    return Isa::DequantQ51(blk);
  } else if constexpr (S == Src::kF32) {
    return Isa::DequantF32(blk);
  } else if constexpr (S == Src::kF16) {
    return Isa::DequantF16(blk);
  } else if constexpr (S == Src::kBF16) {
    return Isa::DequantBF16(blk);
  } else if constexpr (S == Src::kQ4K) {
    return Isa::template DequantK45<4 * (G & 1), -1>(blk + offsetof(BlockQ4K, qs) + 32 * (G >> 1),
                                                     nullptr, s.f[G], s.f[8 + G]);
  } else if constexpr (S == Src::kQ5K) {
    return Isa::template DequantK45<4 * (G & 1), G>(blk + offsetof(BlockQ5K, qs) + 32 * (G >> 1),
                                                    blk + offsetof(BlockQ5K, qh), s.f[G],
                                                    s.f[8 + G]);
  } else {
    // Q6_K: each half of 128 holds groups 4h..4h+3 (ggml's dequantize_row_q6_K).
    constexpr int h = G >> 2, k = G & 3;
    return Isa::template DequantQ6K<4 * (k >> 1), 2 * k>(
        blk + 64 * h + 32 * (k & 1), blk + offsetof(BlockQ6K, qh) + 32 * h, s.f[8 * h + 2 * k],
        s.f[8 * h + 2 * k + 1]);
  }
}

// f.template operator()<G>() for G = 0 .. kCount - 1, in order.
template <int kCount, class F>
void ForGroups(const F& f) {
  [&]<int... G>(std::integer_sequence<int, G...>) { (f.template operator()<G>(), ...); }
  (std::make_integer_sequence<int, kCount>{});
}

// Decode streams the weights once: each block requests the same block this many rows ahead.
inline constexpr int kPrefetchRows = 8;

inline void Emit(const F32Tile& j, int r, int t, float v) { j.y[std::size_t(t) * j.ldy + r] = v; }

// A panel's outputs; four rows of four tokens, or four rows of a token, reduce together where
// the ISA can.
template <class Isa, int R, int T>
void EmitPanel(const F32Tile& j, const typename Isa::Acc (&acc)[R][T], int r0, int t0) {
  int t = 0;
  if constexpr (R == 4 && requires(const typename Isa::Acc(&in)[16], float* y) {
                  Isa::Reduce16(in, y, j.ldy);
                }) {
    for (; t + 4 <= T; t += 4) {
      typename Isa::Acc in[16];
      for (int k = 0; k < 4; ++k) {
        for (int r = 0; r < 4; ++r) in[4 * k + r] = acc[r][t + k];
      }
      Isa::Reduce16(in, j.y + std::size_t(t0 + t) * j.ldy + r0, j.ldy);
    }
  }
  for (; t < T; ++t) {
    int r = 0;
    if constexpr (requires(const typename Isa::Acc& a, float* out) {
                    Isa::Reduce4(a, a, a, a, out);
                  }) {
      for (; r + 4 <= R; r += 4) {
        Isa::Reduce4(acc[r][t], acc[r + 1][t], acc[r + 2][t], acc[r + 3][t],
                     j.y + std::size_t(t0 + t) * j.ldy + r0 + r);
      }
    }
    for (; r < R; ++r) Emit(j, r0 + r, t0 + t, Isa::Reduce(acc[r][t]));
  }
}

// Rows [r0, r0 + R) times tokens [t0, t0 + T), each group of weights dequantized in registers
// once for the T tokens; a K-quant block's scales once per row.
template <class Isa, Src S, int R, int T>
void Panel(const F32Tile& j, int r0, int t0) {
  constexpr int kLanes = kBlock / Isa::kParts;
  constexpr int kGroups = GroupsPerBlock<S>();
  constexpr std::size_t kBytes = BlockBytes(TypeOf<S>());
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = j.x + std::size_t(t0 + t) * j.ldx;
  typename Isa::Acc acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = Isa::Zero();
  }
  for (int b = j.block0 / kGroups; b < j.block1 / kGroups; ++b) {
    const std::uint8_t* blks[R];
    ScalesFor<S> scales[R];
    for (int r = 0; r < R; ++r) {
      blks[r] = j.w + std::size_t(r0 + r) * j.row_stride + b * kBytes;
      ScalesOf<S>(blks[r], &scales[r]);
    }
    ForGroups<kGroups>([&]<int G>() {
      const int col = (b * kGroups + G) * kBlock;
      if constexpr (Isa::kDirectWeightsFirst) {
        // Every row's group in registers first, then each activation part loaded once for the
        // R rows: a load per R FMAs instead of one per FMA (the load ports bound it otherwise).
        typename Isa::Block w[R];
        for (int r = 0; r < R; ++r) {
          Isa::Prefetch(blks[r] + G * (kBytes / kGroups) + kPrefetchRows * j.row_stride);
          w[r] = DequantGroup<Isa, S, G>(blks[r], scales[r]);
        }
        for (int t = 0; t < T; ++t) {
          for (int p = 0; p < Isa::kParts; ++p) {
            const auto x = Isa::Load(xs[t] + col + p * kLanes);
            for (int r = 0; r < R; ++r) Isa::Fma(acc[r][t], p, w[r].v[p], x);
          }
        }
      } else {
        for (int r = 0; r < R; ++r) {
          Isa::Prefetch(blks[r] + G * (kBytes / kGroups) + kPrefetchRows * j.row_stride);
          const typename Isa::Block w = DequantGroup<Isa, S, G>(blks[r], scales[r]);
          for (int t = 0; t < T; ++t) {
            const float* xg = xs[t] + col;
            for (int p = 0; p < Isa::kParts; ++p) {
              Isa::Fma(acc[r][t], p, w.v[p], Isa::Load(xg + p * kLanes));
            }
          }
        }
      }
    });
  }
  EmitPanel<Isa, R, T>(j, acc, r0, t0);
}

// Row `row` of nb groups widened to fp32 at out.
template <class Isa, Src S>
void WidenRow(const std::uint8_t* row, int nb, float* out) {
  constexpr int kLanes = kBlock / Isa::kParts;
  constexpr int kGroups = GroupsPerBlock<S>();
  for (int b = 0; b < nb / kGroups; ++b) {
    const std::uint8_t* blk = row + b * BlockBytes(TypeOf<S>());
    ScalesFor<S> scales;
    ScalesOf<S>(blk, &scales);
    ForGroups<kGroups>([&]<int G>() {
      const typename Isa::Block w = DequantGroup<Isa, S, G>(blk, scales);
      float* o = out + (b * kGroups + G) * kBlock;
      for (int p = 0; p < Isa::kParts; ++p) Isa::Store(o + p * kLanes, w.v[p]);
    });
  }
}

// The same outputs from the tile widened to fp32 in j.scratch (row r at r * blocks * 32). The
// chains of an output run one after another, so the registers hold R x T chains rather than
// R x T whole accumulators: AVX2's 16 registers fit 4 x 3 chains and their operands.
template <class Isa, int R, int T, bool kPiece>
void WidePanel(const F32Tile& j, int r0, int t0) {
  using V = typename Isa::V;
  constexpr int kLanes = kBlock / Isa::kParts;
  const std::size_t stride = j.wide_stride;
  const float* ws = j.scratch + std::size_t(r0) * stride;
  const float* xs = j.x + std::size_t(t0) * j.ldx;
  constexpr int kChainLanes = sizeof(V) / sizeof(float);
  // Output (r, t)'s chain c in the carry of a piece.
  auto carried = [&](int r, int t, int c) {
    return j.carry + (std::size_t(t0 + t) * kRowTile + r0 + r) * kBlock / 2 + c * kChainLanes;
  };
  typename Isa::Acc acc[R][T];
  for (int c = 0; c < Isa::kChains; ++c) {
    V a[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        a[r][t] = kPiece && j.carry_in ? Isa::Load(carried(r, t, c)) : Isa::ZeroV();
      }
    }
    for (int b = j.block0; b < j.block1; ++b) {
      for (int p = c; p < Isa::kParts; p += Isa::kChains) {
        const std::size_t off = std::size_t(b) * kBlock + p * kLanes;
        // The smaller side stays in registers and the other streams through one: R x T
        // accumulators plus min(R, T) + 1 operands fit the register file without spills.
        if constexpr (R < T) {
          V w[R];
          for (int r = 0; r < R; ++r) w[r] = Isa::Load(ws + r * stride + off);
          for (int t = 0; t < T; ++t) {
            const V x = Isa::Load(xs + t * j.ldx + off);
            for (int r = 0; r < R; ++r) Isa::FmaV(a[r][t], w[r], x);
          }
        } else {
          V x[T];
          for (int t = 0; t < T; ++t) x[t] = Isa::Load(xs + t * j.ldx + off);
          for (int r = 0; r < R; ++r) {
            const V w = Isa::Load(ws + r * stride + off);
            for (int t = 0; t < T; ++t) Isa::FmaV(a[r][t], w, x[t]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        if (kPiece && j.carry_out) {
          Isa::Store(carried(r, t, c), a[r][t]);
        } else {
          Isa::SetChain(acc[r][t], c, a[r][t]);
        }
      }
    }
  }
  if (!(kPiece && j.carry_out)) EmitPanel<Isa, R, T>(j, acc, r0, t0);
}

// Output rows per panel of T tokens.
template <class Isa, Src S, int T>
constexpr int PanelRows() {
  if constexpr (S == Src::kWide || S == Src::kPiece) {
    return Isa::kWideRows;
  } else {
    return Isa::kDirectRows[T - 1];
  }
}

// Rows [r0, j.rows) in panels of R rows, the rest in one smaller panel.
template <class Isa, Src S, int R, int T>
void RowsFrom(const F32Tile& j, int r0, int t0) {
  for (; r0 + R <= j.rows; r0 += R) {
    if constexpr (S == Src::kWide || S == Src::kPiece) {
      WidePanel<Isa, R, T, S == Src::kPiece>(j, r0, t0);
    } else {
      Panel<Isa, S, R, T>(j, r0, t0);
    }
  }
  if constexpr (R > 1) {
    if (r0 < j.rows) RowsFrom<Isa, S, R - 1, T>(j, r0, t0);
  }
}

// Tokens [t0, t0 + size) for a size in [1, T], by the register tile of that size.
template <class Isa, Src S, int T>
void Group(const F32Tile& j, int t0, int size) {
  if (size == T) return RowsFrom<Isa, S, PanelRows<Isa, S, T>(), T>(j, 0, t0);
  if constexpr (T > 1) Group<Isa, S, T - 1>(j, t0, size);
}

// The tokens in as few groups of at most kGroup as there can be, their sizes differing by at
// most one: a group of one or two tokens costs nearly what a full one does.
template <class Isa, Src S, int kGroup>
void Groups(const F32Tile& j) {
  const int groups = (j.n + kGroup - 1) / kGroup;
  const int base = j.n / groups;
  const int extra = j.n % groups;
  for (int g = 0, t0 = 0; g < groups; ++g) {
    const int size = base + (g < extra ? 1 : 0);
    Group<Isa, S, kGroup>(j, t0, size);
    t0 += size;
  }
}

template <class Isa, Src S>
void F32TileOf(const F32Tile& j) {
  if (!j.wide) return Groups<Isa, S, Isa::kDirectGroup>(j);
  // Each block is dequantized once into the tile. Bands of 2 x kWideRows rows then pass over the
  // chunk's token groups a piece of at most Isa::kWideRunBlocks at a time, so that the band's slice
  // and the group's stay in L1; a longer row's outputs carry their lanes from piece to piece.
  const int nb = j.block1;
  if (!j.widened) {
    for (int r = 0; r < j.rows; ++r) {
      WidenRow<Isa, S>(j.w + std::size_t(r) * j.row_stride, nb, j.scratch + r * j.wide_stride);
    }
  }
  const int pieces = (nb + Isa::kWideRunBlocks - 1) / Isa::kWideRunBlocks;
  // Bands of two register tiles of rows: each token group's slice then comes from L2 once for 8
  // rows rather than 4 (AVX2's 8 rows and 3 tokens of a 24-block piece are 33 KB, in L1; AVX-512's
  // 32-block pieces measured faster than 24 despite the 56 KB of 8 rows and 6 tokens).
  const int band_rows = 2 * Isa::kWideRows;
  for (int r0 = 0; r0 < j.rows; r0 += band_rows) {
    F32Tile band = j;
    band.rows = std::min(band_rows, j.rows - r0);
    band.y = j.y + r0;
    band.scratch = j.scratch + r0 * j.wide_stride;
    if (pieces == 1) {
      Groups<Isa, Src::kWide, Isa::kWideTokens>(band);
      continue;
    }
    for (int p = 0; p < pieces; ++p) {
      band.block0 = p * Isa::kWideRunBlocks;
      band.block1 = std::min(nb, (p + 1) * Isa::kWideRunBlocks);
      band.carry_in = p > 0;
      band.carry_out = p + 1 < pieces;
      Groups<Isa, Src::kPiece, Isa::kWideTokens>(band);
    }
  }
}

template <class Isa>
void F32TileImpl(const F32Tile& j) {
  switch (j.type) {
    case WeightType::kQ4_1:
      return F32TileOf<Isa, Src::kQ41>(j);
    case WeightType::kQ8_0:
      return F32TileOf<Isa, Src::kQ80>(j);
    case WeightType::kQ5_0:
      return F32TileOf<Isa, Src::kQ50>(j);
    case WeightType::kQ4_K:
      return F32TileOf<Isa, Src::kQ4K>(j);
    case WeightType::kQ5_K:
      return F32TileOf<Isa, Src::kQ5K>(j);
    case WeightType::kQ6_K:
      return F32TileOf<Isa, Src::kQ6K>(j);
    case WeightType::kQ2_K:
      return F32TileOf<Isa, Src::kQ2K>(j);
    case WeightType::kQ3_K:
      return F32TileOf<Isa, Src::kQ3K>(j);
    case WeightType::kIQ4_NL:
      return F32TileOf<Isa, Src::kIQ4NL>(j);
    case WeightType::kIQ4_XS:
      return F32TileOf<Isa, Src::kIQ4XS>(j);
    case WeightType::kMXFP4:
      return F32TileOf<Isa, Src::kMXFP4>(j);
    case WeightType::kQ4_0:
      return F32TileOf<Isa, Src::kQ40>(j);
    case WeightType::kQ5_1:
      return F32TileOf<Isa, Src::kQ51>(j);
    case WeightType::kF32:
      return F32TileOf<Isa, Src::kF32>(j);
    case WeightType::kF16:
      return F32TileOf<Isa, Src::kF16>(j);
    case WeightType::kBF16:
      return F32TileOf<Isa, Src::kBF16>(j);
  }
}
