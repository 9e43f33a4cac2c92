// Split-KV absorbed-MLA decode attention on CUDA cores: the straightforward reference path.
//
// One thread block per (split, tile of 16 query heads, row); the only KV head is shared by all
// query heads. The block loads kTileKeys key rows (576 bf16: 512 latent + 64 rope) into shared
// memory, computes the 16 x kTileKeys scores, updates a base-2 online softmax per head, and
// accumulates P * V with V = the latent prefix of each row. Thread t owns output dims 2t, 2t+1
// of all 16 heads. The tensor-core path (attention_mla_mma.cu) is the fast one; this one takes
// any head count and is the cross-check for it.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention_kernels.h"
#include "cuda/device_util.cuh"

namespace ctxpar::cuda {
namespace {

constexpr int kDqk = 576;
constexpr int kDv = 512;
constexpr int kHeads = 16;  // query heads per block
constexpr int kTileKeys = 32;
constexpr int kThreads = 256;  // = kDv / 2: one output dim pair per thread
// An odd number of 32-bit words per row keeps the score loop free of bank conflicts.
constexpr int kRowWords = kDqk / 2 + 1;

struct Smem {
  float q[kHeads][kDqk];
  uint32_t kv[kTileKeys][kRowWords];  // bf16 pairs
  float p[kHeads][kTileKeys];
  float alpha[kHeads];
  float m[kHeads];
  float l[kHeads];
};

__global__ void __launch_bounds__(kThreads) MlaAttentionSimtKernel(const AttentionKernelParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);

  const int split = blockIdx.x;
  const int head0 = blockIdx.y * kHeads;
  const int heads_here = min(kHeads, p.num_q_heads - head0);
  const int row = blockIdx.z;
  const int seq = p.row_seq != nullptr ? p.row_seq[row] : row;
  const int len = p.row_kv_len[row];
  // Splits are absolute chunks of keys; a row sees those of its range [row_kv_start, len).
  const int start = p.row_kv_start != nullptr ? p.row_kv_start[row] : 0;
  const int begin = max(start, split * p.keys_per_split);
  const int end = min(len, split * p.keys_per_split + p.keys_per_split);
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  for (int i = tid; i < kHeads * kDqk; i += kThreads) {
    const int h = i / kDqk;
    (&sm.q[0][0])[i] =
        h < heads_here
            ? p.q[(static_cast<int64_t>(row) * p.num_q_heads + head0 + h) * kDqk + i % kDqk] *
                  p.scale_log2
            : 0.0f;
  }
  if (tid < kHeads) {
    sm.m[tid] = -INFINITY;
    sm.l[tid] = 0.0f;
  }
  float acc[kHeads][2];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) acc[h][0] = acc[h][1] = 0.0f;

  const int32_t* pages = p.block_table + static_cast<int64_t>(seq) * p.max_pages_per_seq;
  for (int base = begin; base < end; base += kTileKeys) {
    __syncthreads();  // the previous tile is fully consumed (and q, m, l are set on entry)
    constexpr int kChunks = kDqk / 8;  // 16-byte chunks per row
    for (int i = tid; i < kTileKeys * kChunks; i += kThreads) {
      const int t = i / kChunks;
      const int c = i % kChunks;
      const int j = base + t;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (j < end) {
        const int64_t page = pages[j / p.page_size];
        v = *reinterpret_cast<const uint4*>(p.k + (page * p.page_size + j % p.page_size) * kDqk +
                                            c * 8);
      }
      uint32_t* dst = &sm.kv[t][c * 4];
      dst[0] = v.x;
      dst[1] = v.y;
      dst[2] = v.z;
      dst[3] = v.w;
    }
    __syncthreads();

    // Scores: warp w computes heads w and w + 8; lane t is key t.
    for (int h = warp; h < kHeads; h += kThreads / 32) {
      float dot = 0.0f;
      for (int w = 0; w < kDqk / 2; ++w) {
        const uint32_t pair = sm.kv[lane][w];
        dot = fmaf(sm.q[h][2 * w], Bf16Lo(pair), dot);
        dot = fmaf(sm.q[h][2 * w + 1], Bf16Hi(pair), dot);
      }
      const float s = base + lane < end ? dot : -INFINITY;
      float tile_max = s;
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, off));
      const float m_old = sm.m[h];
      const float m_new = fmaxf(m_old, tile_max);  // finite: the tile has at least one key
      const float pw = exp2f(s - m_new);
      float sum = pw;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      sm.p[h][lane] = pw;
      __syncwarp();
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);
        sm.alpha[h] = alpha;
        sm.l[h] = sm.l[h] * alpha + sum;
        sm.m[h] = m_new;
      }
    }
    __syncthreads();

#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      acc[h][0] *= sm.alpha[h];
      acc[h][1] *= sm.alpha[h];
    }
    for (int t = 0; t < kTileKeys; ++t) {
      const uint32_t pair = sm.kv[t][tid];  // V dims 2*tid, 2*tid + 1
      const float v0 = Bf16Lo(pair);
      const float v1 = Bf16Hi(pair);
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float pw = sm.p[h][t];
        acc[h][0] = fmaf(pw, v0, acc[h][0]);
        acc[h][1] = fmaf(pw, v1, acc[h][1]);
      }
    }
  }
  __syncthreads();

  const int64_t out_row = (static_cast<int64_t>(split) * p.num_rows + row) * p.num_q_heads;
  for (int h = 0; h < heads_here; ++h) {
    const float l = sm.l[h];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float2* dst = reinterpret_cast<float2*>(p.o + (out_row + head0 + h) * kDv) + tid;
    *dst = make_float2(acc[h][0] * inv, acc[h][1] * inv);
    if (tid == 0) p.lse[out_row + head0 + h] = NaturalLse(sm.m[h], l);
  }
}

}  // namespace

cudaError_t LaunchMlaAttentionCudaCore(const AttentionKernelParams& p, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem));
  cudaError_t err = cudaFuncSetAttribute(MlaAttentionSimtKernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(p.num_splits, (p.num_q_heads + kHeads - 1) / kHeads, p.num_rows);
  MlaAttentionSimtKernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace ctxpar::cuda
