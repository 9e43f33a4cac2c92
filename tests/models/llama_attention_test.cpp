// The Llama layer attention (model/llama_attention.h) over a KV cache sharded by owner, for DCP
// sizes 1 and 3, default and replicated Q, against a float64 causal softmax attention.
#include "models/llama_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ctxpar::model {
namespace {

constexpr int kHeads = 9, kKvHeads = 3, kDim = 64;

struct Case {
  int dcp;
  bool replicate;
  const char* backend;
};

// o[t][h] = softmax_j<=p0+t (q.k_j / 8) v_j over every head, in float64.
std::vector<double> Reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int len, int p0, int n) {
  std::vector<double> o(std::size_t(n) * kHeads * kDim, 0.0);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < kHeads; ++h) {
      const int g = h / (kHeads / kKvHeads);
      std::vector<double> s(p0 + t + 1);
      double m = -1e300;
      for (int j = 0; j <= p0 + t; ++j) {
        double dot = 0.0;
        for (int d = 0; d < kDim; ++d) {
          dot += double(q[(std::size_t(t) * kHeads + h) * kDim + d]) *
                 k[(std::size_t(j) * kKvHeads + g) * kDim + d];
        }
        s[j] = dot / 8.0;
        m = std::max(m, s[j]);
      }
      double z = 0.0;
      for (double& x : s) z += x = std::exp(x - m);
      for (int j = 0; j <= p0 + t; ++j) {
        for (int d = 0; d < kDim; ++d) {
          o[(std::size_t(t) * kHeads + h) * kDim + d] +=
              s[j] / z * v[(std::size_t(j) * kKvHeads + g) * kDim + d];
        }
      }
    }
  }
  (void)len;
  return o;
}

TEST(LlamaAttention, ShardedCacheMatchesFloat64) {
  const int prompt = 37, decode = 3, len = prompt + decode;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(std::size_t(len) * kHeads * kDim), k(std::size_t(len) * kKvHeads * kDim),
      v(k.size());
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (const Case& c : {Case{1, false, "ag_rs"}, Case{3, false, "ag_rs"}, Case{3, true, "a2a"},
                        Case{3, false, "a2a"}, Case{3, true, "shm_a2a"}}) {
    // tp = 3: rank r owns heads [3r, 3r + 3); its DCP group (dcp = 3) or itself (dcp = 1)
    // attends for the widened heads.
    std::vector<std::vector<float>> out(3, std::vector<float>(std::size_t(len) * 3 * kDim));
    Status st = RunInProcess(3, [&](Communicator& tp) -> Status {
      CTXPAR_ASSIGN_OR_RETURN(auto dcp, tp.Split(tp.rank() / c.dcp, tp.rank()));
      LlamaParallel par{.tp_size = 3,
                        .dcp_size = c.dcp,
                        .dcp_comm_backend = c.backend,
                        .replicate_q_proj = c.replicate};
      const int r = tp.rank();
      const int kv_heads = c.dcp;  // the group's kv heads: one per tp rank in it
      const int kv_first = c.dcp > 1 ? 0 : r;
      KvCacheOptions o{.dcp_size = c.dcp,
                       .dcp_rank = r % c.dcp,
                       .page_size = 4,
                       .num_pages = 16,
                       .max_seqs = 1,
                       .max_pages_per_seq = 16,
                       .num_kv_heads = kv_heads,
                       .head_dim_qk = kDim,
                       .head_dim_v = kDim};
      CTXPAR_ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(o));
      CTXPAR_ASSIGN_OR_RETURN(int seq, cache.AddSequence());
      CTXPAR_ASSIGN_OR_RETURN(auto attend, DcpAttend::Create(dcp.get(), par, kHeads, kDim));
      const int q_heads = c.replicate ? 9 : 3;
      const int q_first = c.replicate ? 0 : 3 * r;
      int p0 = 0;
      for (int step : {prompt, 1, 1, 1}) {
        std::vector<float> ks, vs, qs;
        for (int t = p0; t < p0 + step; ++t) {
          for (int g = kv_first; g < kv_first + kv_heads; ++g) {
            for (int d = 0; d < kDim; ++d) {
              ks.push_back(k[(std::size_t(t) * kKvHeads + g) * kDim + d]);
              vs.push_back(v[(std::size_t(t) * kKvHeads + g) * kDim + d]);
            }
          }
          for (int h = q_first; h < q_first + q_heads; ++h) {
            for (int d = 0; d < kDim; ++d)
              qs.push_back(q[(std::size_t(t) * kHeads + h) * kDim + d]);
          }
        }
        CTXPAR_RETURN_IF_ERROR(cache.Append(seq, ks.data(), vs.data(), step));
        CTXPAR_RETURN_IF_ERROR(attend->Run(cache, seq, p0, step, qs.data(),
                                           out[r].data() + std::size_t(p0) * 3 * kDim));
        p0 += step;
      }
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    const std::vector<double> ref = Reference(q, k, v, len, 0, len);
    for (int t = 0; t < len; ++t) {
      for (int h = 0; h < kHeads; ++h) {
        for (int d = 0; d < kDim; ++d) {
          ASSERT_NEAR(out[h / 3][(std::size_t(t) * 3 + h % 3) * kDim + d],
                      ref[(std::size_t(t) * kHeads + h) * kDim + d], 2e-5)
              << "dcp " << c.dcp << " " << c.backend << " replicate " << c.replicate << " t " << t
              << " h " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ctxpar::model
