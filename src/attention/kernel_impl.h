// The partial-attention kernel, written once over a SIMD traits type and instantiated by each
// ISA's translation unit (internal; include only from kernel_<isa>.cpp, inside an anonymous
// namespace, so that every ISA keeps its own copy).
//
// Traits T provide: V, kLanes, Zero, Set1, Load(const float*), Load(const uint16_t*) (bf16
// widened to fp32), Store, Add, Mul, Max, Fma(a, b, c) = a * b + c, ReduceMax, ReduceAdd,
// Exp2 (2^x; 0 below about -126, -inf included), Reduce4(a, b, c, d, out) (out[i] = sum of the
// lanes of the i-th), kQkHeads and kPvHeads (register tile heights), QElem and PrepareQ (how Q is
// held for the dot products), Dot(acc, q, k) (one step of kDotStep elements of q . k into acc), and
// kPairedPv: when true, PairedPv(p, n, v, group, o, dv, pf) does O += P V for a block (p may be
// overwritten; v[n] is valid and p is 0 there, so keys may be taken in pairs), calling
// pf->Step() once per pair of keys of each tile when pf->memory_bound, else once per tile.
//
// Algorithm (per task: one row, its KV heads and their G query heads each, a range of keys; the
// KV heads of a key block are visited in turn while the next block is prefetched in address
// order, see Prefetcher): Q is scaled by scale * log2(e) once so that the softmax runs in base 2
// (exp2 is cheaper than exp); keys go in blocks of kKeyBlock: scores for a tile of heads x 4 keys
// are accumulated along the head dimension in registers and reduced at the end, then the online
// softmax updates the running max m and sum l per head (rescaling O only when m grew), then
// O += P V in tiles of heads x 4 vectors of head_dim_v, each V row loaded once per tile of heads.
// Finally O /= l and lse = (m + log2 l) * ln 2.

// No include guard on purpose: each ISA's file includes this once inside its own namespace.

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The power of two by which T's widening of KElem undershoots its values (1 unless the traits
// say: the AVX-512 and AVX2 fp8 paths widen e4m3 to 2^-8 of them). Q's scale and O's final 1 / l
// carry it, so the scores and outputs are the bits an exact widening gives: every product and
// sum is scaled by a power of two, which rounds the same outside fp32's subnormal range.
template <class T, class KElem>
constexpr float WidenShortfall() {
  if constexpr (requires { T::Shortfall(KElem{}); }) {
    return T::Shortfall(KElem{});
  } else {
    return 1.0f;
  }
}

// Row pointers of keys [begin, begin + n): one division per block, then walk the pages.
template <class KElem>
void RowPtrs(const void* base, const KernelArgs& a, int64_t stride, int begin, int n,
             const KElem** out) {
  int page = begin / a.page_size;
  int slot = begin % a.page_size;
  for (int j = 0; j < n; ++j) {
    const int64_t row = static_cast<int64_t>(a.pages[page]) * a.page_size + slot;
    out[j] = static_cast<const KElem*>(base) + row * stride;
    if (++slot == a.page_size) {
      slot = 0;
      ++page;
    }
  }
}

// Walks the next block's rows (every KV head, K then V) in address order, a few cache lines per
// step, stepped from the score and P.V tiles. A block reads each row once per KV head, a few
// lines at a time with other heads' lines in between: an order the hardware prefetchers follow
// poorly (without software prefetch GQA reads at a third of the rate), while requests in address
// order, paced evenly over the block's work, keep the memory stream full (issued in bursts they
// queue behind each other and behind the block's own loads: measured slower). The bookkeeping is
// a counted run over contiguous rows: a loop per line cost as much as the arithmetic when the
// data was in cache.
struct Prefetcher {
  // The next block's rows merged into runs of contiguous bytes, in address order.
  const char* run_start[2 * kKeyBlock];
  int64_t run_bytes[2 * kKeyBlock];
  int num_runs = 0;
  int run = 0;
  const char* next = nullptr;
  int64_t left = 0;  // lines left in the current run
  int64_t lines_per_step = 1;
  int steps = 0;  // Step calls since Plan
  // See kMemoryBoundMaxGroup: true: into L1, a step per inner iteration of each tile; false:
  // into L2, a step per tile.
  bool memory_bound = true;

  __attribute__((always_inline)) void Fetch(const char* p) const {
    if (memory_bound) {
      __builtin_prefetch(p, 0, 3);
    } else {
      __builtin_prefetch(p, 0, 2);
    }
  }

  template <class KElem>
  void Add(const KElem* const* rows, int n, int64_t row_bytes) {
    for (int j = 0; j < n; ++j) {
      const char* row = reinterpret_cast<const char*>(rows[j]);
      if (num_runs > 0 && run_start[num_runs - 1] + run_bytes[num_runs - 1] == row) {
        run_bytes[num_runs - 1] += row_bytes;
      } else {
        run_start[num_runs] = row;
        run_bytes[num_runs++] = row_bytes;
      }
    }
  }

  // Starts on the runs added since the last Plan, spread over as many steps as the previous
  // block took (every full block makes the same calls).
  void Plan() {
    int64_t total = 0;
    for (int r = 0; r < num_runs; ++r) total += (run_bytes[r] + 63) / 64;
    if (steps > 0) lines_per_step = (total + steps - 1) / steps;
    steps = 0;
    run = 0;
    next = num_runs > 0 ? run_start[0] : nullptr;
    left = num_runs > 0 ? (run_bytes[0] + 63) / 64 : 0;
  }

  // Inlined, and Issue (the step that crosses a run) kept out of line: how these compile inside
  // the tiles' loops measured several percent on MLA and GQA (no vector register survives a
  // call, so a call in a loop can cost the accumulators).
  __attribute__((always_inline)) void Step() {
    ++steps;
    if (left >= lines_per_step) {
      for (int64_t i = 0; i < lines_per_step; ++i) Fetch(next + 64 * i);
      next += 64 * lines_per_step;
      left -= lines_per_step;
    } else if (run < num_runs) {
      Issue(lines_per_step);
    }
  }

  __attribute__((noinline)) void Issue(int64_t budget) {
    while (budget > 0) {
      if (left == 0) {
        if (++run >= num_runs) return;
        next = run_start[run];
        left = (run_bytes[run] + 63) / 64;
      }
      Fetch(next);
      next += 64;
      --left;
      --budget;
    }
  }

  // Whatever the steps left over; then the runs are cleared for the next block.
  void Finish() {
    if (run < num_runs) Issue(1 << 30);
    num_runs = 0;
  }
};

// Up to this many query heads per KV head the kernel is memory-bound: the next block goes to L1
// (prefetcht0 measured faster than prefetcht1 on GQA, 1 and 2 threads), a few lines per inner
// iteration. With more (absorbed MLA: 128) it is compute-bound: there lines fetched into L1 a
// block early evict the Q rows it reuses, and it needs no finer pacing (both together measured
// 3-8 % slower on MLA), so they go to L2, a step per tile.
constexpr int kMemoryBoundMaxGroup = 16;

// kDqk: head_dim_qk when known at compile time (the loop over it then unrolls), else 0. kFine:
// a prefetch step per inner iteration (pf->memory_bound); ScoreTile picks it.
template <class T, class KElem, int HB, int kDqk, bool kFine>
void ScoreTileSteps(const typename T::QElem* q, int dqk_arg, const KElem* const* k, float* s,
                    Prefetcher* pf) {
  using V = typename T::V;
  const int dqk = kDqk != 0 ? kDqk : dqk_arg;
  V acc[HB][4];
  for (int i = 0; i < HB; ++i) {
    for (int c = 0; c < 4; ++c) acc[i][c] = T::Zero();
  }
  if constexpr (!kFine) pf->Step();
  // With the step's test inside the loop, GCC stored the accumulators to the stack after every
  // multiply-add where the head dim is known only at run time (MLA's 576).
  for (int d = 0; d < dqk; d += T::kDotStep) {
    if constexpr (kFine) pf->Step();
    for (int i = 0; i < HB; ++i) {
      const typename T::QElem* qi = q + static_cast<int64_t>(i) * dqk + d;
      for (int c = 0; c < 4; ++c) acc[i][c] = T::Dot(acc[i][c], qi, k[c] + d);
    }
  }
  for (int i = 0; i < HB; ++i) {
    T::Reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3], s + i * kKeyBlock);
  }
}

template <class T, class KElem, int HB, int kDqk>
void ScoreTile(const typename T::QElem* q, int dqk, const KElem* const* k, float* s,
               Prefetcher* pf) {
  if (pf->memory_bound) return ScoreTileSteps<T, KElem, HB, kDqk, true>(q, dqk, k, s, pf);
  ScoreTileSteps<T, KElem, HB, kDqk, false>(q, dqk, k, s, pf);
}

template <class T, class KElem, int HB, int kDqk>
void ScoreRows(const typename T::QElem* q, int dqk, const KElem* const* k, int n4, int heads,
               float* s, Prefetcher* pf) {
  if constexpr (HB > 1) {
    if (heads < HB) return ScoreRows<T, KElem, HB - 1, kDqk>(q, dqk, k, n4, heads, s, pf);
  }
  for (int c = 0; c < n4; c += 4) {
    ScoreTile<T, KElem, HB, kDqk>(q, dqk, k + c, s + c, pf);
  }
}

template <class T, class KElem>
void Scores(const typename T::QElem* q, int group, int dqk, const KElem* const* k, int n4, float* s,
            Prefetcher* pf) {
  for (int h = 0; h < group; h += T::kQkHeads) {
    const int heads = group - h < T::kQkHeads ? group - h : T::kQkHeads;
    const typename T::QElem* qh = q + static_cast<int64_t>(h) * dqk;
    float* sh = s + h * kKeyBlock;
    // The GQA head dims get unrolled loops; they are short, so loop overhead would show.
    if (dqk == 64) {
      ScoreRows<T, KElem, T::kQkHeads, 64>(qh, dqk, k, n4, heads, sh, pf);
    } else if (dqk == 128) {
      ScoreRows<T, KElem, T::kQkHeads, 128>(qh, dqk, k, n4, heads, sh, pf);
    } else {
      ScoreRows<T, KElem, T::kQkHeads, 0>(qh, dqk, k, n4, heads, sh, pf);
    }
  }
}

template <class T, class KElem, int HB, int DB>
void PvTile(const float* p, int n, const KElem* const* v, int d0, float* o, int dv,
            Prefetcher* pf) {
  using V = typename T::V;
  V acc[HB][DB];
  for (int i = 0; i < HB; ++i) {
    for (int b = 0; b < DB; ++b) acc[i][b] = T::Load(o + i * dv + d0 + b * T::kLanes);
  }
  const bool fine = pf->memory_bound;
  if (!fine) pf->Step();
  for (int j = 0; j < n; ++j) {
    if (fine) pf->Step();
    V vv[DB];
    for (int b = 0; b < DB; ++b) vv[b] = T::Load(v[j] + d0 + b * T::kLanes);
    for (int i = 0; i < HB; ++i) {
      const V pij = T::Set1(p[i * kKeyBlock + j]);
      for (int b = 0; b < DB; ++b) acc[i][b] = T::Fma(pij, vv[b], acc[i][b]);
    }
  }
  for (int i = 0; i < HB; ++i) {
    for (int b = 0; b < DB; ++b) T::Store(o + i * dv + d0 + b * T::kLanes, acc[i][b]);
  }
}

template <class T, class KElem, int HB>
void PvRows(const float* p, int n, const KElem* const* v, int heads, float* o, int dv,
            Prefetcher* pf) {
  if constexpr (HB > 1) {
    if (heads < HB) return PvRows<T, KElem, HB - 1>(p, n, v, heads, o, dv, pf);
  }
  constexpr int kWide = 4 * T::kLanes;
  int d = 0;
  for (; d + kWide <= dv; d += kWide) {
    PvTile<T, KElem, HB, 4>(p, n, v, d, o, dv, pf);
  }
  for (; d < dv; d += T::kLanes) PvTile<T, KElem, HB, 1>(p, n, v, d, o, dv, pf);
}

template <class T>
void ScaleRow(float* x, int n, float f) {
  const typename T::V vf = T::Set1(f);
  for (int d = 0; d < n; d += T::kLanes) T::Store(x + d, T::Mul(T::Load(x + d), vf));
}

// A task's state in its scratch (KernelScratchFloats): Q prepared for the dot products, one
// block of scores of a KV head's group, the running max and sum per head, then what a kernel
// keeps besides (`rest`).
template <class T>
struct TaskScratch {
  typename T::QElem* q;
  float* s;     // [group, kKeyBlock]
  float* m;     // [heads]
  float* l;     // [heads]
  float* rest;  // what follows l
};

// Attention logit softcapping (KernelArgs::softcap > 0) on n scores in the kernels' base 2 (Q
// carries log2(e)): softcap * tanh(s / softcap) times log2(e) is c * tanh(s2 / c), c = softcap *
// log2(e). Scalar tanhf, so that every ISA gives the same bits.
inline void SoftcapScores(float* s, int n, float softcap) {
  if (softcap == 0.0f) return;
  const float c = softcap * kLog2e;
  for (int j = 0; j < n; ++j) s[j] = c * __builtin_tanhf(s[j] / c);
}

// Zeroes the task's O. An empty key range gets lse = -inf and false; otherwise Q is scaled by
// scale * log2(e) (the softmax runs in base 2) and the running max and sum are reset.
template <class T>
bool BeginTask(const KernelArgs& a, TaskScratch<T>* t, float shortfall) {
  const int heads = a.kv_heads * a.group;
  const int dqk = a.head_dim_qk;
  for (int64_t i = 0; i < static_cast<int64_t>(heads) * a.head_dim_v; i += T::kLanes) {
    T::Store(a.o + i, T::Zero());
  }
  if (a.key_begin >= a.key_end) {
    for (int h = 0; h < heads; ++h) a.lse[h] = -__builtin_inff();
    return false;
  }
  t->q = reinterpret_cast<typename T::QElem*>(a.scratch);
  t->s = a.scratch + static_cast<int64_t>(heads) * dqk;
  t->m = t->s + a.group * kKeyBlock;
  t->l = t->m + heads;
  t->rest = t->l + heads;
  for (int h = 0; h < heads; ++h) {
    T::PrepareQ(a.q + static_cast<int64_t>(h) * dqk, a.scale * kLog2e * shortfall,
                t->q + static_cast<int64_t>(h) * dqk, dqk);
    t->m[h] = -__builtin_inff();
    t->l[h] = 0.0f;
  }
  return true;
}

// One head's online-softmax step over a block of kKeyBlock scores (keys outside the block's
// range at -inf): the scores become the weights exp2(s - m_new) in place, the running sum takes
// their sum, and the head's O row is rescaled when the max grew.
template <class T>
__attribute__((always_inline)) inline void SoftmaxBlock(float* sg, float& mh, float& lh,
                                                        float* o_row, int dv) {
  using V = typename T::V;
  V vmax = T::Load(sg);
  for (int j = T::kLanes; j < kKeyBlock; j += T::kLanes) vmax = T::Max(vmax, T::Load(sg + j));
  const float block_max = T::ReduceMax(vmax);
  const float m_new = mh > block_max ? mh : block_max;
  V vsum = T::Zero();
  for (int j = 0; j < kKeyBlock; j += T::kLanes) {
    const V p = T::Exp2(T::Add(T::Load(sg + j), T::Set1(-m_new)));
    T::Store(sg + j, p);
    vsum = T::Add(vsum, p);
  }
  if (m_new > mh) {
    const float corr = __builtin_exp2f(mh - m_new);
    lh *= corr;
    ScaleRow<T>(o_row, dv, corr);
    mh = m_new;
  }
  lh += T::ReduceAdd(vsum);
}

// One head's end, from its running max m and sum l (l > 0) in base 2: o = acc / l (acc may be o
// itself; times the V widening's shortfall) and the natural lse = (m + log2 l) * ln 2.
template <class T>
void FinishHead(const float* acc, float m, float l, int dv, float* o, float* lse, float shortfall) {
  const typename T::V f = T::Set1(1.0f / l * shortfall);
  for (int d = 0; d < dv; d += T::kLanes) T::Store(o + d, T::Mul(T::Load(acc + d), f));
  *lse = (m + __builtin_log2f(l)) * kLn2;
}

// FinishHead for every head of the task.
template <class T>
void EndTask(const KernelArgs& a, const TaskScratch<T>& t, float shortfall) {
  const int dv = a.head_dim_v;
  for (int h = 0; h < a.kv_heads * a.group; ++h) {
    // l >= 1 here: the key that set the max contributes exp2(0).
    float* o = a.o + static_cast<int64_t>(h) * dv;
    FinishHead<T>(o, t.m[h], t.l[h], dv, o, a.lse + h, shortfall);
  }
}

template <class T, class KElem>
void Attend(const KernelArgs& a) {
  TaskScratch<T> t;
  constexpr float kShortfall = WidenShortfall<T, KElem>();
  if (!BeginTask<T>(a, &t, kShortfall)) return;
  const int group = a.group;
  const int dqk = a.head_dim_qk;
  const int dv = a.head_dim_v;
  const auto* q = t.q;
  float* s = t.s;
  const void* vbase = a.v != nullptr ? a.v : a.k;
  const int64_t k_row_bytes = a.k_row_stride * static_cast<int64_t>(sizeof(KElem));
  const int64_t v_row_bytes = a.v_row_stride * static_cast<int64_t>(sizeof(KElem));
  const KElem* k0[kKeyBlock];
  const KElem* v0[kKeyBlock];
  const KElem* kn[kKeyBlock];
  const KElem* vn[kKeyBlock];
  const KElem* kp[kKeyBlock];
  const KElem* vp[kKeyBlock];
  Prefetcher pf;
  pf.memory_bound = group <= kMemoryBoundMaxGroup;
  for (int kb = a.key_begin; kb < a.key_end; kb += kKeyBlock) {
    const int n = a.key_end - kb < kKeyBlock ? a.key_end - kb : kKeyBlock;
    const int n4 = (n + 3) / 4 * 4;
    const int next = kb + kKeyBlock;
    const int nn = next >= a.key_end              ? 0
                   : a.key_end - next < kKeyBlock ? a.key_end - next
                                                  : kKeyBlock;
    RowPtrs<KElem>(a.k, a, a.k_row_stride, next, nn, kn);
    RowPtrs<KElem>(vbase, a, a.v_row_stride, next, nn, vn);
    RowPtrs<KElem>(a.k, a, a.k_row_stride, kb, n, k0);
    RowPtrs<KElem>(vbase, a, a.v_row_stride, kb, n, v0);
    // K rows then V rows of the next block; for MLA (v null) the K rows are the V rows.
    pf.Add(kn, nn, k_row_bytes);
    if (a.v != nullptr) pf.Add(vn, nn, v_row_bytes);
    pf.Plan();
    // The KV heads of one key block in turn, so that the rows are read in address order.
    for (int kvh = 0; kvh < a.kv_heads; ++kvh) {
      for (int j = 0; j < n; ++j) {
        kp[j] = k0[j] + static_cast<int64_t>(kvh) * a.k_head_stride;
        vp[j] = v0[j] + static_cast<int64_t>(kvh) * a.v_head_stride;
      }
      // Padding keys repeat key 0; their weights are 0.
      for (int j = n; j < n4; ++j) {
        kp[j] = kp[0];
        vp[j] = vp[0];
      }
      const int h0 = kvh * group;
      float* o = a.o + static_cast<int64_t>(h0) * dv;
      Scores<T, KElem>(q + static_cast<int64_t>(h0) * dqk, group, dqk, kp, n4, s, &pf);
      for (int g = 0; g < group; ++g) {
        float* sg = s + g * kKeyBlock;
        SoftcapScores(sg, n, a.softcap);
        for (int j = n; j < kKeyBlock; ++j) sg[j] = -__builtin_inff();
        SoftmaxBlock<T>(sg, t.m[h0 + g], t.l[h0 + g], o + static_cast<int64_t>(g) * dv, dv);
      }
      if constexpr (T::kPairedPv) {
        T::PairedPv(s, n, vp, group, o, dv, &pf);
      } else {
        for (int g = 0; g < group; g += T::kPvHeads) {
          const int rows = group - g < T::kPvHeads ? group - g : T::kPvHeads;
          PvRows<T, KElem, T::kPvHeads>(s + g * kKeyBlock, n, vp, rows,
                                        o + static_cast<int64_t>(g) * dv, dv, &pf);
        }
      }
    }
    pf.Finish();
  }
  EndTask<T>(a, t, kShortfall);
}
