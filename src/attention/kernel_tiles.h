// The partial-attention kernel for the kTiles16 page format (attention.h), written once over
// the SIMD traits of kernel_impl.h and included after it by each ISA's translation unit.
//
// A tile holds one KV head's 16 consecutive keys. In K the 16 keys of one 32-bit word-column
// fill one 64-byte line, so q . k for 16 keys is a run of vertical multiply-adds of a K line by
// a broadcast element (or, for vdpbf16ps, a broadcast pair) of q: no horizontal sums. In V a
// line holds 16 d of e consecutive keys, so P V is the same pattern with the weights broadcast.
// A task reads its tiles in address order, page by page: within a page every KV head's tiles
// follow each other, so K and V are two streams of contiguous bytes; while it works on one tile
// it prefetches the same line of the next tile of each stream, one line per line consumed (the
// pace of the work, measured faster than prefetching ahead in bursts or by more than a tile).
//
// Extra traits used here: kTileHeads (query heads per register tile), kTileSplit (independent
// partial sums per score vector, to cover the multiply-add latency), kTilePvVecs (vectors of d
// per P V register tile), LoadWords(p) (kLanes 32-bit words), Lo(w) and Hi(w) (the low and high
// bf16 of each word as fp32), and kDpTiles: when true the traits supply TileScores and TilePv
// themselves (vdpbf16ps on bf16 pairs).

// No include guard on purpose: each ISA's file includes this once inside its own namespace.

constexpr int kTileKeys = 16;
static_assert(kTileKeys <= kKeyBlock, "the scratch holds kKeyBlock scores per head");

__attribute__((always_inline)) inline void PrefetchLine(const void* p) {
  __builtin_prefetch(p, 0, 3);
}

// Scores of HB heads for the 16 keys of a K tile: s[i * kTileKeys + j] = q_i . k_j.
// Prefetches the line of `next` at the offset of each K line consumed when `next` is non-null.
template <class T, class KElem, int HB, int kD>
void TileScoresFma(const float* q, int dqk_arg, const KElem* kt, const char* next, float* s) {
  using V = typename T::V;
  const int dqk = kD != 0 ? kD : dqk_arg;
  constexpr int kVecs = kTileKeys / T::kLanes;
  constexpr int kSplit = T::kTileSplit;
  constexpr int e = sizeof(float) / sizeof(KElem);
  V acc[HB][kVecs][kSplit];
  for (int i = 0; i < HB; ++i) {
    for (int v = 0; v < kVecs; ++v) {
      for (int sp = 0; sp < kSplit; ++sp) acc[i][v][sp] = T::Zero();
    }
  }
  const int lines = dqk / e;  // a line: 16 keys x one word
  for (int w = 0; w < lines; w += kSplit) {
    for (int sp = 0; sp < kSplit; ++sp) {
      const KElem* line = kt + static_cast<int64_t>(w + sp) * kTileKeys * e;
      if (next != nullptr) {
        PrefetchLine(next +
                     (reinterpret_cast<const char*>(line) - reinterpret_cast<const char*>(kt)));
      }
      for (int v = 0; v < kVecs; ++v) {
        if constexpr (e == 1) {
          const V kv = T::Load(line + v * T::kLanes);
          for (int i = 0; i < HB; ++i) {
            acc[i][v][sp] = T::Fma(T::Set1(q[i * dqk + w + sp]), kv, acc[i][v][sp]);
          }
        } else {
          const auto words = T::LoadWords(line + v * T::kLanes * e);
          const V lo = T::Lo(words);
          const V hi = T::Hi(words);
          for (int i = 0; i < HB; ++i) {
            const float* qi = q + i * dqk + (w + sp) * e;
            acc[i][v][sp] = T::Fma(T::Set1(qi[0]), lo, acc[i][v][sp]);
            acc[i][v][sp] = T::Fma(T::Set1(qi[1]), hi, acc[i][v][sp]);
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

// O[i][d] += sum_j p[i][j] V[j][d] for HB heads over a V tile, in register tiles of DB vectors
// of d; prefetches like TileScoresFma.
template <class T, class KElem, int HB, int DB>
void TilePvFmaChunk(const float* p, const KElem* vt, int dv, int d0, const char* next, float* o) {
  // dv is a compile-time constant where TilePvFma is instantiated with one.
  using V = typename T::V;
  constexpr int e = sizeof(float) / sizeof(KElem);
  V acc[HB][DB];
  for (int i = 0; i < HB; ++i) {
    for (int b = 0; b < DB; ++b) acc[i][b] = T::Load(o + i * dv + d0 + b * T::kLanes);
  }
  for (int j = 0; j < kTileKeys; j += e) {
    // Keys j .. j + e - 1 share the words of this row of the tile.
    const KElem* row = vt + static_cast<int64_t>(j / e) * dv * e + static_cast<int64_t>(d0) * e;
    if (next != nullptr) {
      for (int b = 0; b < DB * T::kLanes * e * static_cast<int>(sizeof(KElem)); b += 64) {
        PrefetchLine(next +
                     (reinterpret_cast<const char*>(row) - reinterpret_cast<const char*>(vt)) + b);
      }
    }
    for (int b = 0; b < DB; ++b) {
      if constexpr (e == 1) {
        const V vv = T::Load(row + b * T::kLanes);
        for (int i = 0; i < HB; ++i) {
          acc[i][b] = T::Fma(T::Set1(p[i * kTileKeys + j]), vv, acc[i][b]);
        }
      } else {
        const auto words = T::LoadWords(row + b * T::kLanes * e);
        const V lo = T::Lo(words);
        const V hi = T::Hi(words);
        for (int i = 0; i < HB; ++i) {
          acc[i][b] = T::Fma(T::Set1(p[i * kTileKeys + j]), lo, acc[i][b]);
          acc[i][b] = T::Fma(T::Set1(p[i * kTileKeys + j + 1]), hi, acc[i][b]);
        }
      }
    }
  }
  for (int i = 0; i < HB; ++i) {
    for (int b = 0; b < DB; ++b) T::Store(o + i * dv + d0 + b * T::kLanes, acc[i][b]);
  }
}

template <class T, class KElem, int HB, int kD>
void TilePvFma(const float* p, const KElem* vt, int dv_arg, const char* next, float* o) {
  constexpr int DB = T::kTilePvVecs;
  const int dv = kD != 0 ? kD : dv_arg;
  int d = 0;
  for (; d + DB * T::kLanes <= dv; d += DB * T::kLanes) {
    TilePvFmaChunk<T, KElem, HB, DB>(p, vt, dv, d, next, o);
  }
  for (; d < dv; d += T::kLanes) TilePvFmaChunk<T, KElem, HB, 1>(p, vt, dv, d, next, o);
}

// Every head chunk of a KV head's group: the generic (fp32 arithmetic) path, or the traits' own.
template <class T, class KElem, int HB, int kD>
void GroupScores(const typename T::QElem* q, int group, int dqk, const KElem* kt, const char* next,
                 float* s) {
  for (int h = 0; h < group; h += HB) {
    const int heads = group - h;
    if (heads < HB) {
      if constexpr (HB > 1) {
        return GroupScores<T, KElem, HB - 1, kD>(q + static_cast<int64_t>(h) * dqk, heads, dqk, kt,
                                                 h == 0 ? next : nullptr, s + h * kTileKeys);
      }
    }
    // Only the first chunk prefetches: the others read the tile again from L1.
    const char* pf = h == 0 ? next : nullptr;
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
void GroupPv(float* p, uint32_t* pairs, int group, const KElem* vt, int dv, const char* next,
             float* o) {
  for (int h = 0; h < group; h += HB) {
    const int heads = group - h;
    if (heads < HB) {
      if constexpr (HB > 1) {
        return GroupPv<T, KElem, HB - 1, kD>(p + h * kTileKeys, pairs + h * (kTileKeys / 2), heads,
                                             vt, dv, h == 0 ? next : nullptr,
                                             o + static_cast<int64_t>(h) * dv);
      }
    }
    const char* pf = h == 0 ? next : nullptr;
    float* oh = o + static_cast<int64_t>(h) * dv;
    if constexpr (T::kDpTiles) {
      T::template TilePv<HB, kD>(pairs + h * (kTileKeys / 2), vt, dv, pf, oh);
    } else {
      TilePvFma<T, KElem, HB, kD>(p + h * kTileKeys, vt, dv, pf, oh);
    }
  }
}

// The tiles of a task in the order they are read: pages, then KV heads, then the page's blocks.
struct TileCursor {
  int page_index;  // into the row's block table
  int kvh;
  int block;  // global 16-key block of the row
};

// kD: head_dim_qk == head_dim_v when known at compile time (the loops over d then unroll), else 0.
template <class T, class KElem, int kD>
void AttendTilesD(const KernelArgs& a) {
  using V = typename T::V;
  const int group = a.group;
  const int heads = a.kv_heads * group;
  const int dqk = a.head_dim_qk;
  const int dv = a.head_dim_v;
  for (int64_t i = 0; i < static_cast<int64_t>(heads) * dv; i += T::kLanes) {
    T::Store(a.o + i, T::Zero());
  }
  if (a.key_begin >= a.key_end) {
    for (int h = 0; h < heads; ++h) a.lse[h] = -__builtin_inff();
    return;
  }
  auto* q = reinterpret_cast<typename T::QElem*>(a.scratch);
  float* s = a.scratch + static_cast<int64_t>(heads) * dqk;
  float* m = s + group * kTileKeys;
  float* l = m + heads;
  auto* pairs = reinterpret_cast<uint32_t*>(l + heads);
  auto* vpart = reinterpret_cast<KElem*>(pairs + group * (kTileKeys / 2));
  for (int h = 0; h < heads; ++h) {
    T::PrepareQ(a.q + static_cast<int64_t>(h) * dqk, a.scale * kLog2e,
                q + static_cast<int64_t>(h) * dqk, dqk);
    m[h] = -__builtin_inff();
    l[h] = 0.0f;
  }
  constexpr int e = sizeof(float) / sizeof(KElem);
  const int blocks_per_page = a.page_size / kTileKeys;
  const int first = a.key_begin / kTileKeys;
  const int last = (a.key_end - 1) / kTileKeys;
  const int64_t k_tile = static_cast<int64_t>(kTileKeys) * dqk;
  const int64_t v_tile = static_cast<int64_t>(kTileKeys) * dv;
  auto page_blocks = [&](int pi, int* lo, int* hi) {
    *lo = std::max(first, pi * blocks_per_page);
    *hi = std::min(last, (pi + 1) * blocks_per_page - 1);
  };
  auto tile_index = [&](const TileCursor& c) {
    return static_cast<int64_t>(c.kvh) * blocks_per_page + c.block % blocks_per_page;
  };
  auto k_of = [&](const TileCursor& c) {
    return static_cast<const KElem*>(a.k) + a.pages[c.page_index] * a.k_page_stride +
           tile_index(c) * k_tile;
  };
  auto v_of = [&](const TileCursor& c) {
    return static_cast<const KElem*>(a.v) + a.pages[c.page_index] * a.v_page_stride +
           tile_index(c) * v_tile;
  };
  const int last_page = last / blocks_per_page;
  for (int pi = first / blocks_per_page; pi <= last_page; ++pi) {
    int lo_block, hi_block;
    page_blocks(pi, &lo_block, &hi_block);
    for (int kvh = 0; kvh < a.kv_heads; ++kvh) {
      for (int blk = lo_block; blk <= hi_block; ++blk) {
        const TileCursor cur{pi, kvh, blk};
        // The tile read after this one; the last tile prefetches nothing.
        TileCursor nxt = cur;
        bool has_next = true;
        if (blk < hi_block) {
          nxt.block = blk + 1;
        } else if (kvh + 1 < a.kv_heads) {
          nxt = {pi, kvh + 1, lo_block};
        } else if (pi < last_page) {
          int nlo, nhi;
          page_blocks(pi + 1, &nlo, &nhi);
          nxt = {pi + 1, 0, nlo};
        } else {
          has_next = false;
        }
        const char* next_k = has_next ? reinterpret_cast<const char*>(k_of(nxt)) : nullptr;
        const char* next_v = has_next ? reinterpret_cast<const char*>(v_of(nxt)) : nullptr;
        const KElem* kt = k_of(cur);
        const KElem* vt = v_of(cur);
        const int key0 = blk * kTileKeys;
        const int lo = std::max(a.key_begin - key0, 0);
        const int hi = std::min(a.key_end - key0, kTileKeys);
        const int h0 = kvh * group;
        float* o = a.o + static_cast<int64_t>(h0) * dv;
        GroupScores<T, KElem, T::kTileHeads, kD>(q + static_cast<int64_t>(h0) * dqk, group, dqk, kt,
                                                 next_k, s);
        if (lo > 0 || hi < kTileKeys) {
          // Keys outside the task: their scores become -inf and their V words 0 (the slots may
          // hold anything, NaN included, and 0 * NaN would reach O).
          for (int g = 0; g < group; ++g) {
            for (int j = 0; j < kTileKeys; ++j) {
              if (j < lo || j >= hi) s[g * kTileKeys + j] = -__builtin_inff();
            }
          }
          for (int64_t i = 0; i < v_tile; ++i) vpart[i] = KElem{};
          for (int j = lo; j < hi; ++j) {
            for (int d = 0; d < dv; ++d) {
              const int64_t at = (static_cast<int64_t>(j / e) * dv + d) * e + j % e;
              vpart[at] = vt[at];
            }
          }
          vt = vpart;
        }
        for (int g = 0; g < group; ++g) {
          float* sg = s + g * kTileKeys;
          float& mh = m[h0 + g];
          float& lh = l[h0 + g];
          V vmax = T::Load(sg);
          for (int j = T::kLanes; j < kTileKeys; j += T::kLanes) {
            vmax = T::Max(vmax, T::Load(sg + j));
          }
          const float block_max = T::ReduceMax(vmax);
          const float m_new = mh > block_max ? mh : block_max;
          V vsum = T::Zero();
          for (int j = 0; j < kTileKeys; j += T::kLanes) {
            const V p = T::Exp2(T::Add(T::Load(sg + j), T::Set1(-m_new)));
            T::Store(sg + j, p);
            vsum = T::Add(vsum, p);
          }
          if (m_new > mh) {
            const float corr = __builtin_exp2f(mh - m_new);
            lh *= corr;
            ScaleRow<T>(o + static_cast<int64_t>(g) * dv, dv, corr);
            mh = m_new;
          }
          lh += T::ReduceAdd(vsum);
          if constexpr (T::kDpTiles) T::PackPairs(sg, pairs + g * (kTileKeys / 2));
        }
        GroupPv<T, KElem, T::kTileHeads, kD>(s, pairs, group, vt, dv, next_v, o);
      }
    }
  }
  for (int h = 0; h < heads; ++h) {
    // l >= 1 here: the key that set the max contributes exp2(0).
    ScaleRow<T>(a.o + static_cast<int64_t>(h) * dv, dv, 1.0f / l[h]);
    a.lse[h] = (m[h] + __builtin_log2f(l[h])) * kLn2;
  }
}

template <class T, class KElem>
void AttendTiles(const KernelArgs& a) {
  // The GQA head dims get unrolled loops: a tile's work is short, so loop overhead would show.
  if (a.head_dim_qk == a.head_dim_v && a.head_dim_qk == 128) return AttendTilesD<T, KElem, 128>(a);
  if (a.head_dim_qk == a.head_dim_v && a.head_dim_qk == 64) return AttendTilesD<T, KElem, 64>(a);
  AttendTilesD<T, KElem, 0>(a);
}
