// One layer's attention for the Llama forward: the rank's rows of a KvCache and DcpAttention
// (the partial attention of the widened head set over the rank's shard, then the DCP combine).
//
// Shapes (fp32, row-major): q [n, q_heads, head_dim] where q_heads = heads * dcp_size with
// replicated Q, else heads; o [n, heads, head_dim]. The n rows are the tokens at positions
// [p0, p0 + n) of the cache's sequence, already appended (causal: row t sees positions
// <= p0 + t).
//
// Thread safety: used by the rank's thread only; Run is collective over the DCP group.
#pragma once

#include <memory>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/dcp_attention.h"
#include "ctxpar/kv_cache.h"
#include "ctxpar/llama.h"
#include "ctxpar/status.h"

namespace ctxpar::model {

class DcpAttend {
 public:
  // dcp is the DCP group's communicator (size parallel.dcp_size), not owned.
  // num_heads is the model's query heads; the backend and Q path come from `parallel`.
  // pool (not owned, may be null) runs the attention's tasks; Run is called by its driver.
  static Expected<std::unique_ptr<DcpAttend>> Create(Communicator* dcp,
                                                     const LlamaParallel& parallel, int num_heads,
                                                     int head_dim, ThreadPool* pool = nullptr);
  Status Run(const KvCache& cache, int seq, int p0, int n, const float* q, float* o);

 private:
  explicit DcpAttend(std::unique_ptr<DcpAttention> attention) : attention_(std::move(attention)) {}

  std::unique_ptr<DcpAttention> attention_;
  std::vector<int32_t> row_seq_, row_len_;
};

}  // namespace ctxpar::model
