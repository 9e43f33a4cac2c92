// The 256-bit kernels of the int8 path (linear_int8.h), shared by the AVX2 unit and the
// AVX-VNNI unit: two registers hold the 16 rows of a tile (8 each), and `Dot` adds the products
// of 4 bytes of each row with 4 bytes of one token into a part (int32 lanes, or AVX2's int16
// pairs, widened every few lines). Internal: each unit includes it inside its own unnamed
// namespace, after <immintrin.h>, <algorithm>, <cstring>, <utility> and linear_int8.h, so that it
// compiles its own copy with its own instruction set.

// No include guard on purpose: each ISA's file includes this once inside its own namespace.

constexpr int kYmmTokens = 4;

// Rows 8p..8p+7 of the scales of sub-block s and the mins of group g, held in fp16 or fp32
// (Int8Pack::half).
__m256 Half8(const std::uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}
__attribute__((always_inline)) inline __m256 ScaleLine(const Int8Pack& w, int tile, int s, int p) {
  return w.half ? Half8(w.Scale16(tile, s) + 8 * p) : _mm256_loadu_ps(w.Scale(tile, s) + 8 * p);
}
__attribute__((always_inline)) inline __m256 MinLine(const Int8Pack& w, int tile, int g, int p) {
  return w.half ? Half8(w.Min16(tile, g) + 8 * p) : _mm256_loadu_ps(w.Min(tile, g) + 8 * p);
}

// The 8 rows' u of line k from its low 4 bits (nib) and the pack's line of fifth bits (top):
// bit k of each byte of top to bit 4.
__attribute__((always_inline)) inline __m256i AddHigh(__m256i nib, __m256i top, int k) {
  const __m256i fifth = k < 4 ? _mm256_slli_epi16(top, 4 - k) : _mm256_srli_epi16(top, k - 4);
  return _mm256_or_si256(nib, _mm256_and_si256(fifth, _mm256_set1_epi8(16)));
}

// sum less bias * sum(xq) of sub-block s (bias = 1 << shift), the token's sums at `sums` (SumAt).
template <int kSub>
__attribute__((always_inline)) inline __m256i LessBias(__m256i sum, const std::int32_t* sums, int s,
                                                       __m128i shift) {
  return _mm256_sub_epi32(sum, _mm256_sll_epi32(_mm256_set1_epi32(SubSum<kSub>(sums, s)), shift));
}

// The 256-bit vpdpbusd: each instruction adds 4 bytes of 8 rows. As in the AVX512-VNNI kernel,
// the weights are the unsigned operand, u = q + bias (Int8Pack::bias: 0 for the types with a min,
// whose q is 0..31), and bias * sum(xq) is subtracted after, exactly. kEvex: its AVX512-VNNI/VL
// encoding, which CPUs with AVX-512 VNNI but not AVX-VNNI have (Int8TileAvxVnniEvex).
template <bool kEvex>
struct VnniDot {
  static constexpr bool kBiased = true;
  static __m256i Weights(__m256i q, __m256i bias) { return _mm256_add_epi8(q, bias); }
  template <bool kSigned>
  static void Add(__m256i& isum, __m256i w, __m256i, __m256i x) {
    if constexpr (kEvex) {
      isum = _mm256_dpbusd_epi32(isum, w, x);
    } else {
      isum = _mm256_dpbusd_avx_epi32(isum, w, x);
    }
  }
  static __m256i Widen(__m256i part) { return part; }
  static int PartLines(const Int8Pack& w) { return w.sub / 4; }
};

// Dot: static __m256i Weights(__m256i q, __m256i bias) (a signed byte-form q as the product takes
// it; bias: Int8Pack::bias in every byte), static void Add<kSigned>(__m256i& part, __m256i w,
// __m256i q, __m256i x) (x: 4 bytes of the token, broadcast; w: Weights(q) of a signed byte-form
// q, else u), static __m256i Widen(__m256i part) (part's sums as int32 lanes), static int
// PartLines(const Int8Pack&) (the lines a part may sum before Widen, a power of two that divides
// sub / 4) and kBiased (whether Weights' products need bias * sum(xq) taken off). kSub: w.sub,
// known to the compiler so that it unrolls a sub-block's lines. kPart: Dot::PartLines(w), known
// to the compiler too (with the count at run time GCC kept the sums on the stack). kNib: u packed
// two lines per line (Int8Pack::nibbles), kHigh: with a line of fifth bits (high).
template <class Dot, int NT, int kSub, bool kMin, bool kNib, bool kHigh, int kPart>
void YmmTokens(const Int8Tile& t, int t0) {
  constexpr bool kWhole = kPart == kSub / 4;  // a part holds a whole sub-block
  constexpr bool kSigned = !kMin && !kNib;    // the byte form's signed q
  constexpr bool kCorrect = !kMin && (kNib || Dot::kBiased);
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, per_group = kBlock / kSub;
  // Token i's bytes at xq + i * cols, its scales at dx + i and xs + i (the NT tokens lie in one
  // block of kTileTokens: YmmTile's chunks do not cross one), group g's kTileTokens further each:
  // three pointers rather than 3 * NT, which the 16 general registers would not hold.
  const std::int8_t* xq = t.x->i8.data() + std::size_t(t0) * w.cols;
  const std::size_t ldx = w.cols;
  const float* dx = t.x->i8_d.data() + ScaleAt(t0, 0, groups);
  const float* xs = t.x->i8_xs.data() + ScaleAt(t0, 0, groups);
  const std::int32_t* xsum = t.x->i8_sums.data() + SumAt(t0, 0, 0, groups);
  const __m128i shift = _mm_cvtsi32_si128(kMin ? 0 : w.BiasShift());
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(w.bias));
  __m256 acc[NT][2];
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int g = 0; g < groups; ++g) {
    for (int h = 0; h < per_group; ++h) {
      const int s = g * per_group + h;
      const std::int8_t* q = w.Q(t.tile, s);
      if (t.nt < kPrefillMinTokens) PrefetchAhead(w, q);
      // part: the products of the lines since the last Widen; isum: the int32 sums before (not
      // kWhole: there the one part is widened as the scales take it, so that neither goes through
      // the stack).
      __m256i part[NT][2], isum[NT][2];
      for (int i = 0; i < NT; ++i) {
        part[i][0] = part[i][1] = _mm256_setzero_si256();
        if (!kWhole) isum[i][0] = isum[i][1] = _mm256_setzero_si256();
      }
      auto widen = [&] {
        for (int i = 0; i < NT; ++i) {
          for (int p = 0; p < 2; ++p) {
            isum[i][p] = _mm256_add_epi32(isum[i][p], Dot::Widen(part[i][p]));
            part[i][p] = _mm256_setzero_si256();
          }
        }
      };
      int pending = 0;
      // Line k's two halves (rows 0-7, 8-15): wq as stored, wv as the product takes them.
      auto line = [&](int k, const __m256i(&wq)[2]) {
        __m256i wv[2];
        for (int p = 0; p < 2; ++p) wv[p] = kSigned ? Dot::Weights(wq[p], bias) : wq[p];
        for (int i = 0; i < NT; ++i) {
          std::int32_t bytes;
          std::memcpy(&bytes, xq + i * ldx + s * kSub + 4 * k, 4);
          const __m256i xv = _mm256_set1_epi32(bytes);
          for (int p = 0; p < 2; ++p) {
            Dot::template Add<kSigned>(part[i][p], wv[p], wq[p], xv);
            // GCC otherwise reassociates a sub-block's sums into a tree and spills its leaves.
            asm("" : "+x"(part[i][p]));
          }
        }
        if (!kWhole && ++pending == kPart) {
          widen();
          pending = 0;
        }
      };
      auto load = [&](int k, int p) {
        return _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k * 64 + 32 * p));
      };
      if constexpr (kNib) {
        const __m256i low = _mm256_set1_epi8(15);
        __m256i top[2];
        if constexpr (kHigh) top[0] = load(kSub / 8, 0), top[1] = load(kSub / 8, 1);
#pragma GCC unroll 4
        for (int j = 0; j < kSub / 8; ++j) {
          __m256i lo[2], hi[2];
          for (int p = 0; p < 2; ++p) {
            const __m256i packed = load(j, p);
            lo[p] = _mm256_and_si256(packed, low);
            hi[p] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
            if constexpr (kHigh) {
              lo[p] = AddHigh(lo[p], top[p], j);
              hi[p] = AddHigh(hi[p], top[p], j + kSub / 8);
            }
          }
          line(j, lo);
          line(j + kSub / 8, hi);
        }
      } else {
#pragma GCC unroll 8
        for (int k = 0; k < kSub / 4; ++k) {
          const __m256i wq[2] = {load(k, 0), load(k, 1)};
          line(k, wq);
        }
      }
      for (int p = 0; p < 2; ++p) {
        const __m256 scale = ScaleLine(w, t.tile, s, p);
        for (int i = 0; i < NT; ++i) {
          const __m256i sum = kWhole ? Dot::Widen(part[i][p]) : isum[i][p];
          const __m256i exact = kCorrect ? LessBias<kSub>(sum, xsum + i, s, shift) : sum;
          const __m256 sd = _mm256_mul_ps(scale, _mm256_set1_ps(dx[g * kTileTokens + i]));
          acc[i][p] = _mm256_fmadd_ps(sd, _mm256_cvtepi32_ps(exact), acc[i][p]);
        }
      }
    }
    if (kMin) {
      for (int p = 0; p < 2; ++p) {
        const __m256 mn = MinLine(w, t.tile, g, p);
        for (int i = 0; i < NT; ++i) {
          acc[i][p] = _mm256_fmadd_ps(mn, _mm256_set1_ps(xs[g * kTileTokens + i]), acc[i][p]);
        }
      }
    }
  }
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  for (int i = 0; i < NT; ++i) {
    float* y = t.y + std::size_t(t0 + i) * t.ldy + t.tile * kTileRows;
    alignas(32) float out[kTileRows];
    _mm256_store_ps(out, acc[i][0]);
    _mm256_store_ps(out + 8, acc[i][1]);
    std::memcpy(y, out, sizeof(float) * rows);
  }
}

template <class Dot, int kSub, bool kMin, bool kNib, bool kHigh, int kPart, int... NT>
void YmmTokenCount(const Int8Tile& t, int t0, int nt, std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? YmmTokens<Dot, NT + 1, kSub, kMin, kNib, kHigh, kPart>(t, t0) : void()), ...);
}

// YmmTokens for nt tokens and the pack's part length (1, 2, 4 or 8 lines: PartLines divides
// kSub / 4; the 4-bit types, u <= 15, always sum a whole sub-block in a part).
template <class Dot, int kSub, bool kMin, bool kNib, bool kHigh>
void YmmDispatch(const Int8Tile& t, int t0, int nt) {
  const auto seq = std::make_integer_sequence<int, kYmmTokens>();
  const int part = kNib && !kHigh ? kSub / 4 : Dot::PartLines(*t.w);
  if (part == kSub / 4) {
    return YmmTokenCount<Dot, kSub, kMin, kNib, kHigh, kSub / 4>(t, t0, nt, seq);
  }
  if constexpr (!kNib || kHigh) {
    if (part == 4) return YmmTokenCount<Dot, kSub, kMin, kNib, kHigh, 4>(t, t0, nt, seq);
    if (part == 2) return YmmTokenCount<Dot, kSub, kMin, kNib, kHigh, 2>(t, t0, nt, seq);
    YmmTokenCount<Dot, kSub, kMin, kNib, kHigh, 1>(t, t0, nt, seq);
  }
}

// The kernel of t's weight type.
template <class Dot>
void YmmKind(const Int8Tile& t, int t0, int nt) {
  if (t.w->high) {
    YmmDispatch<Dot, 32, false, true, true>(t, t0, nt);
  } else if (t.w->nibbles) {
    YmmDispatch<Dot, 32, true, true, false>(t, t0, nt);
  } else if (t.w->has_min) {
    YmmDispatch<Dot, 32, true, false, false>(t, t0, nt);
  } else if (t.w->sub == 16) {
    YmmDispatch<Dot, 16, false, false, false>(t, t0, nt);
  } else {
    YmmDispatch<Dot, 32, false, false, false>(t, t0, nt);
  }
}

template <class Dot>
void YmmTile(const Int8Tile& tiles) {
  ForEachTile(tiles, [](const Int8Tile& t) {
    for (int t0 = t.t0, nt = 0; t0 < t.t0 + t.nt; t0 += nt) {
      nt = std::min({kYmmTokens, t.t0 + t.nt - t0, kTileTokens - t0 % kTileTokens});
      YmmKind<Dot>(t, t0, nt);
    }
  });
}
