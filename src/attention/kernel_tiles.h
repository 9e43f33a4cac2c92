// The partial-attention kernel for the kTiles16 page format (attention.h), written once over
// the SIMD traits of kernel_impl.h and included after it by each ISA's translation unit.
//
// A tile holds one KV head's 16 consecutive keys. In K the 16 keys of one 32-bit word-column
// fill one 64-byte line, so q . k for 16 keys is a run of vertical multiply-adds of a K line by
// a broadcast element (or, for vdpbf16ps, a broadcast pair) of q: no horizontal sums. In V a
// line holds 16 d of e consecutive keys, so P V is the same pattern with the weights broadcast.
// A task reads its tiles in address order, page by page: within a page every KV head's tiles
// follow each other, so K and V are two streams of contiguous bytes. As each line of a tile is
// consumed, the same line of the stream's next tile is requested into L1 (prefetcht0) and that
// of a tile about 12 KiB further on into L2 (prefetcht2), so that the work paces both: the L2
// request covers the memory latency, the L1 one the L2 latency. An earlier scheme also requested
// the whole next tile at each tile's start; Zen 4 stalled on those requests and read at under half
// the rate (docs/perf-attention.md).
//
// Extra traits used here: kTileHeads (query heads per register tile), kTileSplit (independent
// partial sums per score vector, to cover the multiply-add latency), kTilePvVecs (vectors of d
// per P V register tile), LoadWords(p) (kLanes 32-bit words), Part<KElem, x>(w) (element x of
// each word, bf16 or fp8, as fp32), and kDpTiles: when true the traits supply TileScores and
// TilePvChunk themselves (vdpbf16ps on bf16 pairs). Traits with kAmxTiles (kernel_amx_bf16.cpp)
// instead take both products on AMX tiles: Configure(pairs of a KV head), AmxScores, AmxSoftmax
// and AmxPv.

// No include guard on purpose: each ISA's file includes this once inside its own namespace.

constexpr int kTileKeys = 16;
// Tasks that read less KV than this do not prefetch unless KernelArgs::kv_cold: their tiles are
// in cache (a causal prefill row reads what the rows before it read), where the prefetch
// instructions are pure cost: 20 % of a 574-token SmolLM2 prefill. 1 MiB is the L2 per core of
// the Zen 5 machine. A decode row's keys are cold at any size: prefetching SmolLM2's 776 KB per
// layer at 505 tokens made 16 such requests decode 15 % faster on Zen 3.
constexpr int64_t kPrefetchMinBytes = int64_t{1} << 20;
static_assert(kTileKeys == kKeyBlock, "a tile is one softmax block (SoftmaxBlock)");
// How far ahead of the current tile a stream's lines are requested into L2 (TilePrefetch): at
// least one tile past the next one, and as many more as make this many bytes.
constexpr int64_t kPrefetchFarBytes = 12 << 10;

template <class T>
constexpr bool kAmx = requires {
  T::kAmxTiles;
};

// The prefetches of one stream (K or V) while a tile of it is worked on, given the stream's next
// tile and the one kPrefetchFarBytes on (`far` null past the end of the task; `next` null: no
// prefetch).
class TilePrefetch {
 public:
  TilePrefetch(const char* next, const char* far) : next_(next), far_(far) {}

  // Called as the line at byte `off` of the current tile is consumed.
  __attribute__((always_inline)) void Line(int64_t off) const {
    if (next_ == nullptr) return;
    __builtin_prefetch(next_ + off, 0, 3);                      // prefetcht0
    if (far_ != nullptr) __builtin_prefetch(far_ + off, 0, 1);  // prefetcht2
  }

 private:
  const char* next_;
  const char* far_;
};

// The e elements of each of kLanes words, widened to fp32: part[x][at] lane l = element x of word
// l (x = 0 the lowest address).
template <class T, class KElem, class Words, int kN>
__attribute__((always_inline)) inline void Unpack(
    const Words& words, typename T::V (&part)[sizeof(float) / sizeof(KElem)][kN], int at) {
  constexpr int e = sizeof(float) / sizeof(KElem);
  [&]<int... x>(std::integer_sequence<int, x...>) {
    ((part[x][at] = T::template Part<KElem, x>(words)), ...);
  }
  (std::make_integer_sequence<int, e>());
}

// Scores of HB heads for the 16 keys of a K tile: s[i * kTileKeys + j] = q_i . k_j.
// Steps `pf` (when kPf) at each K line consumed; TileScoresFma picks kPf.
template <class T, class KElem, int HB, int kD, bool kPf>
void TileScoresLines(const float* q, int dqk_arg, const KElem* kt, const TilePrefetch* pf,
                     float* s) {
  using V = typename T::V;
  const int dqk = kD != 0 ? kD : dqk_arg;
  constexpr int kVecs = kTileKeys / T::kLanes;
  constexpr int kSplit = T::kTileSplit;
  constexpr int e = sizeof(float) / sizeof(KElem);
  V acc[HB][kVecs][kSplit];
#pragma GCC unroll 64
  for (int i = 0; i < HB; ++i) {
#pragma GCC unroll 64
    for (int v = 0; v < kVecs; ++v) {
#pragma GCC unroll 64
      for (int sp = 0; sp < kSplit; ++sp) acc[i][v][sp] = T::Zero();
    }
  }
  const int lines = dqk / e;  // a line: 16 keys x one word
  // The loops inside this one unroll completely, so that the accumulators stay in registers
  // (partly unrolled, GCC stored each to the stack after every multiply-add).
  for (int w = 0; w < lines; w += kSplit) {
#pragma GCC unroll 64
    for (int sp = 0; sp < kSplit; ++sp) {
      const KElem* line = kt + static_cast<int64_t>(w + sp) * kTileKeys * e;
      if constexpr (kPf) pf->Line(static_cast<int64_t>(w + sp) * 64);
      // The line's vectors first, then one broadcast of q per head for all of them: with the
      // broadcasts of every head live at once, AVX2's 16 registers spilled the accumulators, and
      // the store-to-load forwarding in their chains halved the bf16 rate.
      if constexpr (e == 1) {
        V kv[kVecs];
#pragma GCC unroll 64
        for (int v = 0; v < kVecs; ++v) kv[v] = T::Load(line + v * T::kLanes);
#pragma GCC unroll 64
        for (int i = 0; i < HB; ++i) {
          const V qb = T::Set1(q[i * dqk + w + sp]);
#pragma GCC unroll 64
          for (int v = 0; v < kVecs; ++v) acc[i][v][sp] = T::Fma(qb, kv[v], acc[i][v][sp]);
        }
      } else {
        V part[e][kVecs];
#pragma GCC unroll 64
        for (int v = 0; v < kVecs; ++v) {
          const auto words = T::LoadWords(line + v * T::kLanes * e);
          Unpack<T, KElem>(words, part, v);
        }
#pragma GCC unroll 64
        for (int i = 0; i < HB; ++i) {
          const float* qi = q + i * dqk + (w + sp) * e;
#pragma GCC unroll 64
          for (int x = 0; x < e; ++x) {
            const V qx = T::Set1(qi[x]);
#pragma GCC unroll 64
            for (int v = 0; v < kVecs; ++v) acc[i][v][sp] = T::Fma(qx, part[x][v], acc[i][v][sp]);
          }
        }
      }
    }
  }
  for (int i = 0; i < HB; ++i) {
    for (int v = 0; v < kVecs; ++v) {
      V sum = acc[i][v][0];
      for (int sp = 1; sp < kSplit; ++sp) sum = T::Add(sum, acc[i][v][sp]);
      T::Store(s + i * kTileKeys + v * T::kLanes, sum);
    }
  }
}

template <class T, class KElem, int HB, int kD>
void TileScoresFma(const float* q, int dqk, const KElem* kt, const TilePrefetch* pf, float* s) {
  if (pf != nullptr) return TileScoresLines<T, KElem, HB, kD, true>(q, dqk, kt, pf, s);
  TileScoresLines<T, KElem, HB, kD, false>(q, dqk, kt, nullptr, s);
}

// The word-rows of a V tile that P V reads: row[w] (w in [lo, hi)) holds d = 0 .. dv - 1 of keys
// w * e .. w * e + e - 1. A full tile's rows are the tile's own; in a partial tile only the rows
// with keys of the task are read, and a row shared by a key of the task and one outside it is a
// copy with the outside key's half zeroed (its weight is 0, but the slot may hold NaN).
template <class KElem>
struct VRows {
  const KElem* row[kTileKeys];
  int lo = 0;
  int hi = 0;
};

// O[i][d] += sum_j p[i][j] V[j][d] for HB heads over a V tile, in register tiles of DB vectors
// of d; prefetches like TileScoresLines (when kPf). The loops inside the one over the rows
// unroll completely, for the reason given there.
template <class T, class KElem, int HB, int DB, bool kPf>
void TilePvFmaChunk(const float* p, const VRows<KElem>& v, int dv, int d0, const TilePrefetch* pf,
                    float* o) {
  // dv is a compile-time constant where TilePvFma is instantiated with one.
  using V = typename T::V;
  constexpr int e = sizeof(float) / sizeof(KElem);
  V acc[HB][DB];
#pragma GCC unroll 64
  for (int i = 0; i < HB; ++i) {
#pragma GCC unroll 64
    for (int b = 0; b < DB; ++b) acc[i][b] = T::Load(o + i * dv + d0 + b * T::kLanes);
  }
  for (int w = v.lo; w < v.hi; ++w) {
    const int j = w * e;  // keys j .. j + e - 1 share the words of this row
    const KElem* row = v.row[w] + static_cast<int64_t>(d0) * e;
    if constexpr (kPf) {
      // DB vectors of kLanes words: the row's lines for this chunk of d, at their tile offset.
      const int64_t at = (static_cast<int64_t>(w) * dv + d0) * 4;
#pragma GCC unroll 64
      for (int b = 0; b < DB * T::kLanes * 4; b += 64) pf->Line(at + b);
    }
    // As in TileScoresLines: the row's vectors first, then one broadcast per head and key.
    if constexpr (e == 1) {
      V vv[DB];
#pragma GCC unroll 64
      for (int b = 0; b < DB; ++b) vv[b] = T::Load(row + b * T::kLanes);
#pragma GCC unroll 64
      for (int i = 0; i < HB; ++i) {
        const V pb = T::Set1(p[i * kTileKeys + j]);
#pragma GCC unroll 64
        for (int b = 0; b < DB; ++b) acc[i][b] = T::Fma(pb, vv[b], acc[i][b]);
      }
    } else {
      V part[e][DB];
#pragma GCC unroll 64
      for (int b = 0; b < DB; ++b) {
        const auto words = T::LoadWords(row + b * T::kLanes * e);
        Unpack<T, KElem>(words, part, b);
      }
#pragma GCC unroll 64
      for (int i = 0; i < HB; ++i) {
#pragma GCC unroll 64
        for (int x = 0; x < e; ++x) {
          const V px = T::Set1(p[i * kTileKeys + j + x]);
#pragma GCC unroll 64
          for (int b = 0; b < DB; ++b) acc[i][b] = T::Fma(px, part[x][b], acc[i][b]);
        }
      }
    }
  }
  for (int i = 0; i < HB; ++i) {
    for (int b = 0; b < DB; ++b) T::Store(o + i * dv + d0 + b * T::kLanes, acc[i][b]);
  }
}

template <class T, class KElem, int HB, int kD, bool kPf>
void TilePvChunks(const float* p, const VRows<KElem>& v, int dv_arg, const TilePrefetch* pf,
                  float* o) {
  constexpr int DB = T::kTilePvVecs;
  const int dv = kD != 0 ? kD : dv_arg;
  int d = 0;
  for (; d + DB * T::kLanes <= dv; d += DB * T::kLanes) {
    TilePvFmaChunk<T, KElem, HB, DB, kPf>(p, v, dv, d, pf, o);
  }
  for (; d < dv; d += T::kLanes) TilePvFmaChunk<T, KElem, HB, 1, kPf>(p, v, dv, d, pf, o);
}

template <class T, class KElem, int HB, int kD>
void TilePvFma(const float* p, const VRows<KElem>& v, int dv, const TilePrefetch* pf, float* o) {
  if (pf != nullptr) return TilePvChunks<T, KElem, HB, kD, true>(p, v, dv, pf, o);
  TilePvChunks<T, KElem, HB, kD, false>(p, v, dv, nullptr, o);
}

// P V for kDpTiles traits: their TilePvChunk<HB, DB> on the weights' bf16 pairs, DB vectors of d
// at a time.
template <class T, class KElem, int HB, int kD>
void TilePvDp(const uint32_t* pairs, const VRows<KElem>& v, int dv_arg, const TilePrefetch* pf,
              float* o) {
  constexpr int DB = T::kTilePvVecs;
  const int dv = kD != 0 ? kD : dv_arg;
  int d = 0;
  for (; d + DB * T::kLanes <= dv; d += DB * T::kLanes) {
    T::template TilePvChunk<HB, DB>(pairs, v, dv, d, pf, o);
  }
  for (; d < dv; d += T::kLanes) T::template TilePvChunk<HB, 1>(pairs, v, dv, d, pf, o);
}

// Every head chunk of a KV head's group: the generic (fp32 arithmetic) path, or the traits' own.
template <class T, class KElem, int HB, int kD>
void GroupScores(const typename T::QElem* q, int group, int dqk, const KElem* kt,
                 const TilePrefetch* next, float* s) {
  for (int h = 0; h < group; h += HB) {
    const int heads = group - h;
    if (heads < HB) {
      if constexpr (HB > 1) {
        return GroupScores<T, KElem, HB - 1, kD>(q + static_cast<int64_t>(h) * dqk, heads, dqk, kt,
                                                 h == 0 ? next : nullptr, s + h * kTileKeys);
      }
    }
    // Only the first chunk prefetches: the others read the tile again from L1.
    const TilePrefetch* pf = h == 0 ? next : nullptr;
    if constexpr (T::kDpTiles) {
      T::template TileScores<HB, kD>(q + static_cast<int64_t>(h) * dqk, dqk, kt, pf,
                                     s + h * kTileKeys);
    } else {
      TileScoresFma<T, KElem, HB, kD>(q + static_cast<int64_t>(h) * dqk, dqk, kt, pf,
                                      s + h * kTileKeys);
    }
  }
}

template <class T, class KElem, int HB, int kD>
void GroupPv(float* p, uint32_t* pairs, int group, const VRows<KElem>& vt, int dv,
             const TilePrefetch* next, float* o) {
  for (int h = 0; h < group; h += HB) {
    const int heads = group - h;
    if (heads < HB) {
      if constexpr (HB > 1) {
        return GroupPv<T, KElem, HB - 1, kD>(p + h * kTileKeys, pairs + h * (kTileKeys / 2), heads,
                                             vt, dv, h == 0 ? next : nullptr,
                                             o + static_cast<int64_t>(h) * dv);
      }
    }
    const TilePrefetch* pf = h == 0 ? next : nullptr;
    float* oh = o + static_cast<int64_t>(h) * dv;
    if constexpr (T::kDpTiles) {
      TilePvDp<T, KElem, HB, kD>(pairs + h * (kTileKeys / 2), vt, dv, pf, oh);
    } else {
      TilePvFma<T, KElem, HB, kD>(p + h * kTileKeys, vt, dv, pf, oh);
    }
  }
}

// The tiles of a task in the order they are read: pages, then KV heads, then the page's blocks
// (global 16-key blocks of the row) that fall in the task's keys.
class TileWalk {
 public:
  TileWalk(int key_begin, int key_end, int blocks_per_page, int kv_heads)
      : first_(key_begin / kTileKeys),
        last_((key_end - 1) / kTileKeys),
        per_page_(blocks_per_page),
        kv_heads_(kv_heads) {}

  struct Tile {
    int page_index = -1;  // into the row's block table; -1: past the end
    int kvh = 0;
    int block = 0;
  };
  Tile First() const { return {first_ / per_page_, 0, first_}; }
  Tile Next(Tile t) const {
    if (t.page_index < 0) return t;
    if (t.block < PageEnd(t.page_index)) return {t.page_index, t.kvh, t.block + 1};
    if (t.kvh + 1 < kv_heads_) return {t.page_index, t.kvh + 1, PageBegin(t.page_index)};
    if (t.page_index + 1 <= last_ / per_page_) {
      return {t.page_index + 1, 0, PageBegin(t.page_index + 1)};
    }
    return {};
  }

 private:
  int PageBegin(int pi) const { return std::max(first_, pi * per_page_); }
  int PageEnd(int pi) const { return std::min(last_, (pi + 1) * per_page_ - 1); }

  int first_, last_, per_page_, kv_heads_;
};

// A task's state in its scratch (KernelScratchFloats with its rows). A pair is one row's query
// head; pairs go in the order [KV head][row][head of the group], so that the pairs of one KV head
// are consecutive for the register tiles of GroupScores and GroupPv.
template <class T, class KElem>
struct TilesState {
  TilesState(const KernelArgs& a, int rows) {
    const int64_t pairs = static_cast<int64_t>(a.kv_heads) * a.group * rows;
    const int64_t kvh_pairs = static_cast<int64_t>(a.group) * rows;
    float* at = a.scratch;
    auto take = [&at](int64_t floats) {
      float* p = at;
      at += ScratchLines(static_cast<size_t>(floats));
      return p;
    };
    q = reinterpret_cast<typename T::QElem*>(take(pairs * a.head_dim_qk));
    s = take(kvh_pairs * kTileKeys);
    m = take(pairs);
    l = take(pairs);
    packed = reinterpret_cast<uint32_t*>(take(kvh_pairs * kTileKeys / 2));
    vpart = reinterpret_cast<KElem*>(take(2 * static_cast<int64_t>(a.head_dim_v)));
    amx = take(8 * static_cast<int64_t>(a.head_dim_v));
    // One row accumulates in its own O ([heads, dv] is the pair order then).
    o = rows > 1 ? take(pairs * a.head_dim_v) : a.o;
  }
  typename T::QElem* q;  // [pairs, head_dim_qk]
  float* s;              // [pairs of a KV head, kTileKeys]
  float* m;              // [pairs]
  float* l;              // [pairs]
  uint32_t* packed;      // [pairs of a KV head, kTileKeys / 2]: the weights as bf16 pairs
  KElem* vpart;          // two V word-rows: the edges of a partial tile
  float* amx;            // AmxPv's scratch: a partial V tile's copy
  float* o;              // [pairs, head_dim_v]
};

// The word-rows of V tile vt that keys [lo, hi) read (see VRows), with the edge rows copied to
// vpart where a word holds a key outside them.
template <class KElem>
VRows<KElem> TileVRows(const KElem* vt, int lo, int hi, int dv, KElem* vpart) {
  constexpr int e = sizeof(float) / sizeof(KElem);
  VRows<KElem> v;
  v.lo = lo / e;
  v.hi = (hi + e - 1) / e;
  const int64_t row_elems = static_cast<int64_t>(dv) * e;
  for (int w = v.lo; w < v.hi; ++w) v.row[w] = vt + w * row_elems;
  if constexpr (e > 1) {
    for (int w : {v.lo, v.hi - 1}) {
      const bool whole = w * e >= lo && w * e + e <= hi;
      if (whole || v.row[w] != vt + w * row_elems) continue;  // whole, or copied already
      KElem* copy = vpart + (w == v.lo ? 0 : row_elems);
      for (int64_t i = 0; i < row_elems; ++i) {
        const int key = w * e + static_cast<int>(i % e);
        copy[i] = key >= lo && key < hi ? v.row[w][i] : KElem{};
      }
      v.row[w] = copy;
    }
  }
  return v;
}

template <class T, class KElem, int kD>
void AttendTilesD(const KernelArgs& a) {
  const KernelRow single{a.q, a.o, a.lse, a.key_end};
  const int nr = a.rows != nullptr ? a.num_rows : 1;
  const KernelRow* rows = a.rows != nullptr ? a.rows : &single;
  const int group = a.group;
  const int dqk = a.head_dim_qk;
  const int dv = a.head_dim_v;
  const int kvh_pairs = nr * group;
  const int64_t pairs = static_cast<int64_t>(a.kv_heads) * kvh_pairs;
  TilesState<T, KElem> st(a, nr);
  if constexpr (kAmx<T>) T::Configure(nr * group);
  for (int64_t i = 0; i < pairs * dv; i += T::kLanes) T::Store(st.o + i, T::Zero());
  // Q scaled by scale * log2(e) once: the softmax runs in base 2 (exp2 is cheaper than exp).
  constexpr float kShortfall = WidenShortfall<T, KElem>();
  for (int kvh = 0; kvh < a.kv_heads; ++kvh) {
    for (int r = 0; r < nr; ++r) {
      for (int g = 0; g < group; ++g) {
        const int64_t pair = (static_cast<int64_t>(kvh) * nr + r) * group + g;
        T::PrepareQ(rows[r].q + static_cast<int64_t>(kvh * group + g) * dqk,
                    a.scale * kLog2e * kShortfall, st.q + pair * dqk, dqk);
        st.m[pair] = -__builtin_inff();
        st.l[pair] = 0.0f;
      }
    }
  }
  const int key_end = rows[nr - 1].key_end;
  const int blocks_per_page = a.page_size / kTileKeys;
  const int64_t k_tile = static_cast<int64_t>(kTileKeys) * dqk;
  const int64_t v_tile = static_cast<int64_t>(kTileKeys) * dv;
  using Tile = TileWalk::Tile;
  auto tile_index = [&](const Tile& t) {
    return static_cast<int64_t>(t.kvh) * blocks_per_page + t.block % blocks_per_page;
  };
  auto k_of = [&](const Tile& t) -> const KElem* {
    if (t.page_index < 0) return nullptr;
    return static_cast<const KElem*>(a.k) + a.pages[t.page_index] * a.k_page_stride +
           tile_index(t) * k_tile;
  };
  auto v_of = [&](const Tile& t) -> const KElem* {
    if (t.page_index < 0) return nullptr;
    return static_cast<const KElem*>(a.v) + a.pages[t.page_index] * a.v_page_stride +
           tile_index(t) * v_tile;
  };
  auto bytes = [](const KElem* p) { return reinterpret_cast<const char*>(p); };
  const bool prefetch = a.kv_cold || static_cast<int64_t>(key_end - a.key_begin) * a.kv_heads *
                                             (dqk + dv) * static_cast<int64_t>(sizeof(KElem)) >=
                                         kPrefetchMinBytes;
  const TileWalk walk(a.key_begin, key_end, blocks_per_page, a.kv_heads);
  Tile first_tile = a.key_begin < key_end ? walk.First() : Tile{};
  Tile next = walk.Next(first_tile);
  // The tile whose lines go to L2: about kPrefetchFarBytes of a stream past the current tile.
  const int64_t stream_tile = std::max(k_tile, v_tile) * static_cast<int64_t>(sizeof(KElem));
  Tile far = walk.Next(next);
  for (int64_t ahead = 2 * stream_tile; ahead < kPrefetchFarBytes; ahead += stream_tile) {
    far = walk.Next(far);
  }
  for (Tile cur = first_tile; cur.page_index >= 0;
       cur = next, next = walk.Next(next), far = walk.Next(far)) {
    const TilePrefetch k_pf{prefetch ? bytes(k_of(next)) : nullptr, bytes(k_of(far))};
    const TilePrefetch v_pf{prefetch ? bytes(v_of(next)) : nullptr, bytes(v_of(far))};
    const KElem* kt = k_of(cur);
    const KElem* vt = v_of(cur);
    const int key0 = cur.block * kTileKeys;
    const int lo = std::max(a.key_begin - key0, 0);
    // Rows [first, nr) have keys in this tile.
    int first = 0;
    while (rows[first].key_end <= key0) ++first;
    const int64_t p0 = static_cast<int64_t>(cur.kvh) * kvh_pairs;
    const int act = first * group;
    float* s = st.s;
    if constexpr (kAmx<T>) {
      T::template AmxScores<kD>(st.q + p0 * dqk, act, kvh_pairs, dqk, kt, &k_pf, s);
    } else {
      GroupScores<T, KElem, T::kTileHeads, kD>(st.q + (p0 + act) * dqk, kvh_pairs - act, dqk, kt,
                                               &k_pf, s + act * kTileKeys);
    }
    // Capped before the keys outside a row's range get score -inf; see VRows for their V.
    for (int i = act; i < kvh_pairs; ++i) SoftcapScores(s + i * kTileKeys, kTileKeys, a.softcap);
    for (int r = first; r < nr; ++r) {
      const int hi = std::min(rows[r].key_end - key0, kTileKeys);
      if (lo == 0 && hi == kTileKeys) continue;
      for (int i = r * group; i < (r + 1) * group; ++i) {
        for (int j = 0; j < kTileKeys; ++j) {
          if (j < lo || j >= hi) s[i * kTileKeys + j] = -__builtin_inff();
        }
      }
    }
    if constexpr (kAmx<T>) {
      T::AmxSoftmax(s, act, kvh_pairs, st.m + p0, st.l + p0, st.o + p0 * dv, dv, st.packed);
    } else {
      for (int i = act; i < kvh_pairs; ++i) {
        float* si = s + i * kTileKeys;
        SoftmaxBlock<T>(si, st.m[p0 + i], st.l[p0 + i], st.o + (p0 + i) * dv, dv);
        if constexpr (T::kDpTiles) T::PackPairs(si, st.packed + i * (kTileKeys / 2));
      }
    }
    if constexpr (kAmx<T>) {
      // Every active pair in one pass: a row's keys past its end have weight 0, and only keys
      // outside every row's range may hold what is not V (AmxPv zeroes them).
      const int hi = std::min(rows[nr - 1].key_end - key0, kTileKeys);
      T::template AmxPv<kD>(st.packed, act, kvh_pairs, vt, lo, hi, dv, &v_pf, st.o + p0 * dv,
                            st.amx);
    } else {
      // P V: the rows that see the whole tile from lo on ([full, nr)) together, then each of the
      // others alone. Only the first call prefetches.
      int full = first;
      while (full < nr && rows[full].key_end < key0 + kTileKeys) ++full;
      const TilePrefetch* v_next = &v_pf;
      auto pv = [&](int r0, int r1, int hi) {
        const VRows<KElem> vrows = TileVRows<KElem>(vt, lo, hi, dv, st.vpart);
        GroupPv<T, KElem, T::kTileHeads, kD>(
            s + r0 * group * kTileKeys, st.packed + r0 * group * (kTileKeys / 2), (r1 - r0) * group,
            vrows, dv, v_next, st.o + (p0 + r0 * group) * dv);
        v_next = nullptr;
      };
      if (full < nr) pv(full, nr, kTileKeys);
      for (int r = first; r < full; ++r) pv(r, r + 1, rows[r].key_end - key0);
    }
  }
  // FinishHead for every pair; a row that saw no key gets O = 0 and lse = -inf.
  for (int r = 0; r < nr; ++r) {
    for (int kvh = 0; kvh < a.kv_heads; ++kvh) {
      for (int g = 0; g < group; ++g) {
        const int64_t pair = (static_cast<int64_t>(kvh) * nr + r) * group + g;
        const int h = kvh * group + g;
        float* out = rows[r].o + static_cast<int64_t>(h) * dv;
        if (st.l[pair] == 0.0f) {
          for (int d = 0; d < dv; d += T::kLanes) T::Store(out + d, T::Zero());
          rows[r].lse[h] = -__builtin_inff();
          continue;
        }
        FinishHead<T>(st.o + pair * dv, st.m[pair], st.l[pair], dv, out, rows[r].lse + h,
                      kShortfall);
      }
    }
  }
}

template <class T, class KElem>
void AttendTiles(const KernelArgs& a) {
  // The GQA head dims get unrolled loops: a tile's work is short, so loop overhead would show.
  if (a.head_dim_qk == a.head_dim_v && a.head_dim_qk == 256) return AttendTilesD<T, KElem, 256>(a);
  if (a.head_dim_qk == a.head_dim_v && a.head_dim_qk == 128) return AttendTilesD<T, KElem, 128>(a);
  if (a.head_dim_qk == a.head_dim_v && a.head_dim_qk == 64) return AttendTilesD<T, KElem, 64>(a);
  AttendTilesD<T, KElem, 0>(a);
}
