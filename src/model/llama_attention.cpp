#include "model/llama_attention.h"

#include <cmath>
#include <cstring>

#include "ctxpar/attention.h"
#include "ctxpar/merge.h"

namespace ctxpar::model {

Expected<std::unique_ptr<DcpAttend>> DcpAttend::Create(Communicator* dcp,
                                                       const LlamaParallel& parallel, int heads,
                                                       int kv_heads, int head_dim,
                                                       int num_threads) {
  std::unique_ptr<DcpAttend> a(new DcpAttend());
  a->dcp_ = dcp;
  a->n_dcp_ = parallel.dcp_size;
  a->rank_ = dcp != nullptr ? dcp->rank() : 0;
  a->replicated_ = parallel.replicate_q_proj;
  a->heads_ = heads;
  a->kv_heads_ = kv_heads;
  a->head_dim_ = head_dim;
  a->threads_ = num_threads;
  return a;
}

Status DcpAttend::Run(const KvCache& cache, int seq, int p0, int n, const float* q, float* o) {
  const int hw = heads_ * n_dcp_;
  const int hd = head_dim_;
  const std::size_t row = std::size_t(hw) * hd;
  const float* qw = q;
  if (n_dcp_ > 1 && !replicated_) {
    const std::size_t mine = std::size_t(n) * heads_ * hd;
    gathered_.resize(mine * n_dcp_);
    CTXPAR_RETURN_IF_ERROR(dcp_->AllGather(q, gathered_.data(), mine, DataType::kF32));
    qw_.resize(std::size_t(n) * row);
    for (int r = 0; r < n_dcp_; ++r) {
      for (int t = 0; t < n; ++t) {
        std::memcpy(qw_.data() + t * row + std::size_t(r) * heads_ * hd,
                    gathered_.data() + r * mine + std::size_t(t) * heads_ * hd,
                    sizeof(float) * heads_ * hd);
      }
    }
    qw = qw_.data();
  }
  row_seq_.assign(n, seq);
  row_len_.resize(n);
  for (int t = 0; t < n; ++t) row_len_[t] = cache.VisibleRows(p0 + t);
  o_part_.resize(std::size_t(n) * row);
  lse_.resize(std::size_t(n) * hw);
  PartialAttentionParams p;
  p.q = qw;
  p.o = n_dcp_ == 1 ? o : o_part_.data();
  p.lse = lse_.data();
  p.num_rows = n;
  p.num_q_heads = hw;
  p.row_seq = row_seq_.data();
  p.row_kv_len = row_len_.data();
  p.scale = 1.0f / std::sqrt(float(hd));
  p.kv = cache.View();
  p.num_threads = threads_;
  CTXPAR_RETURN_IF_ERROR(PartialAttentionCpu(p));
  if (n_dcp_ == 1) return Status::Ok();
  o_all_.resize(o_part_.size() * n_dcp_);
  lse_all_.resize(lse_.size() * n_dcp_);
  CTXPAR_RETURN_IF_ERROR(
      dcp_->AllGather(o_part_.data(), o_all_.data(), o_part_.size(), DataType::kF32));
  CTXPAR_RETURN_IF_ERROR(
      dcp_->AllGather(lse_.data(), lse_all_.data(), lse_.size(), DataType::kF32));
  std::vector<float> scale(n_dcp_);
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < heads_; ++h) {
      const int hg = rank_ * heads_ + h;
      MergeScales(lse_all_.data() + std::size_t(t) * hw + hg, n_dcp_, n * hw, scale.data());
      float* out = o + (std::size_t(t) * heads_ + h) * hd;
      for (int d = 0; d < hd; ++d) {
        float acc = 0.0f;
        for (int r = 0; r < n_dcp_; ++r) {
          acc += scale[r] * o_all_[r * o_part_.size() + t * row + std::size_t(hg) * hd + d];
        }
        out[d] = acc;
      }
    }
  }
  return Status::Ok();
}

}  // namespace ctxpar::model
