#include "models/llama_attention.h"

#include <cmath>

#include "ctxpar/combine.h"

namespace ctxpar::model {

Expected<std::unique_ptr<DcpAttend>> DcpAttend::Create(Communicator* dcp,
                                                       const LlamaParallel& parallel, int num_heads,
                                                       int head_dim, ThreadPool* pool) {
  CTXPAR_ASSIGN_OR_RETURN(CombineBackend backend, ParseCombineBackend(parallel.dcp_comm_backend));
  DcpOptions o;
  o.dcp_size = parallel.dcp_size;
  o.backend = backend;
  o.replicate_q = parallel.replicate_q_proj;
  o.num_heads = num_heads;
  o.tp_size = parallel.tp_size;
  o.head_dim_qk = head_dim;
  o.head_dim_v = head_dim;
  o.scale = 1.0f / std::sqrt(float(head_dim));
  o.num_threads = parallel.num_threads;
  o.pool = pool;
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<DcpAttention> attention, DcpAttention::Create(o, dcp));
  return std::unique_ptr<DcpAttend>(new DcpAttend(std::move(attention)));
}

Status DcpAttend::Run(const KvCache& cache, int seq, int p0, int n, const float* q, float* o) {
  row_seq_.assign(n, seq);
  row_len_.resize(n);
  for (int t = 0; t < n; ++t) row_len_[t] = cache.VisibleRows(p0 + t);
  return attention_->Forward(q, cache.View(), row_seq_.data(), row_len_.data(), n, o);
}

}  // namespace ctxpar::model
