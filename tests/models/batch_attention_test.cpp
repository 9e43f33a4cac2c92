// One layer's attention over a Batch of several sequences (models/batch_attention.h): prefill
// chunks and decode rows of different sequences in one call, each attending causally to its own
// KV slot, sharded over DCP ranks, against a float64 softmax attention per sequence. Llama's
// layouts: 9 query heads, 3 KV heads, tp 3 (dcp 1, 3; replicated Q) and tp 9 (each KV head
// replicated over 3 ranks, or sharded over a DCP group of 3), with fp32 and bf16 pools (the
// reference then attends over the K/V rounded to bf16, as the pool stores them). Within 2e-5,
// except a bf16 pool on the avx512_bf16 and amx paths, which also round Q and the softmax weights
// to bf16 (attention.h): within 1e-2 there. With a window group, the layer's rows see only the
// window (t - W, t] of their position, the pool giving pages back as the windows slide; a window
// group that DCP does not shard holds every position on every rank, each rank's partial state is
// then the whole window's, and the merge of equal states is that state.
#include "models/batch_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/cpu_features.h"
#include "ctxpar/dtype.h"

namespace ctxpar::model {
namespace {

constexpr int kHeads = 9, kKvHeads = 3, kDim = 64;

struct Seq {
  std::vector<float> q, k, v;  // [len, heads, dim], [len, kv heads, dim] x 2
};

// o of query head h at position t of `s`: softmax_{lo <= j <= t}(q.k_j / 8) v_j, in float64,
// with lo = 0, or t - window + 1 with a window.
double Reference(const Seq& s, int t, int h, int d, int window) {
  const int g = h / (kHeads / kKvHeads);
  const int lo = window > 0 ? std::max(0, t - window + 1) : 0;
  std::vector<double> w(t + 1, -1e300);
  double m = -1e300;
  for (int j = lo; j <= t; ++j) {
    double dot = 0.0;
    for (int e = 0; e < kDim; ++e) {
      dot += double(s.q[(std::size_t(t) * kHeads + h) * kDim + e]) *
             s.k[(std::size_t(j) * kKvHeads + g) * kDim + e];
    }
    w[j] = dot / 8.0;
    m = std::max(m, w[j]);
  }
  double z = 0.0, o = 0.0;
  for (double& x : w) z += x = std::exp(x - m);
  for (int j = lo; j <= t; ++j) o += w[j] / z * s.v[(std::size_t(j) * kKvHeads + g) * kDim + d];
  return o;
}

struct Case {
  int tp, dcp;
  bool replicate;
  CombineBackend backend;
  DataType dtype = DataType::kF32;
  int window = 0;              // > 0: the layer is in a window group of this many positions
  bool window_sharded = true;  // false: every rank stores the whole window group
};

TEST(BatchAttention, SequencesOfABatchSeeTheirOwnShardedSlotsCausally) {
  // Three sequences; step 1 prefills 0 (37 tokens) and 1 (9 of 20); step 2 decodes 0, prefills
  // the rest of 1 and all of 2 (5); step 3 decodes all three.
  const int lengths[] = {38, 21, 6};
  struct Step {
    int seq, pos0, n;
  };
  const std::vector<std::vector<Step>> steps = {
      {{0, 0, 37}, {1, 0, 9}}, {{0, 37, 1}, {1, 9, 11}, {2, 0, 5}}, {{2, 5, 1}, {1, 20, 1}}};
  const Expected<CpuIsa> selected = SelectCpuIsa();
  ASSERT_TRUE(selected.ok()) << selected.status().ToString();
  const CpuIsa isa = *selected;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Seq> seqs(3);
  for (int s = 0; s < 3; ++s) {
    seqs[s].q.resize(std::size_t(lengths[s]) * kHeads * kDim);
    seqs[s].k.resize(std::size_t(lengths[s]) * kKvHeads * kDim);
    seqs[s].v.resize(seqs[s].k.size());
    for (float& x : seqs[s].q) x = normal(rng);
    for (float& x : seqs[s].k) x = normal(rng);
    for (float& x : seqs[s].v) x = normal(rng);
  }
  std::vector<Seq> rounded = seqs;
  for (Seq& s : rounded) {
    for (std::vector<float>* kv : {&s.k, &s.v}) {
      for (float& x : *kv) x = Bf16ToFloat(FloatToBf16(x));
    }
  }
  for (const Case& c :
       {Case{3, 1, false, CombineBackend::kAgRs}, Case{3, 3, false, CombineBackend::kAgRs},
        Case{3, 3, true, CombineBackend::kA2a}, Case{3, 3, true, CombineBackend::kShmA2a},
        Case{9, 1, false, CombineBackend::kAgRs}, Case{9, 3, true, CombineBackend::kA2a},
        Case{3, 3, true, CombineBackend::kA2a, DataType::kBF16},
        Case{9, 3, false, CombineBackend::kAgRs, DataType::kBF16},
        Case{3, 1, false, CombineBackend::kAgRs, DataType::kF32, 5},
        Case{3, 3, false, CombineBackend::kAgRs, DataType::kF32, 7},
        Case{9, 3, true, CombineBackend::kA2a, DataType::kBF16, 2},
        Case{3, 3, true, CombineBackend::kShmA2a, DataType::kF32, 20},
        Case{3, 3, false, CombineBackend::kAgRs, DataType::kF32, 9, false}}) {
    const std::vector<Seq>& ref = c.dtype == DataType::kBF16 ? rounded : seqs;
    const double tol = c.dtype == DataType::kBF16 && isa >= CpuIsa::kAvx512Bf16 ? 1e-2 : 2e-5;
    const int h = kHeads / c.tp;
    // out[rank][step] = o [rows, h, dim]
    std::vector<std::vector<std::vector<float>>> out(c.tp);
    Status st = RunInProcess(c.tp, [&](Communicator& tp) -> Status {
      const int r = tp.rank(), group = r / c.dcp;
      CTXPAR_ASSIGN_OR_RETURN(auto dcp, tp.Split(group, r));
      const int group_heads = h * c.dcp, per_kv = kHeads / kKvHeads;
      const int kv_first = group * group_heads / per_kv;
      const int kv_heads = std::max(1, group_heads / per_kv);
      // With a window, layer 1 is the window group beside the full layer 0, and is the one run.
      const int layer = c.window > 0 ? 1 : 0;
      std::vector<KvGroupSpec> groups;
      if (c.window > 0) groups = {{{0}, 0, true}, {{1}, c.window, c.window_sharded}};
      CTXPAR_ASSIGN_OR_RETURN(KvPool pool, KvPool::Create({.num_layers = layer + 1,
                                                           .num_kv_heads = kv_heads,
                                                           .head_dim_k = kDim,
                                                           .head_dim_v = kDim,
                                                           .dtype = c.dtype,
                                                           .format = KvPageFormat::kTiles16,
                                                           .page_size = 16,
                                                           .dcp_size = c.dcp,
                                                           .dcp_rank = r % c.dcp,
                                                           .num_pages = 12,
                                                           .window_pages = 12,
                                                           .max_slots = 3,
                                                           .max_pages_per_slot = 4,
                                                           .groups = groups}));
      for (int s = 0; s < 3; ++s) CTXPAR_RETURN_IF_ERROR(pool.AcquireSlot().status());
      CTXPAR_ASSIGN_OR_RETURN(auto attend, BatchAttention::Create({.dcp_size = c.dcp,
                                                                   .backend = c.backend,
                                                                   .replicate_q = c.replicate,
                                                                   .num_heads = kHeads,
                                                                   .tp_size = c.tp,
                                                                   .head_dim_qk = kDim,
                                                                   .head_dim_v = kDim,
                                                                   .scale = 0.125f,
                                                                   .num_threads = 1,
                                                                   .split_kv_keys = 16},
                                                                  dcp.get()));
      const int q_heads = c.replicate ? group_heads : h;
      const int q_first = c.replicate ? group * group_heads : r * h;
      for (const std::vector<Step>& step : steps) {
        Batch batch;
        std::vector<float> q;
        for (const Step& s : step) {
          std::vector<int32_t> ids(s.n, 0);
          batch.Add(s.seq, s.pos0, ids.data(), s.n);
          std::vector<float> ks, vs;
          for (int t = s.pos0; t < s.pos0 + s.n; ++t) {
            for (int g = kv_first; g < kv_first + kv_heads; ++g) {
              const float* kr = seqs[s.seq].k.data() + (std::size_t(t) * kKvHeads + g) * kDim;
              const float* vr = seqs[s.seq].v.data() + (std::size_t(t) * kKvHeads + g) * kDim;
              ks.insert(ks.end(), kr, kr + kDim);
              vs.insert(vs.end(), vr, vr + kDim);
            }
            const float* qr = seqs[s.seq].q.data() + (std::size_t(t) * kHeads + q_first) * kDim;
            q.insert(q.end(), qr, qr + std::size_t(q_heads) * kDim);
          }
          CTXPAR_RETURN_IF_ERROR(pool.Slide(s.seq, s.pos0));
          CTXPAR_RETURN_IF_ERROR(pool.Reserve(s.seq, s.pos0 + s.n));
          CTXPAR_RETURN_IF_ERROR(pool.Write(layer, s.seq, s.pos0, s.n, ks.data(), vs.data()));
        }
        std::vector<float> o(std::size_t(batch.num_tokens()) * h * kDim);
        CTXPAR_RETURN_IF_ERROR(attend->Run(batch, pool, layer, q.data(), o.data()));
        out[r].push_back(std::move(o));
      }
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (std::size_t k = 0; k < steps.size(); ++k) {
      int row = 0;
      for (const Step& s : steps[k]) {
        for (int t = 0; t < s.n; ++t, ++row) {
          for (int head = 0; head < kHeads; ++head) {
            const std::vector<float>& o = out[head / h][k];
            for (int d = 0; d < kDim; d += 3) {
              ASSERT_NEAR(o[(std::size_t(row) * h + head % h) * kDim + d],
                          Reference(ref[s.seq], s.pos0 + t, head, d, c.window), tol)
                  << "tp " << c.tp << " dcp " << c.dcp << " window " << c.window << " "
                  << DataTypeName(c.dtype) << " step " << k << " seq " << s.seq << " pos "
                  << s.pos0 + t << " head " << head;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ctxpar::model
