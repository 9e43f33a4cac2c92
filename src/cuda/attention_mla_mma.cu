// Split-KV absorbed-MLA decode attention on tensor cores (mma.sync m16n8k16, bf16 in, fp32 acc).
//
// One thread block per (kTiles tiles of 16 query heads, split, row), 4 warps per head tile; the
// tiles of a block share its key tiles in shared memory (kTiles = 2 when the head count allows:
// half the L2 traffic of one tile per block at 128 heads). blockIdx.x is the head group, so the
// blocks that read the same keys run side by side and share them through L2.
// Keys come in tiles of kTileKeys rows (576 bf16: 512 latent + 64 rope), copied to shared
// memory with cp.async two stages deep (the next tile loads while this one is computed).
// Per tile:
//   S = Q K^T   (16 heads x 32 keys, k = 576): warp w computes the 8 keys [8w, 8w + 8).
//   base-2 online softmax; the row maxima are exchanged through shared memory, so every warp
//   holds the same running max and rescales with the same factor.
//   O += P V    (16 heads x 512 dims, k = 32 keys): warp w owns dims [128w, 128w + 128), its
//   64 fp32 accumulators stay in registers for the whole split.
// Fragment layouts are PTX's for mma.m16n8k16 (.row.col); ldmatrix loads A and B, with .trans
// for V (stored key-major, needed dim-major). Q is rounded to bf16 after scaling, P to bf16
// before the P V product (as FlashAttention does); the row sums use the fp32 P.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention_kernels.h"
#include "cuda/device_util.cuh"

namespace ctxpar::cuda {
namespace {

constexpr int kDqk = 576;
constexpr int kDv = 512;
constexpr int kHeads = 16;
constexpr int kTileKeys = 32;
constexpr int kWarps = 4;  // per head tile
constexpr int kThreadsPerTile = kWarps * 32;
constexpr int kKeysPerWarp = kTileKeys / kWarps;  // 8: one n8 tile of S
constexpr int kDimsPerWarp = kDv / kWarps;        // 128: 16 n8 tiles of O
// Row strides in bf16 elements: 16-byte aligned rows whose 8-row ldmatrix phases hit 8
// distinct 16-byte bank groups (stride = 4 words mod 32 words).
constexpr int kKvStride = kDqk + 8;
constexpr int kPStride = kTileKeys + 8;

template <int kTiles>
struct Smem {
  uint16_t kv[2][kTileKeys][kKvStride];
  uint16_t q[kTiles * kHeads][kKvStride];
  uint16_t p[kTiles * kHeads][kPStride];
  float row_max[kTiles][kWarps][kHeads];
  float row_sum[kTiles][kWarps][kHeads];
};

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  // src-size 0 zero-fills the 16 bytes: keys past the end must be zeros, not stale bytes, as
  // 0 * NaN would poison the P V product.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddr(smem)));
}

__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int kTiles>
__global__ void __launch_bounds__(kTiles* kThreadsPerTile, kTiles == 1 ? 2 : 1)
    MlaAttentionMmaKernel(const AttentionKernelParams p) {
  constexpr int kThreads = kTiles * kThreadsPerTile;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem<kTiles>& sm = *reinterpret_cast<Smem<kTiles>*>(smem_raw);

  const int head0 = blockIdx.x * kHeads * kTiles;
  const int split = blockIdx.y;
  const int row = blockIdx.z;
  const int seq = p.row_seq != nullptr ? p.row_seq[row] : row;
  const int len = p.row_kv_len[row];
  // Splits are absolute chunks of keys; a row sees those of its range [row_kv_start, len).
  const int start = p.row_kv_start != nullptr ? p.row_kv_start[row] : 0;
  const int begin = max(start, split * p.keys_per_split);
  const int end = min(len, split * p.keys_per_split + p.keys_per_split);
  const int num_tiles = end > begin ? (end - begin + kTileKeys - 1) / kTileKeys : 0;
  const int tid = threadIdx.x;
  const int tile_h = tid / kThreadsPerTile;  // this warp's head tile
  const int hr = tile_h * kHeads;            // its first row of q and p
  const int warp = (tid % kThreadsPerTile) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;  // fragment row (and row + 8)
  const int t = lane % 4;  // fragment column pair

  const int32_t* pages = p.block_table + static_cast<int64_t>(seq) * p.max_pages_per_seq;
  auto load_tile = [&](int tile, int stage) {
    constexpr int kChunks = kDqk / 8;  // 16-byte chunks per key row
    const int tile_base = begin + tile * kTileKeys;
    for (int i = tid; i < kTileKeys * kChunks; i += kThreads) {
      const int r = i / kChunks;
      const int c = i % kChunks;
      const int j = tile_base + r;
      const bool valid = j < end;
      const uint16_t* src = p.k;
      if (valid) {
        const int64_t page = pages[j / p.page_size];
        src = p.k + (page * p.page_size + j % p.page_size) * kDqk + c * 8;
      }
      CpAsync16(&sm.kv[stage][r][c * 8], src, valid);
    }
    CpAsyncCommit();
  };
  if (num_tiles > 0) load_tile(0, 0);

  const float* q_src = p.q + (static_cast<int64_t>(row) * p.num_q_heads + head0) * kDqk;
  for (int i = tid; i < kTiles * kHeads * kDqk / 2; i += kThreads) {
    const int h = i / (kDqk / 2);
    const int d = (i % (kDqk / 2)) * 2;
    const float2 v = *reinterpret_cast<const float2*>(q_src + h * kDqk + d);
    *reinterpret_cast<uint32_t*>(&sm.q[h][d]) = PackBf16x2(v.x * p.scale_log2, v.y * p.scale_log2);
  }

  float acc[kDimsPerWarp / 8][4];
#pragma unroll
  for (int n = 0; n < kDimsPerWarp / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY};  // rows g and g + 8
  float l_part[2] = {0.0f, 0.0f};           // over this thread's key columns only

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < num_tiles) {
      load_tile(tile + 1, stage ^ 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();  // this tile (and, on the first, q) is visible to every warp

    // S for keys [8w, 8w + 8): A = Q rows, B = K rows (k = dims), two k16 steps per B load.
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int key0 = warp * kKeysPerWarp;
#pragma unroll 2
    for (int k0 = 0; k0 < kDqk; k0 += 32) {
      uint32_t b[4];
      LdMatrixX4(b, &sm.kv[stage][key0 + lane % 8][k0 + 8 * (lane / 8)]);
      uint32_t a[4];
      LdMatrixX4(a, &sm.q[hr + lane % 8 + 8 * ((lane / 8) % 2)][k0 + 8 * (lane / 16)]);
      Mma16816(s, a, b[0], b[1]);
      LdMatrixX4(a, &sm.q[hr + lane % 8 + 8 * ((lane / 8) % 2)][k0 + 16 + 8 * (lane / 16)]);
      Mma16816(s, a, b[2], b[3]);
    }
    const int j0 = begin + tile * kTileKeys + key0 + 2 * t;
    if (j0 >= end) s[0] = s[2] = -INFINITY;
    if (j0 + 1 >= end) s[1] = s[3] = -INFINITY;

    float mx[2] = {fmaxf(s[0], s[1]), fmaxf(s[2], s[3])};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    if (t == 0) {
      sm.row_max[tile_h][warp][g] = mx[0];
      sm.row_max[tile_h][warp][g + 8] = mx[1];
    }
    __syncthreads();

    float alpha[2];
    float pw[4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) tile_max = fmaxf(tile_max, sm.row_max[tile_h][w][g + 8 * r]);
      const float m_new = fmaxf(m_run[r], tile_max);  // finite: the tile has a key
      alpha[r] = exp2f(m_run[r] - m_new);
      pw[2 * r] = exp2f(s[2 * r] - m_new);
      pw[2 * r + 1] = exp2f(s[2 * r + 1] - m_new);
      l_part[r] = l_part[r] * alpha[r] + pw[2 * r] + pw[2 * r + 1];
      m_run[r] = m_new;
    }
    *reinterpret_cast<uint32_t*>(&sm.p[hr + g][key0 + 2 * t]) = PackBf16x2(pw[0], pw[1]);
    *reinterpret_cast<uint32_t*>(&sm.p[hr + g + 8][key0 + 2 * t]) = PackBf16x2(pw[2], pw[3]);
#pragma unroll
    for (int n = 0; n < kDimsPerWarp / 8; ++n) {
      acc[n][0] *= alpha[0];
      acc[n][1] *= alpha[0];
      acc[n][2] *= alpha[1];
      acc[n][3] *= alpha[1];
    }
    __syncthreads();  // P is visible

    // O[:, dims of this warp] += P V: A = P (16 x 16 keys), B = V rows read transposed.
    const int dim0 = warp * kDimsPerWarp;
#pragma unroll
    for (int kk = 0; kk < kTileKeys; kk += 16) {
      uint32_t a[4];
      LdMatrixX4(a, &sm.p[hr + lane % 8 + 8 * ((lane / 8) % 2)][kk + 8 * (lane / 16)]);
#pragma unroll
      for (int n = 0; n < kDimsPerWarp / 8; n += 2) {
        uint32_t b[4];
        LdMatrixX4Trans(
            b, &sm.kv[stage][kk + lane % 8 + 8 * ((lane / 8) % 2)][dim0 + n * 8 + 8 * (lane / 16)]);
        Mma16816(acc[n], a, b[0], b[1]);
        Mma16816(acc[n + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage and P are free for the next tile
  }

  float l[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = l_part[r];
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  if (t == 0) {
    sm.row_sum[tile_h][warp][g] = l[0];
    sm.row_sum[tile_h][warp][g + 8] = l[1];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) l[r] += sm.row_sum[tile_h][w][g + 8 * r];
  }

  const int64_t out_row =
      (static_cast<int64_t>(split) * p.num_rows + row) * p.num_q_heads + head0 + hr;
  const float inv0 = l[0] > 0.0f ? 1.0f / l[0] : 0.0f;
  const float inv1 = l[1] > 0.0f ? 1.0f / l[1] : 0.0f;
  float* o0 = p.o + (out_row + g) * kDv + warp * kDimsPerWarp + 2 * t;
  float* o1 = p.o + (out_row + g + 8) * kDv + warp * kDimsPerWarp + 2 * t;
#pragma unroll
  for (int n = 0; n < kDimsPerWarp / 8; ++n) {
    *reinterpret_cast<float2*>(o0 + n * 8) = make_float2(acc[n][0] * inv0, acc[n][1] * inv0);
    *reinterpret_cast<float2*>(o1 + n * 8) = make_float2(acc[n][2] * inv1, acc[n][3] * inv1);
  }
  if (warp == 0 && t == 0) {
    p.lse[out_row + g] = NaturalLse(m_run[0], l[0]);
    p.lse[out_row + g + 8] = NaturalLse(m_run[1], l[1]);
  }
}

template <int kTiles>
cudaError_t Launch(const AttentionKernelParams& p, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem<kTiles>));
  cudaError_t err = cudaFuncSetAttribute(MlaAttentionMmaKernel<kTiles>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(p.num_q_heads / (kHeads * kTiles), p.num_splits, p.num_rows);
  MlaAttentionMmaKernel<kTiles><<<grid, kTiles * kThreadsPerTile, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchMlaAttentionTensorCore(const AttentionKernelParams& p, cudaStream_t stream) {
  return p.num_q_heads % (2 * kHeads) == 0 ? Launch<2>(p, stream) : Launch<1>(p, stream);
}

}  // namespace ctxpar::cuda
