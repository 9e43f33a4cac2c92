// Split-KV GQA decode attention over a paged bf16 KV cache (CUDA cores; memory-bound).
//
// One thread block per (split, KV head, head group, row). The block streams the split's keys of
// one KV head once and applies each to the up-to-kMaxGroup query heads that share it, so the KV
// bytes are read once per head group. A key row of D bf16 is read by D/8 consecutive lanes with
// one 16-byte load each; the lanes of a warp cover 32/(D/8) keys at a time and kUnroll such key
// sets are loaded before the first use, to keep enough bytes in flight. Each lane group keeps
// its own base-2 online-softmax state (m, l, acc) per head; the groups are combined once at the
// end through shared memory.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention_kernels.h"
#include "cuda/device_util.cuh"

namespace ctxpar::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kUnroll = 4;

template <int D, int kGroup>
__global__ void __launch_bounds__(kThreads) GqaAttentionKernel(const AttentionKernelParams p) {
  constexpr int kLanes = D / 8;              // lanes per key row
  constexpr int kSlots = kThreads / kLanes;  // key rows in flight per step, per unroll
  constexpr int kStep = kSlots * kUnroll;    // keys per loop iteration
  __shared__ float m_s[kSlots][kGroup];
  __shared__ float l_s[kSlots][kGroup];
  __shared__ float out_s[kGroup][D];

  const int split = blockIdx.x;
  const int group_count = (p.num_q_heads / p.num_kv_heads + kGroup - 1) / kGroup;
  const int kv_head = blockIdx.y / group_count;
  const int group_first = (blockIdx.y % group_count) * kGroup;
  const int heads_per_kv = p.num_q_heads / p.num_kv_heads;
  const int heads_here = min(kGroup, heads_per_kv - group_first);
  const int row = blockIdx.z;
  const int seq = p.row_seq != nullptr ? p.row_seq[row] : row;
  const int len = p.row_kv_len[row];
  // Splits are absolute chunks of keys; a row sees those of its range [row_kv_start, len).
  const int start = p.row_kv_start != nullptr ? p.row_kv_start[row] : 0;
  const int begin = max(start, split * p.keys_per_split);
  const int end = min(len, split * p.keys_per_split + p.keys_per_split);

  const int slot = threadIdx.x / kLanes;
  const int lane_in_key = threadIdx.x % kLanes;
  const int dim0 = lane_in_key * 8;
  const int first_head = kv_head * heads_per_kv + group_first;

  float q[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g < heads_here) {
      const float4* src = reinterpret_cast<const float4*>(
          p.q + (static_cast<int64_t>(row) * p.num_q_heads + first_head + g) * D + dim0);
      const float4 a = src[0];
      const float4 b = src[1];
      q[g][0] = a.x * p.scale_log2;
      q[g][1] = a.y * p.scale_log2;
      q[g][2] = a.z * p.scale_log2;
      q[g][3] = a.w * p.scale_log2;
      q[g][4] = b.x * p.scale_log2;
      q[g][5] = b.y * p.scale_log2;
      q[g][6] = b.z * p.scale_log2;
      q[g][7] = b.w * p.scale_log2;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] = 0.0f;
    }
  }

  float m[kGroup];
  float l[kGroup];
  float acc[kGroup][8];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }

  const int32_t* pages = p.block_table + static_cast<int64_t>(seq) * p.max_pages_per_seq;
  const int64_t row_stride = static_cast<int64_t>(p.num_kv_heads) * D;  // elements per slot
  // The trip count depends only on the block, so every lane reaches every shuffle below.
  for (int base = begin; base < end; base += kStep) {
    uint4 kr[kUnroll];
    uint4 vr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kSlots + slot;
      if (j < end) {
        const int64_t page = pages[j / p.page_size];
        const int64_t off =
            (page * p.page_size + j % p.page_size) * row_stride + kv_head * D + dim0;
        kr[u] = *reinterpret_cast<const uint4*>(p.k + off);
        vr[u] = *reinterpret_cast<const uint4*>(p.v + off);
      } else {
        kr[u] = make_uint4(0, 0, 0, 0);
        vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
    float s[kUnroll][kGroup];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      Bf16x8ToFloat(kr[u], kf);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) dot = fmaf(q[g][i], kf[i], dot);
          // Butterfly over the lanes of this key row: every lane ends with the same sum.
#pragma unroll
        for (int off = kLanes / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        s[u][g] = (base + u * kSlots + slot < end) ? dot : -INFINITY;
      }
    }
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) m_new = fmaxf(m_new, s[u][g]);
      if (m_new == -INFINITY) continue;  // no key for this lane group yet
      const float alpha = exp2f(m[g] - m_new);
      l[g] *= alpha;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] *= alpha;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float pw = exp2f(s[u][g] - m_new);
        float vf[8];
        Bf16x8ToFloat(vr[u], vf);
        l[g] += pw;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pw, vf[i], acc[g][i]);
      }
      m[g] = m_new;
    }
  }

  for (int i = threadIdx.x; i < kGroup * D; i += kThreads) (&out_s[0][0])[i] = 0.0f;
  if (lane_in_key == 0) {
#pragma unroll
    for (int g = 0; g < kGroup; ++g) {
      m_s[slot][g] = m[g];
      l_s[slot][g] = l[g];
    }
  }
  __syncthreads();
  float m_all[kGroup];
  float l_all[kGroup];
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    float mx = -INFINITY;
    for (int k = 0; k < kSlots; ++k) mx = fmaxf(mx, m_s[k][g]);
    float sum = 0.0f;
    if (mx != -INFINITY) {
      for (int k = 0; k < kSlots; ++k) sum += l_s[k][g] * exp2f(m_s[k][g] - mx);
    }
    m_all[g] = mx;
    l_all[g] = sum;
    if (g < heads_here && mx != -INFINITY && m[g] != -INFINITY) {
      const float w = exp2f(m[g] - mx);
#pragma unroll
      for (int i = 0; i < 8; ++i) atomicAdd(&out_s[g][dim0 + i], acc[g][i] * w);
    }
  }
  __syncthreads();

  const int64_t out_row = (static_cast<int64_t>(split) * p.num_rows + row) * p.num_q_heads;
#pragma unroll
  for (int g = 0; g < kGroup; ++g) {
    if (g >= heads_here) continue;
    const float inv = l_all[g] > 0.0f ? 1.0f / l_all[g] : 0.0f;
    float* dst = p.o + (out_row + first_head + g) * D;
    for (int d = threadIdx.x; d < D; d += kThreads) dst[d] = out_s[g][d] * inv;
    if (threadIdx.x == 0) p.lse[out_row + first_head + g] = NaturalLse(m_all[g], l_all[g]);
  }
}

template <int D, int kGroup>
cudaError_t Launch(const AttentionKernelParams& p, cudaStream_t stream) {
  const int heads_per_kv = p.num_q_heads / p.num_kv_heads;
  const int group_count = (heads_per_kv + kGroup - 1) / kGroup;
  const dim3 grid(p.num_splits, p.num_kv_heads * group_count, p.num_rows);
  GqaAttentionKernel<D, kGroup><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchForDim(const AttentionKernelParams& p, cudaStream_t stream) {
  const int heads_per_kv = p.num_q_heads / p.num_kv_heads;
  if (heads_per_kv <= 1) return Launch<D, 1>(p, stream);
  if (heads_per_kv <= 2) return Launch<D, 2>(p, stream);
  if (heads_per_kv <= 4) return Launch<D, 4>(p, stream);
  return Launch<D, 8>(p, stream);
}

}  // namespace

cudaError_t LaunchGqaAttention(const AttentionKernelParams& p, cudaStream_t stream) {
  return p.head_dim == 64 ? LaunchForDim<64>(p, stream) : LaunchForDim<128>(p, stream);
}

}  // namespace ctxpar::cuda
