// One layer's attention for the Llama forward: partial attention of the rank's widened head set
// over its KV shard, then the DCP combine, giving the rank's own heads.
//
// Shapes (fp32, row-major): q [n, q_heads, head_dim] where q_heads = heads * dcp_size with
// replicated Q, else heads (gathered over the DCP group here); o [n, heads, head_dim]. The n
// rows are the tokens at positions [p0, p0 + n) of the cache's sequence, already appended.
//
// Thread safety: used by the rank's thread only; Run is collective over the DCP group.
#pragma once

#include <memory>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/kv_cache.h"
#include "ctxpar/llama.h"
#include "ctxpar/status.h"

namespace ctxpar::model {

class DcpAttend {
 public:
  // dcp is null when parallel.dcp_size == 1.
  static Expected<std::unique_ptr<DcpAttend>> Create(Communicator* dcp,
                                                     const LlamaParallel& parallel, int heads,
                                                     int kv_heads, int head_dim, int num_threads);
  Status Run(const KvCache& cache, int seq, int p0, int n, const float* q, float* o);

 private:
  DcpAttend() = default;

  Communicator* dcp_ = nullptr;
  int n_dcp_ = 1;
  int rank_ = 0;
  bool replicated_ = false;
  int heads_ = 0;
  int kv_heads_ = 0;
  int head_dim_ = 0;
  int threads_ = 1;
  std::vector<float> qw_, gathered_, o_part_, lse_, o_all_, lse_all_;
  std::vector<int32_t> row_seq_, row_len_;
};

}  // namespace ctxpar::model
