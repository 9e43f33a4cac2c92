#include "models/batch_attention.h"

namespace ctxpar::model {

DcpOptions EngineDcpOptions(const EngineConfig& config, int tp_size, compute::Compute& compute) {
  DcpOptions o;
  o.dcp_size = config.dcp_size;
  o.backend = config.dcp_comm_backend;
  o.replicate_q = config.dcp_replicate_q_proj;
  o.interleave_size = config.dcp_kv_cache_interleave_size;
  o.tp_size = tp_size;
  o.compute = &compute;
  o.split_kv_keys = kSplitKvKeys;
  if (config.deterministic) {
    o.exact = true;
    o.split_kv_keys = kDeterministicChunkKeys;
  }
  return o;
}

Expected<std::unique_ptr<BatchAttention>> BatchAttention::Create(const DcpOptions& options,
                                                                 Communicator* dcp) {
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<DcpAttention> attention,
                          DcpAttention::Create(options, dcp));
  return std::unique_ptr<BatchAttention>(new BatchAttention(std::move(attention)));
}

Status BatchAttention::Run(const Batch& batch, const KvPool& pool, int layer, const float* q,
                           float* o, int window, float* lse) {
  row_seq_.clear();
  row_start_.clear();
  row_len_.clear();
  for (const BatchSeq& s : batch.seqs) {
    for (int32_t t = 0; t < s.num_tokens; ++t) {
      const LocalRange rows = pool.VisibleRange(layer, s.pos0 + t, window);
      row_seq_.push_back(s.slot);
      row_start_.push_back(static_cast<int32_t>(rows.begin));
      row_len_.push_back(static_cast<int32_t>(rows.end));
    }
  }
  return attention_->Forward(q, pool.View(layer), row_seq_.data(), row_len_.data(),
                             static_cast<int>(row_seq_.size()), o, lse, row_start_.data());
}

}  // namespace ctxpar::model
