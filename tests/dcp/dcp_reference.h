// The DcpAttention check shared by the in-process tests (any N, one thread per rank) and the MPI
// tests (one process per rank): a seeded problem, a float64 single-rank reference written with
// plain loops, one rank's Forward through the real KV cache and combine, the comparison at the
// stated tolerance and the bytes each collective moved against the formulas below.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/dcp_attention.h"
#include "ctxpar/dtype.h"
#include "ctxpar/kv_pool.h"

namespace ctxpar::testing {

struct DcpCase {
  std::string name;
  int n = 1;
  CombineBackend backend = CombineBackend::kAgRs;
  bool replicate_q = false;
  int interleave = 1;
  bool mla = false;  // absorbed MLA: 576 / 512, one KV head; else GQA with head_dim
  int head_dim = 64;
  DataType kv_dtype = DataType::kF32;
  DataType o_wire = DataType::kF32;
  std::vector<int> lengths;  // tokens per sequence
  int prefill_rows = 0;      // 0: decode (one row per sequence); else the last rows of each
  int tp_mult = 1;           // tp_size = tp_mult * n
  int h = 2;                 // query heads per rank
  int kv_heads = 2;          // GQA KV heads of the group (a divisor of h * n)
  int window = 0;            // > 0: a sliding window (row t sees t - window < p <= t)
  float softcap = 0.0f;      // > 0: scores s -> softcap * tanh(s / softcap) (Gemma 2)
  bool exact = false;        // DcpOptions::exact, with split_kv_keys
  int split_kv_keys = 0;
  unsigned seed = 0;  // 0: one drawn from the case's shape
};

inline void PrintTo(const DcpCase& c, std::ostream* os) { *os << c.name; }

// Tolerances, relative to max(1, |reference|): fp32 KV and fp32 wire are fp32 arithmetic over
// at most a few hundred keys; with bf16 KV the kernel may round Q and the softmax weights to bf16
// (attention.h), and a bf16 wire rounds the partial O: 8 bits of mantissa.
inline double Tolerance(const DcpCase& c) {
  return (c.kv_dtype == DataType::kBF16 || c.o_wire == DataType::kBF16) ? 1e-2 : 1e-5;
}

struct DcpProblem {
  int dq = 0, dv = 0, kvh = 0, hn = 0;
  std::vector<std::vector<float>> k, v;  // per sequence [L, kvh, dq] / [L, kvh, dv] (v: GQA)
  std::vector<int32_t> row_seq;
  std::vector<int64_t> row_pos;  // global position of each query row
  std::vector<float> q;          // [rows, hn, dq]
  std::vector<double> ref_o;     // [rows, hn, dv]
  std::vector<double> ref_lse;   // [rows, hn]
  float scale = 0;
};

inline DcpProblem MakeProblem(const DcpCase& c) {
  DcpProblem p;
  p.dq = c.mla ? 576 : c.head_dim;
  p.dv = c.mla ? 512 : c.head_dim;
  p.hn = c.h * c.n;
  p.kvh = c.mla ? 1 : c.kv_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.mla ? 192 : c.head_dim));
  std::mt19937 rng(c.seed != 0 ? c.seed
                               : 1234 + c.n * 7 + c.head_dim + c.interleave * 31 + (c.mla ? 5 : 0));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int len : c.lengths) {
    std::vector<float> k(static_cast<size_t>(len) * p.kvh * p.dq), v;
    // bf16 KV: the values are bf16 numbers to begin with, so storing them is exact and the
    // reference sees what the kernel reads.
    auto draw = [&] {
      const float x = dist(rng);
      return c.kv_dtype == DataType::kBF16 ? Bf16ToFloat(FloatToBf16(x)) : x;
    };
    for (float& x : k) x = draw();
    if (!c.mla) {
      v.resize(static_cast<size_t>(len) * p.kvh * p.dv);
      for (float& x : v) x = draw();
    }
    p.k.push_back(std::move(k));
    p.v.push_back(std::move(v));
  }
  for (int s = 0; s < static_cast<int>(c.lengths.size()); ++s) {
    const int len = c.lengths[s];
    const int first = c.prefill_rows == 0 ? len - 1 : std::max(0, len - c.prefill_rows);
    for (int t = first; t < len; ++t) {
      p.row_seq.push_back(s);
      p.row_pos.push_back(t);
    }
  }
  const int rows = static_cast<int>(p.row_seq.size());
  p.q.resize(static_cast<size_t>(rows) * p.hn * p.dq);
  for (float& x : p.q) x = dist(rng);
  // The reference: causal softmax attention of each row over positions [lo, t], in double, with
  // lo = 0, or t - window + 1 with a window.
  p.ref_o.assign(static_cast<size_t>(rows) * p.hn * p.dv, 0.0);
  p.ref_lse.assign(static_cast<size_t>(rows) * p.hn, 0.0);
  const int group = p.hn / p.kvh;
  for (int i = 0; i < rows; ++i) {
    const std::vector<float>& k = p.k[p.row_seq[i]];
    const std::vector<float>& v = c.mla ? k : p.v[p.row_seq[i]];
    const int v_stride = c.mla ? p.dq : p.dv;
    const int64_t t = p.row_pos[i];
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, t - c.window + 1) : 0;
    for (int g = 0; g < p.hn; ++g) {
      const int kh = g / group;
      const float* q = p.q.data() + (static_cast<size_t>(i) * p.hn + g) * p.dq;
      std::vector<double> s(t + 1, -std::numeric_limits<double>::infinity());
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = lo; j <= t; ++j) {
        double dot = 0;
        const float* kr = k.data() + (j * p.kvh + kh) * p.dq;
        for (int d = 0; d < p.dq; ++d) dot += static_cast<double>(q[d]) * kr[d];
        s[j] = dot * p.scale;
        if (c.softcap > 0.0f) s[j] = c.softcap * std::tanh(s[j] / c.softcap);
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      double* o = p.ref_o.data() + (static_cast<size_t>(i) * p.hn + g) * p.dv;
      for (int64_t j = lo; j <= t; ++j) {
        const float* vr = v.data() + (j * p.kvh + kh) * v_stride;
        for (int d = 0; d < p.dv; ++d) o[d] += s[j] / sum * vr[d];
      }
      p.ref_lse[static_cast<size_t>(i) * p.hn + g] = m + std::log(sum);
    }
  }
  return p;
}

// Per call, bytes this rank sends to the other ranks, by collective:
//   Q all-gather (unless replicated): (N-1) * rows * h * dq * 4
//   ag_rs: LSE all-gather (N-1) * rows * N*h * 4  +  reduce-scatter (N-1) * rows * h * dv * 4
//   a2a / shm_a2a: (N-1) * rows * h * (dv * wire_bytes + 4)
struct ExpectedBytes {
  uint64_t all_gather = 0, reduce_scatter = 0, all_to_all = 0, shared_window = 0;
};
inline ExpectedBytes DesignBytes(const DcpCase& c, const DcpProblem& p, int rows) {
  ExpectedBytes e;
  if (c.n == 1) return e;
  const uint64_t peers = c.n - 1, r = rows, h = c.h;
  if (!c.replicate_q) e.all_gather += peers * r * h * p.dq * 4;
  const uint64_t wire = c.o_wire == DataType::kBF16 ? 2 : 4;
  switch (c.backend) {
    case CombineBackend::kAgRs:
      e.all_gather += peers * r * c.n * h * 4;
      e.reduce_scatter = peers * r * h * p.dv * 4;
      break;
    case CombineBackend::kA2a:
      e.all_to_all = peers * r * h * (p.dv * wire + 4);
      break;
    case CombineBackend::kShmA2a:
      e.shared_window = peers * r * h * (p.dv * wire + 4);
      break;
    case CombineBackend::kFiA2a:
      break;
  }
  return e;
}

// Runs rank comm.rank()'s part of the case and checks its output and its byte counters.
// Runs the case on this rank and checks it against the float64 reference (and, but for the exact
// merge, the design's bytes); `all_o` / `all_lse` ([rows, hn, dv] / [rows, hn]), when given,
// receive this rank's heads.
inline void RunRankAndCheck(const DcpCase& c, const DcpProblem& p, Communicator& comm,
                            std::vector<float>* all_o = nullptr,
                            std::vector<float>* all_lse = nullptr) {
  const int me = comm.rank();
  const int max_len = *std::max_element(c.lengths.begin(), c.lengths.end());
  const int page = std::max(16, c.interleave);
  const int pages_per_seq = max_len / (page * c.n) + 1;
  // With a window, layer 1 is a window group beside the full layer 0, and the rows read it.
  const int layer = c.window > 0 ? 1 : 0;
  std::vector<KvGroupSpec> groups;
  if (c.window > 0) groups = {{{0}, 0, true}, {{1}, c.window, true}};
  auto cache = KvPool::Create({.num_layers = layer + 1,
                               .num_kv_heads = p.kvh,
                               .head_dim_k = p.dq,
                               .head_dim_v = p.dv,
                               .v_in_k = c.mla,
                               .dtype = c.kv_dtype,
                               // The layouts the engine uses: tiles for GQA, rows for MLA.
                               .format = c.mla ? KvPageFormat::kRows : KvPageFormat::kTiles16,
                               .page_size = page,
                               .dcp_size = c.n,
                               .dcp_rank = me,
                               .interleave_size = c.interleave,
                               .num_pages = pages_per_seq * static_cast<int>(c.lengths.size()),
                               .window_pages = pages_per_seq * static_cast<int>(c.lengths.size()),
                               .max_slots = static_cast<int>(c.lengths.size()),
                               .max_pages_per_slot = pages_per_seq,
                               .groups = groups});
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    const auto slot = static_cast<int32_t>(s);
    ASSERT_EQ(*cache->AcquireSlot(), slot);
    // A prefill of all but the last two tokens, then two decode writes.
    const int len = c.lengths[s], pre = std::max(0, len - 2);
    const float* k = p.k[s].data();
    const float* v = c.mla ? nullptr : p.v[s].data();
    const size_t ks = static_cast<size_t>(p.kvh) * p.dq, vs = static_cast<size_t>(p.kvh) * p.dv;
    ASSERT_TRUE(cache->Reserve(slot, len).ok());
    ASSERT_TRUE(cache->Write(layer, slot, 0, pre, k, v).ok());
    for (int t = pre; t < len; ++t) {
      ASSERT_TRUE(cache->Write(layer, slot, t, 1, k + t * ks, c.mla ? nullptr : v + t * vs).ok());
    }
  }
  // The window slides to the first row of each sequence: the pages before it go back.
  for (size_t i = 0; i < p.row_seq.size() && c.window > 0; ++i) {
    if (i == 0 || p.row_seq[i] != p.row_seq[i - 1]) {
      ASSERT_TRUE(cache->Slide(p.row_seq[i], p.row_pos[i]).ok());
    }
  }
  const int rows = static_cast<int>(p.row_seq.size());
  std::vector<int32_t> row_kv_len(rows), row_kv_start(rows, 0);
  for (int i = 0; i < rows; ++i) {
    row_kv_len[i] =
        c.prefill_rows == 0
            ? static_cast<int32_t>(cache->layout().LocalLength(me, c.lengths[p.row_seq[i]]))
            : cache->VisibleRows(p.row_pos[i]);
    if (c.window > 0) {
      const LocalRange range = cache->VisibleRange(layer, p.row_pos[i]);
      ASSERT_EQ(range.end, row_kv_len[i]);
      row_kv_start[i] = static_cast<int32_t>(range.begin);
    }
  }
  DcpOptions options{.dcp_size = c.n,
                     .backend = c.backend,
                     .replicate_q = c.replicate_q,
                     .interleave_size = c.interleave,
                     .num_heads = c.h * c.n * c.tp_mult,
                     .tp_size = c.n * c.tp_mult,
                     .head_dim_qk = p.dq,
                     .head_dim_v = p.dv,
                     .scale = p.scale,
                     .softcap = c.softcap,
                     .o_wire = c.o_wire,
                     .num_threads = 1,
                     .split_kv_keys = c.split_kv_keys,
                     .exact = c.exact};
  auto attn = DcpAttention::Create(options, &comm);
  ASSERT_TRUE(attn.ok()) << attn.status().ToString();
  ASSERT_EQ((*attn)->heads_per_rank(), c.h);
  // Own heads [me*h, (me+1)*h) of q, or the whole group's when replicated.
  std::vector<float> q;
  if (c.replicate_q) {
    q = p.q;
  } else {
    for (int i = 0; i < rows; ++i) {
      const float* src = p.q.data() + (static_cast<size_t>(i) * p.hn + me * c.h) * p.dq;
      q.insert(q.end(), src, src + c.h * p.dq);
    }
  }
  std::vector<float> o(static_cast<size_t>(rows) * c.h * p.dv, NAN), lse(rows * c.h, NAN);
  comm.ResetCounters();
  // Twice: the second call reuses buffers (and the other half of the shm_a2a window).
  for (int call = 0; call < 2; ++call) {
    const Status st =
        (*attn)->Forward(q.data(), cache->View(layer), p.row_seq.data(), row_kv_len.data(), rows,
                         o.data(), lse.data(), c.window > 0 ? row_kv_start.data() : nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  const double tol = Tolerance(c);
  double worst = 0;
  for (int i = 0; i < rows; ++i) {
    for (int hh = 0; hh < c.h; ++hh) {
      const size_t g = static_cast<size_t>(i) * p.hn + me * c.h + hh;
      const size_t mine = static_cast<size_t>(i) * c.h + hh;
      const double lse_err =
          std::abs(lse[mine] - p.ref_lse[g]) / std::max(1.0, std::abs(p.ref_lse[g]));
      worst = std::max(worst, lse_err);
      for (int d = 0; d < p.dv; ++d) {
        const double ref = p.ref_o[g * p.dv + d];
        const double err = std::abs(o[mine * p.dv + d] - ref) / std::max(1.0, std::abs(ref));
        worst = std::max(worst, std::isnan(err) ? 1e9 : err);
      }
    }
  }
  EXPECT_LE(worst, tol) << c.name << " rank " << me;
  for (int i = 0; i < rows && all_o != nullptr; ++i) {
    for (int hh = 0; hh < c.h; ++hh) {
      const size_t g = static_cast<size_t>(i) * p.hn + me * c.h + hh;
      const size_t mine = static_cast<size_t>(i) * c.h + hh;
      std::copy_n(o.data() + mine * p.dv, p.dv, all_o->data() + g * p.dv);
      (*all_lse)[g] = lse[mine];
    }
  }
  if (c.exact) {
    // The Q all-gather (unless replicated), then one max and one sum all-reduce per call.
    const CommCounters& k = comm.counters();
    const uint64_t q_ag = (c.n > 1 && !c.replicate_q) ? 1 : 0;
    EXPECT_EQ(k[Collective::kAllGather].calls, 2 * q_ag) << c.name;
    EXPECT_EQ(k[Collective::kAllReduce].calls, c.n > 1 ? 4u : 0u) << c.name;
    EXPECT_EQ(k.Total().calls, c.n > 1 ? 2 * (q_ag + 2) : 0u) << c.name;
    return;
  }
  const ExpectedBytes e = DesignBytes(c, p, rows);
  const CommCounters& k = comm.counters();
  EXPECT_EQ(k[Collective::kAllGather].bytes_sent, 2 * e.all_gather) << c.name;
  EXPECT_EQ(k[Collective::kReduceScatter].bytes_sent, 2 * e.reduce_scatter) << c.name;
  EXPECT_EQ(k[Collective::kAllToAllV].bytes_sent, 2 * e.all_to_all) << c.name;
  EXPECT_EQ(k[Collective::kSharedWindow].bytes_sent, 2 * e.shared_window) << c.name;
  EXPECT_EQ(k.Total().bytes_sent,
            2 * (e.all_gather + e.reduce_scatter + e.all_to_all + e.shared_window))
      << c.name;
  // The number of collectives per call: the point of a2a is one exchange.
  const uint64_t q_ag = (c.n > 1 && !c.replicate_q) ? 1 : 0;
  if (c.n > 1 && c.backend == CombineBackend::kAgRs) {
    EXPECT_EQ(k[Collective::kAllGather].calls, 2 * (q_ag + 1));
    EXPECT_EQ(k[Collective::kReduceScatter].calls, 2u);
  }
  if (c.n > 1 && c.backend == CombineBackend::kA2a) {
    EXPECT_EQ(k[Collective::kAllToAllV].calls, 2u);
    EXPECT_EQ(k.Total().calls, 2 * (q_ag + 1));
  }
  if (c.n > 1 && c.backend == CombineBackend::kShmA2a) {
    EXPECT_EQ(k[Collective::kSharedWindow].calls, 2u);
    EXPECT_EQ(k.Total().calls, 2 * (q_ag + 1));
  }
  if (c.n == 1) EXPECT_EQ(k.Total().calls, 0u);
}

}  // namespace ctxpar::testing
