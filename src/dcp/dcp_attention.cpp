#include "ctxpar/dcp_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "compute/compute.h"
#include "ctxpar/dcp_rules.h"
#include "ctxpar/merge.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar {

namespace {

Status CheckOptions(const DcpOptions& o, Communicator* comm) {
  // The operator runs on the CPU, where fi_a2a cannot.
  CTXPAR_RETURN_IF_ERROR(CheckDcpRules(o.dcp_size, o.backend, o.replicate_q, /*cuda=*/false));
  const int tp = o.tp_size == 0 ? o.dcp_size : o.tp_size;
  if (o.num_heads < 1) {
    return InvalidArgument(
        fmt::format("DcpAttention: num_heads must be >= 1, got num_heads={}", o.num_heads));
  }
  CTXPAR_RETURN_IF_ERROR(CheckDcpDividesHeads(o.num_heads, o.dcp_size));
  CTXPAR_RETURN_IF_ERROR(CheckDcpDividesTp(tp, o.dcp_size));
  if (o.num_heads % tp != 0) {
    return InvalidArgument(fmt::format(
        "DcpAttention: num_heads must be divisible by tp_size, got num_heads={} and tp_size={}",
        o.num_heads, tp));
  }
  if (comm == nullptr || comm->size() != o.dcp_size) {
    return InvalidArgument(fmt::format(
        "DcpAttention: the DCP communicator must have dcp_size={} ranks, got {}", o.dcp_size,
        comm == nullptr ? std::string("none") : std::to_string(comm->size())));
  }
  if (o.head_dim_qk < 1 || o.head_dim_v < 1) {
    return InvalidArgument(
        fmt::format("DcpAttention: head_dim_qk and head_dim_v must be >= 1, got head_dim_qk={} and "
                    "head_dim_v={}",
                    o.head_dim_qk, o.head_dim_v));
  }
  if (!(o.scale > 0.0f) || !std::isfinite(o.scale)) {
    return InvalidArgument(
        fmt::format("DcpAttention: scale must be finite and > 0, got scale={}", o.scale));
  }
  if (!(o.softcap >= 0.0f) || !std::isfinite(o.softcap)) {
    return InvalidArgument(fmt::format(
        "DcpAttention: softcap must be finite and >= 0 (0: none), got softcap={}", o.softcap));
  }
  if (o.interleave_size < 1) {
    return InvalidArgument(fmt::format(
        "DcpAttention: interleave_size must be >= 1, got interleave_size={}", o.interleave_size));
  }
  if (o.exact && (o.split_kv_keys < 1 || (o.dcp_size > 1 && o.interleave_size % o.split_kv_keys))) {
    return InvalidArgument(fmt::format(
        "DcpAttention: the exact merge needs split_kv_keys >= 1 dividing interleave_size (its "
        "chunks the same keys on every layout), got split_kv_keys={} and interleave_size={}",
        o.split_kv_keys, o.interleave_size));
  }
  return Status::Ok();
}

}  // namespace

Expected<std::unique_ptr<DcpAttention>> DcpAttention::Create(const DcpOptions& options,
                                                             Communicator* dcp_comm) {
  CTXPAR_RETURN_IF_ERROR(CheckOptions(options, dcp_comm));
  CTXPAR_ASSIGN_OR_RETURN(std::unique_ptr<Combiner> combiner,
                          Combiner::Create(dcp_comm, options.backend, options.o_wire));
  const int tp = options.tp_size == 0 ? options.dcp_size : options.tp_size;
  DcpOptions o = options;
  if (o.compute != nullptr) o.pool = o.compute->host_threads();
  return std::unique_ptr<DcpAttention>(
      new DcpAttention(o, dcp_comm, options.num_heads / tp, std::move(combiner)));
}

Status DcpAttention::Partial(const PartialAttentionParams& p) {
  return options_.compute != nullptr ? options_.compute->PartialAttention(p)
                                     : PartialAttentionCpu(p);
}

Status DcpAttention::Forward(const float* q, const PagedKv& kv, const int32_t* row_seq,
                             const int32_t* row_kv_len, int rows, float* o, float* lse,
                             const int32_t* row_kv_start) {
  if (rows < 0)
    return InvalidArgument(fmt::format("DcpAttention: rows must be >= 0, got {}", rows));
  if (rows > 0 && (q == nullptr || o == nullptr || row_kv_len == nullptr)) {
    return InvalidArgument("DcpAttention: q, o and row_kv_len must be non-null");
  }
  if (kv.head_dim_qk != options_.head_dim_qk || kv.head_dim_v != options_.head_dim_v) {
    return InvalidArgument(fmt::format(
        "DcpAttention: the KV cache has head_dim_qk={} and head_dim_v={}, the operator was built "
        "for head_dim_qk={} and head_dim_v={}",
        kv.head_dim_qk, kv.head_dim_v, options_.head_dim_qk, options_.head_dim_v));
  }
  const int n = options_.dcp_size, hn = h_ * n;
  const size_t dq = options_.head_dim_qk, dv = options_.head_dim_v;
  const float* q_group = q;
  if (!options_.replicate_q && n > 1) {
    // The all-gather yields [n, rows, h, dq]; attention wants [rows, n*h, dq].
    const size_t count = static_cast<size_t>(rows) * h_ * dq;
    q_gathered_.resize(count * n);
    CTXPAR_RETURN_IF_ERROR(comm_->AllGather(q, q_gathered_.data(), count, DataType::kF32));
    q_group_.resize(count * n);
    for (int j = 0; j < n; ++j) {
      for (int row = 0; row < rows; ++row) {
        std::copy_n(q_gathered_.data() + j * count + row * h_ * dq, h_ * dq,
                    q_group_.data() + (static_cast<size_t>(row) * hn + j * h_) * dq);
      }
    }
    q_group = q_group_.data();
  }
  PartialAttentionParams p;
  p.q = q_group;
  p.num_rows = rows;
  p.num_q_heads = hn;
  p.row_seq = row_seq;
  p.row_kv_len = row_kv_len;
  p.row_kv_start = row_kv_start;
  p.scale = options_.scale;
  p.softcap = options_.softcap;
  p.kv = kv;
  p.num_threads = options_.num_threads;
  p.pool = options_.pool;
  p.split_kv_keys = options_.split_kv_keys;
  if (options_.exact) {
    p.chunks = &chunks_;
    CTXPAR_RETURN_IF_ERROR(Partial(p));
    return MergeExact(rows, o, lse);
  }
  if (n == 1) {
    lse_partial_.resize(static_cast<size_t>(rows) * hn);
    p.o = o;
    p.lse = lse != nullptr ? lse : lse_partial_.data();
    return Partial(p);
  }
  o_partial_.resize(static_cast<size_t>(rows) * hn * dv);
  lse_partial_.resize(static_cast<size_t>(rows) * hn);
  p.o = o_partial_.data();
  p.lse = lse_partial_.data();
  CTXPAR_RETURN_IF_ERROR(Partial(p));
  return combiner_->Combine({rows, h_, options_.head_dim_v}, o_partial_.data(), lse_partial_.data(),
                            o, lse);
}

Status DcpAttention::MergeExact(int rows, float* o, float* lse) {
  const int n = options_.dcp_size, hn = h_ * n, dv = options_.head_dim_v;
  const ChunkStates& c = chunks_;
  // Over the rows on the pool's threads, each writing only its rows.
  auto for_rows = [&](const std::function<void(int)>& fn) {
    if (options_.pool == nullptr) {
      for (int row = 0; row < rows; ++row) fn(row);
      return;
    }
    options_.pool->ParallelFor(rows, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) fn(static_cast<int>(row));
    });
  };
  // (m, e) of each (row, head) of the group: the largest lse and |O| of its chunks.
  refs_.assign(static_cast<size_t>(rows) * hn * 2, -INFINITY);
  for_rows([&](int row) {
    for (int64_t k = c.first[row]; k < c.first[row + 1]; ++k) {
      for (int h = 0; h < hn; ++h) {
        float* ref = refs_.data() + (static_cast<size_t>(row) * hn + h) * 2;
        const float l = SanitizeLse(c.lse[k * hn + h]);
        if (l == -INFINITY) continue;
        ref[0] = std::max(ref[0], l);
        // Eight running maxima, so that the compares do not wait on each other; exact in any
        // order.
        const float* part = c.o.data() + (k * hn + h) * dv;
        float e[8] = {ref[1], ref[1], ref[1], ref[1], ref[1], ref[1], ref[1], ref[1]};
        int d = 0;
        for (; d + 8 <= dv; d += 8) {
          for (int j = 0; j < 8; ++j) e[j] = std::max(e[j], std::fabs(part[d + j]));
        }
        for (; d < dv; ++d) e[0] = std::max(e[0], std::fabs(part[d]));
        ref[1] = *std::max_element(e, e + 8);
      }
    }
  });
  if (n > 1) {
    CTXPAR_RETURN_IF_ERROR(
        comm_->AllReduce(refs_.data(), refs_.data(), refs_.size(), DataType::kF32, ReduceOp::kMax));
  }
  sums_.assign(static_cast<size_t>(rows) * hn * (dv + 1), 0.0);
  for_rows([&](int row) {
    for (int64_t k = c.first[row]; k < c.first[row + 1]; ++k) {
      for (int h = 0; h < hn; ++h) {
        const size_t rh = static_cast<size_t>(row) * hn + h;
        ExactAdd(c.o.data() + (k * hn + h) * dv, c.lse[k * hn + h], dv, refs_[2 * rh],
                 refs_[2 * rh + 1], sums_.data() + rh * (dv + 1));
      }
    }
  });
  if (n > 1) {
    CTXPAR_RETURN_IF_ERROR(
        comm_->AllReduce(sums_.data(), sums_.data(), sums_.size(), DataType::kF64, ReduceOp::kSum));
  }
  const int first = n > 1 ? comm_->rank() * h_ : 0;
  for_rows([&](int row) {
    for (int h = 0; h < h_; ++h) {
      const size_t rh = static_cast<size_t>(row) * hn + first + h;
      const float merged =
          ExactFinish(sums_.data() + rh * (dv + 1), dv, refs_[2 * rh], refs_[2 * rh + 1],
                      o + (static_cast<size_t>(row) * h_ + h) * dv);
      if (lse != nullptr) lse[static_cast<size_t>(row) * h_ + h] = merged;
    }
  });
  return Status::Ok();
}

}  // namespace ctxpar
