// ctxpar_gpu_bench: times the CUDA kernels with CUDA events after warm-up (median of repeats, each
// the mean of kCallsPerRep back-to-back calls) beside the ceilings measured in the same run:
// device copy (read + write), a read-only sweep, and a bf16 cuBLAS matmul. Writes every figure
// as JSON (--json PATH) and prints a table.
//
// Figures: GQA decode (32 q heads, 8 KV heads, D 128), absorbed-MLA decode (16 and 128 heads),
// the merge of N = 8 partial states and the a2a pack at N = 8 for the same shapes. For each
// attention shape: time, GB/s of KV read, TFLOP/s, and the floor = max(KV bytes / read rate,
// FLOPs / matmul rate). The MLA tensor-core result is checked against the CUDA-core path on the
// same inputs, the GQA split-KV result against one split per row (outputs poisoned first).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ctxpar/attention.h"
#include "ctxpar/cuda_attention.h"
#include "ctxpar/cuda_combine.h"

namespace {

#define CHECK_CUDA(expr)                                                                         \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

#define CHECK_OK(expr)                                                                          \
  do {                                                                                          \
    const ctxpar::Status s_ = (expr);                                                           \
    if (!s_.ok()) {                                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

constexpr int kWarmup = 5;
constexpr int kReps = 20;
// Calls between one pair of events. With one call per pair the GPU is idle when the first event
// is recorded, so every timing would include the host's launch latency (several us: 10 % and more
// of a 40 us kernel); back-to-back calls keep the GPU busy and spread that latency over the batch.
constexpr int kCallsPerRep = 10;

__device__ __forceinline__ uint32_t Hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Uniform values in [-1, 1) (never exactly 0) as bf16 bits or fp32.
__global__ void FillBf16(uint16_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float f = (static_cast<float>(Hash(seed * 0x9e3779b97f4a7c15ull + i) >> 8) + 0.5f) *
                        (2.0f / 16777216.0f) -
                    1.0f;
    p[i] = static_cast<uint16_t>(__float_as_uint(f) >> 16);
  }
}

__global__ void FillF32(float* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float u =
        (static_cast<float>(Hash(seed * 0x9e3779b97f4a7c15ull + i) >> 8) + 0.5f) / 16777216.0f;
    p[i] = lo + (hi - lo) * u;
  }
}

// Read-only sweep: every byte read once with 16-byte loads; one word per block written.
__global__ void ReadSweep(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;  // keeps the loads; practically never taken
}

struct Timer {
  cudaStream_t stream;
  template <typename F>
  double MedianMs(F&& f) {
    for (int i = 0; i < kWarmup; ++i) f();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
    std::vector<float> ms(kReps);
    for (int i = 0; i < kReps; ++i) {
      CHECK_CUDA(cudaEventRecord(a, stream));
      for (int j = 0; j < kCallsPerRep; ++j) f();
      CHECK_CUDA(cudaEventRecord(b, stream));
      CHECK_CUDA(cudaEventSynchronize(b));
      CHECK_CUDA(cudaEventElapsedTime(&ms[i], a, b));
      ms[i] /= kCallsPerRep;
    }
    CHECK_CUDA(cudaEventDestroy(a));
    CHECK_CUDA(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[kReps / 2];
  }
};

template <typename T>
T* Alloc(size_t count) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

struct Ceilings {
  double copy_gbs = 0, read_gbs = 0, matmul_tflops = 0;
};

Ceilings MeasureCeilings(Timer& t) {
  Ceilings c;
  const size_t bytes = size_t{2} << 30;
  char* a = Alloc<char>(bytes);
  char* b = Alloc<char>(bytes);
  uint32_t* sink = Alloc<uint32_t>(4096);
  FillBf16<<<4096, 256, 0, t.stream>>>(reinterpret_cast<uint16_t*>(a), bytes / 2, 1);
  CHECK_CUDA(cudaGetLastError());
  double ms = t.MedianMs(
      [&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, t.stream)); });
  c.copy_gbs = 2.0 * bytes / (ms * 1e6);
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  ms = t.MedianMs([&] {
    ReadSweep<<<sms * 8, 512, 0, t.stream>>>(reinterpret_cast<const uint4*>(a), bytes / 16, sink);
  });
  c.read_gbs = bytes / (ms * 1e6);
  CHECK_CUDA(cudaFree(b));

  const int n = 8192;
  uint16_t* ma = Alloc<uint16_t>(static_cast<size_t>(n) * n);
  uint16_t* mb = Alloc<uint16_t>(static_cast<size_t>(n) * n);
  uint16_t* mc = Alloc<uint16_t>(static_cast<size_t>(n) * n);
  FillBf16<<<4096, 256, 0, t.stream>>>(ma, static_cast<size_t>(n) * n, 2);
  FillBf16<<<4096, 256, 0, t.stream>>>(mb, static_cast<size_t>(n) * n, 3);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    std::exit(1);
  }
  cublasSetStream(h, t.stream);
  const float one = 1.0f, zero = 0.0f;
  ms = t.MedianMs([&] {
    const cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, ma,
                                           CUDA_R_16BF, n, mb, CUDA_R_16BF, n, &zero, mc,
                                           CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasGemmEx failed: %d\n", static_cast<int>(st));
      std::exit(1);
    }
  });
  c.matmul_tflops = 2.0 * n * n * double{n} / (ms * 1e9);
  cublasDestroy(h);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(ma));
  CHECK_CUDA(cudaFree(mb));
  CHECK_CUDA(cudaFree(mc));
  CHECK_CUDA(cudaFree(sink));
  return c;
}

struct Case {
  std::string kind;  // "gqa" or "mla"
  int batch, context, q_heads, kv_heads, dqk, dv;
};

struct Row {
  Case c;
  double ms = 0, kv_gbs = 0, tflops = 0, floor_ms = 0, merge_ms = 0, pack_ms = 0;
  double check_rel_err = -1;  // MLA: tensor-core vs CUDA-core; GQA: splits vs one split
  double simt_ms = 0;         // MLA: the CUDA-core path's time, for comparison
  int splits = 0;
};

double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

Row RunCase(Timer& t, const Case& c, const Ceilings& ceil, int sms) {
  Row row{c};
  const int page = 64;
  const int pages_per_seq = (c.context + page - 1) / page;
  const size_t slots = static_cast<size_t>(c.batch) * pages_per_seq * page;
  const bool mla = c.kind == "mla";
  uint16_t* k = Alloc<uint16_t>(slots * c.kv_heads * c.dqk);
  uint16_t* v = mla ? nullptr : Alloc<uint16_t>(slots * c.kv_heads * c.dv);
  float* q = Alloc<float>(static_cast<size_t>(c.batch) * c.q_heads * c.dqk);
  float* o = Alloc<float>(static_cast<size_t>(c.batch) * c.q_heads * c.dv);
  float* lse = Alloc<float>(static_cast<size_t>(c.batch) * c.q_heads);
  int32_t* table = Alloc<int32_t>(static_cast<size_t>(c.batch) * pages_per_seq);
  int32_t* lens = Alloc<int32_t>(c.batch);
  FillBf16<<<4096, 256, 0, t.stream>>>(k, slots * c.kv_heads * c.dqk, 10);
  if (v != nullptr) FillBf16<<<4096, 256, 0, t.stream>>>(v, slots * c.kv_heads * c.dv, 11);
  FillF32<<<1024, 256, 0, t.stream>>>(q, static_cast<size_t>(c.batch) * c.q_heads * c.dqk, 12,
                                      -1.0f, 1.0f);
  CHECK_CUDA(cudaGetLastError());
  // Pages in reverse order: the kernels must follow the table, not assume contiguity.
  std::vector<int32_t> h_table(static_cast<size_t>(c.batch) * pages_per_seq);
  for (size_t i = 0; i < h_table.size(); ++i)
    h_table[i] = static_cast<int32_t>(h_table.size() - 1 - i);
  std::vector<int32_t> h_lens(c.batch, c.context);
  CHECK_CUDA(cudaMemcpy(table, h_table.data(), h_table.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(lens, h_lens.data(), h_lens.size() * 4, cudaMemcpyHostToDevice));

  ctxpar::PartialAttentionParams p;
  p.q = q;
  p.o = o;
  p.lse = lse;
  p.num_rows = c.batch;
  p.num_q_heads = c.q_heads;
  p.row_kv_len = lens;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.dqk));
  p.kv.k = k;
  p.kv.v = v;
  p.kv.dtype = ctxpar::DataType::kBF16;
  p.kv.page_size = page;
  p.kv.num_kv_heads = c.kv_heads;
  p.kv.head_dim_qk = c.dqk;
  p.kv.head_dim_v = c.dv;
  p.kv.block_table = table;
  p.kv.max_pages_per_seq = pages_per_seq;
  const ctxpar::Expected<ctxpar::CudaAttentionPlan> plan =
      ctxpar::PlanPartialAttentionCuda(p, c.context, sms);
  CHECK_OK(plan.status());
  row.splits = plan->num_splits;
  void* ws = plan->workspace_bytes > 0 ? Alloc<char>(plan->workspace_bytes) : nullptr;

  const size_t out_elems = static_cast<size_t>(c.batch) * c.q_heads * c.dv;
  // Check on this shape, outputs poisoned first. MLA: the tensor-core path against the CUDA-core
  // one. GQA: the planned split-KV run against one split per row (the split merge at scale).
  {
    const ctxpar::Expected<ctxpar::CudaAttentionPlan> one =
        ctxpar::PlanPartialAttentionCuda(p, c.context, sms, 1);
    CHECK_OK(one.status());
    std::vector<float> fast(out_elems), slow(out_elems);
    auto run = [&](const ctxpar::CudaAttentionPlan& pl, ctxpar::CudaMlaPath path,
                   std::vector<float>& dst) {
      CHECK_CUDA(cudaMemsetAsync(o, 0xff, out_elems * 4, t.stream));
      CHECK_OK(ctxpar::PartialAttentionCuda(p, pl, ws, t.stream, path));
      CHECK_CUDA(cudaStreamSynchronize(t.stream));
      CHECK_CUDA(cudaMemcpy(dst.data(), o, out_elems * 4, cudaMemcpyDeviceToHost));
    };
    run(*plan, ctxpar::CudaMlaPath::kAuto, fast);
    if (mla) {
      run(*plan, ctxpar::CudaMlaPath::kCudaCore, slow);
    } else {
      run(*one, ctxpar::CudaMlaPath::kAuto, slow);
    }
    row.check_rel_err = RelErr(fast, slow);
  }
  row.ms = t.MedianMs([&] { CHECK_OK(ctxpar::PartialAttentionCuda(p, *plan, ws, t.stream)); });
  if (mla) {
    row.simt_ms = t.MedianMs([&] {
      CHECK_OK(
          ctxpar::PartialAttentionCuda(p, *plan, ws, t.stream, ctxpar::CudaMlaPath::kCudaCore));
    });
  }
  const double kv_bytes =
      double(c.batch) * c.context * c.kv_heads * (mla ? c.dqk : c.dqk + c.dv) * 2.0;
  const double flops = 2.0 * c.batch * c.q_heads * double(c.context) * (c.dqk + c.dv);
  row.kv_gbs = kv_bytes / (row.ms * 1e6);
  row.tflops = flops / (row.ms * 1e9);
  row.floor_ms = std::max(kv_bytes / (ceil.read_gbs * 1e6), flops / (ceil.matmul_tflops * 1e9));

  // Merge of N = 8 partial states and the a2a pack at N = 8, for this shape's (row, head) states.
  const int n = 8;
  const int states = c.batch * c.q_heads;
  float* parts = Alloc<float>(static_cast<size_t>(n) * states * c.dv);
  float* part_lse = Alloc<float>(static_cast<size_t>(n) * states);
  FillF32<<<1024, 256, 0, t.stream>>>(parts, static_cast<size_t>(n) * states * c.dv, 13, -1.0f,
                                      1.0f);
  FillF32<<<64, 256, 0, t.stream>>>(part_lse, static_cast<size_t>(n) * states, 14, -5.0f, 5.0f);
  ctxpar::CudaMergeParams mp;
  mp.o_parts = parts;
  mp.lse_parts = part_lse;
  mp.n = n;
  mp.num_states = states;
  mp.head_dim = c.dv;
  mp.o = o;
  mp.lse = lse;
  row.merge_ms = t.MedianMs([&] { CHECK_OK(ctxpar::MergeStatesCuda(mp, t.stream)); });
  if (c.q_heads % n == 0) {
    const ctxpar::CudaA2aParams a{n, c.batch, c.q_heads / n, c.dv, ctxpar::DataType::kBF16};
    char* send = Alloc<char>(n * ctxpar::A2aSlotBytes(a));
    row.pack_ms = t.MedianMs([&] { CHECK_OK(ctxpar::PackA2aCuda(a, o, lse, send, t.stream)); });
    CHECK_CUDA(cudaFree(send));
  }
  for (void* ptr :
       {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(q), static_cast<void*>(o),
        static_cast<void*>(lse), static_cast<void*>(table), static_cast<void*>(lens), ws,
        static_cast<void*>(parts), static_cast<void*>(part_lse)}) {
    if (ptr != nullptr) CHECK_CUDA(cudaFree(ptr));
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--json" && i + 1 < argc) json_path = argv[++i];
  }
  const ctxpar::Expected<int> devices = ctxpar::CudaDeviceCount();
  if (!devices.ok()) {
    std::fprintf(stderr, "%s\n", devices.status().message().c_str());
    return 1;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  Timer t;
  CHECK_CUDA(cudaStreamCreate(&t.stream));
  const Ceilings ceil = MeasureCeilings(t);
  std::printf(
      "device %s (sm%d%d, %d SMs): copy %.0f GB/s (read+write), read %.0f GB/s, "
      "bf16 matmul %.0f TFLOP/s\n",
      prop.name, prop.major, prop.minor, prop.multiProcessorCount, ceil.copy_gbs, ceil.read_gbs,
      ceil.matmul_tflops);

  const std::vector<Case> cases = {
      {"gqa", 1, 131072, 32, 8, 128, 128},  {"gqa", 16, 8192, 32, 8, 128, 128},
      {"gqa", 64, 4096, 32, 8, 128, 128},   {"mla", 1, 131072, 16, 1, 576, 512},
      {"mla", 32, 8192, 16, 1, 576, 512},   {"mla", 64, 4096, 16, 1, 576, 512},
      {"mla", 1, 131072, 128, 1, 576, 512}, {"mla", 32, 8192, 128, 1, 576, 512},
      {"mla", 64, 4096, 128, 1, 576, 512},
  };
  std::vector<Row> rows;
  for (const Case& c : cases) {
    rows.push_back(RunCase(t, c, ceil, prop.multiProcessorCount));
    const Row& r = rows.back();
    std::printf(
        "%s B=%d L=%d Hq=%d: %.4f ms, %.0f GB/s KV, %.1f TFLOP/s, floor %.4f ms (%.0f%%), "
        "splits %d, merge8 %.4f ms, pack8 %.4f ms, check %.2e, simt %.4f ms\n",
        c.kind.c_str(), c.batch, c.context, c.q_heads, r.ms, r.kv_gbs, r.tflops, r.floor_ms,
        100.0 * r.floor_ms / r.ms, r.splits, r.merge_ms, r.pack_ms, r.check_rel_err, r.simt_ms);
    std::fflush(stdout);
  }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"device\": \"%s\", \"sms\": %d, \"copy_gbs\": %.1f, \"read_gbs\": %.1f, "
                 "\"matmul_tflops\": %.1f, \"cases\": [\n",
                 prop.name, prop.multiProcessorCount, ceil.copy_gbs, ceil.read_gbs,
                 ceil.matmul_tflops);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      // RelErr gives inf for a non-finite output, which "%e" prints as "inf": not JSON, and
      // report.py would then lose every figure. Any value >= 1 fails its check just as well.
      const double check = std::isfinite(r.check_rel_err) ? r.check_rel_err : 1e300;
      std::fprintf(f,
                   "  {\"kind\": \"%s\", \"batch\": %d, \"context\": %d, \"q_heads\": %d, "
                   "\"kv_heads\": %d, \"ms\": %.5f, \"kv_gbs\": %.1f, \"tflops\": %.2f, "
                   "\"floor_ms\": %.5f, \"splits\": %d, \"merge8_ms\": %.5f, \"pack8_ms\": %.5f, "
                   "\"check_rel_err\": %.3e, \"simt_ms\": %.5f}%s\n",
                   r.c.kind.c_str(), r.c.batch, r.c.context, r.c.q_heads, r.c.kv_heads, r.ms,
                   r.kv_gbs, r.tflops, r.floor_ms, r.splits, r.merge_ms, r.pack_ms, check,
                   r.simt_ms, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
