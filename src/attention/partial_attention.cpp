// PartialAttentionCpu: validation, the split-KV plan, the threads, and the merge of the splits.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attention/kernel.h"
#include "ctxpar/attention.h"
#include "ctxpar/cpu_features.h"
#include "ctxpar/merge.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar {

namespace {

using attention_internal::KernelArgs;
using attention_internal::KernelFn;

// Below this many keys a chunk costs more in merging and scheduling than it gains.
constexpr int kMinSplitKeys = 256;
// Chunks per thread: enough slack to even out rows of different lengths.
constexpr int kChunksPerThread = 4;
// Multiply-adds below which extra threads cost more to start than they save.
constexpr double kFmasPerThread = 5e4;

// Fields and rules as views: Validate runs on every call, and builds a string only to fail.
Status Bad(std::string_view field, long long value, std::string_view rule) {
  return InvalidArgument("PartialAttentionParams." + std::string(field) + " = " +
                         std::to_string(value) + ": " + std::string(rule));
}

Status NullField(std::string_view field) {
  return InvalidArgument("PartialAttentionParams." + std::string(field) +
                         " is null: it must point to data");
}

Status CheckHeadDim(std::string_view field, int value) {
  if (value < 16 || value > 1024 || value % 16 != 0) {
    return Bad(field, value, "must be a multiple of 16 in [16, 1024]");
  }
  return Status::Ok();
}

Status Validate(const PartialAttentionParams& p) {
  const PagedKv& kv = p.kv;
  if (p.num_rows < 0) return Bad("num_rows", p.num_rows, "must be >= 0");
  if (p.num_q_heads < 1) return Bad("num_q_heads", p.num_q_heads, "must be >= 1");
  if (kv.num_kv_heads < 1) return Bad("kv.num_kv_heads", kv.num_kv_heads, "must be >= 1");
  if (p.num_q_heads % kv.num_kv_heads != 0) {
    return Bad("num_q_heads", p.num_q_heads,
               "must be a multiple of kv.num_kv_heads = " + std::to_string(kv.num_kv_heads));
  }
  CTXPAR_RETURN_IF_ERROR(CheckHeadDim("kv.head_dim_qk", kv.head_dim_qk));
  CTXPAR_RETURN_IF_ERROR(CheckHeadDim("kv.head_dim_v", kv.head_dim_v));
  if (kv.v == nullptr && kv.head_dim_v > kv.head_dim_qk) {
    return Bad("kv.head_dim_v", kv.head_dim_v,
               "must be <= kv.head_dim_qk = " + std::to_string(kv.head_dim_qk) +
                   " when kv.v is null (V is the prefix of the K row)");
  }
  if (kv.dtype != DataType::kF32 && kv.dtype != DataType::kBF16 && kv.dtype != DataType::kF8E4M3 &&
      kv.dtype != DataType::kF8E5M2) {
    return Bad("kv.dtype", static_cast<int>(kv.dtype),
               "must be DataType::kF32, kBF16, kF8E4M3 or kF8E5M2");
  }
  if (kv.page_size < 1) return Bad("kv.page_size", kv.page_size, "must be >= 1");
  if (kv.format != KvPageFormat::kRows && kv.format != KvPageFormat::kTiles16) {
    return Bad("kv.format", static_cast<int>(kv.format), "must be KvPageFormat::kRows or kTiles16");
  }
  if (kv.format == KvPageFormat::kTiles16 && kv.page_size % 16 != 0) {
    return Bad(
        "kv.format", static_cast<int>(kv.format),
        "kTiles16 needs kv.page_size to be a multiple of 16, got " + std::to_string(kv.page_size));
  }
  if (kv.max_pages_per_seq < 1) {
    return Bad("kv.max_pages_per_seq", kv.max_pages_per_seq, "must be >= 1");
  }
  if (kv.num_pages < 0) return Bad("kv.num_pages", kv.num_pages, "must be >= 0 (0: unknown)");
  if (p.num_seqs < 0) return Bad("num_seqs", p.num_seqs, "must be >= 0 (0: unknown)");
  if (p.split_kv_keys < 0) {
    return Bad("split_kv_keys", p.split_kv_keys, "must be >= 0 (0: chosen automatically)");
  }
  if (p.chunks != nullptr && p.split_kv_keys == 0) {
    return Bad("split_kv_keys", p.split_kv_keys, "must be > 0 with chunks (fixed chunks)");
  }
  if (!std::isfinite(p.scale)) {
    return InvalidArgument("PartialAttentionParams.scale = " + std::to_string(p.scale) +
                           ": must be finite");
  }
  if (!(p.softcap >= 0.0f) || !std::isfinite(p.softcap)) {
    return InvalidArgument("PartialAttentionParams.softcap = " + std::to_string(p.softcap) +
                           ": must be finite and >= 0 (0: no softcapping)");
  }
  if (p.num_rows == 0) return Status::Ok();
  if (p.q == nullptr) return NullField("q");
  if (p.o == nullptr && p.chunks == nullptr) return NullField("o");
  if (p.lse == nullptr && p.chunks == nullptr) return NullField("lse");
  if (p.row_kv_len == nullptr) return NullField("row_kv_len");
  if (kv.k == nullptr) return NullField("kv.k");
  if (kv.format == KvPageFormat::kTiles16 && kv.v == nullptr) {
    return Bad("kv.format", static_cast<int>(kv.format),
               "kTiles16 needs a separate V (kv.v non-null): absorbed MLA keeps kRows");
  }
  if (kv.block_table == nullptr) return NullField("kv.block_table");
  const int64_t max_len = static_cast<int64_t>(kv.max_pages_per_seq) * kv.page_size;
  for (int i = 0; i < p.num_rows; ++i) {
    std::string at = "[";  // built in steps: GCC 12 warns falsely on "[" + std::string
    at += std::to_string(i);
    at += "]";
    const int len = p.row_kv_len[i];
    if (len < 0 || len > max_len) {
      return Bad(
          "row_kv_len" + at, len,
          "must be in [0, kv.max_pages_per_seq * kv.page_size = " + std::to_string(max_len) + "]");
    }
    const int start = p.row_kv_start != nullptr ? p.row_kv_start[i] : 0;
    if (start < 0 || start > len) {
      return Bad("row_kv_start" + at, start,
                 "must be in [0, row_kv_len" + at + " = " + std::to_string(len) + "]");
    }
    const int seq = p.row_seq != nullptr ? p.row_seq[i] : i;
    if (seq < 0 || (p.num_seqs > 0 && seq >= p.num_seqs)) {
      return Bad(p.row_seq != nullptr ? "row_seq" + at : "num_seqs", seq,
                 p.num_seqs > 0
                     ? "a sequence must be in [0, num_seqs = " + std::to_string(p.num_seqs) + ")"
                     : "a sequence must be >= 0");
    }
    const int32_t* pages = kv.block_table + static_cast<int64_t>(seq) * kv.max_pages_per_seq;
    const int used = (len + kv.page_size - 1) / kv.page_size;
    for (int j = start / kv.page_size; j < used; ++j) {
      if (pages[j] < 0 || (kv.num_pages > 0 && pages[j] >= kv.num_pages)) {
        return Bad(
            "kv.block_table[" + std::to_string(seq) + " * max_pages_per_seq + " +
                std::to_string(j) + "]",
            pages[j],
            kv.num_pages > 0
                ? "a page must be in [0, kv.num_pages = " + std::to_string(kv.num_pages) + ")"
                : "a page must be >= 0");
      }
    }
  }
  return Status::Ok();
}

// One unit of work: keys [begin, end) of one row, its KV heads [kv_head, kv_head + kv_count)
// (kv_count 0: every head). Its O and lse go to the output directly when the row has one split,
// else to partial buffers that the merge combines.
// With kTiles16 a task may instead take rows (2 to TaskRows) of one causal prefill chunk:
// keys from begin to each row's own end, the rows listed in task_rows[rows_at, rows_at + rows).
struct Task {
  int row;
  int begin;
  int end;
  float* o;    // [num_q_heads, head_dim_v]
  float* lse;  // [num_q_heads]
  int rows = 1;
  int rows_at = 0;
  int kv_head = 0;
  int kv_count = 0;
};

// A row whose keys were split, and where its partials live.
struct SplitRow {
  int row;
  int splits;
  float* o;    // [splits, num_q_heads, head_dim_v]
  float* lse;  // [splits, num_q_heads]
};

// fn(i) for i in [0, count) on `threads` threads: the pool's when there is one, else threads
// started for the call.
void RunParallel(ThreadPool* pool, int threads, int count, const std::function<void(int)>& fn) {
  if (threads <= 1) {
    for (int i = 0; i < count; ++i) fn(i);
    return;
  }
  if (pool != nullptr) {
    pool->ParallelFor(count, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fn(static_cast<int>(i));
    });
    return;
  }
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i = next.fetch_add(1); i < count; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> started;
  started.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) started.emplace_back(worker);
  worker();
  for (std::thread& t : started) t.join();
}

// This thread's kernel scratch, 64-byte aligned, at least `floats` long; kept for the thread's
// life so that a pool's threads allocate it once.
float* ThreadScratch(size_t floats) {
  thread_local std::unique_ptr<float[], decltype(&std::free)> buffer(nullptr, &std::free);
  thread_local size_t capacity = 0;
  if (capacity < floats) {
    buffer.reset(static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float))));
    capacity = buffer != nullptr ? floats : 0;
  }
  return buffer.get();
}

}  // namespace

namespace attention_internal {

KernelFn SelectKernel(CpuIsa isa, DataType dtype) {
  // [f32, bf16, fp8 e4m3, fp8 e5m2]
  const int t = dtype == DataType::kBF16     ? 1
                : dtype == DataType::kF8E4M3 ? 2
                : dtype == DataType::kF8E5M2 ? 3
                                             : 0;
#if defined(CTXPAR_X86_KERNELS)
  static constexpr KernelFn kAvx512[] = {&AttendAvx512F32, &AttendAvx512Bf16, &AttendAvx512Fp8E4M3,
                                         &AttendAvx512Fp8E5M2};
  static constexpr KernelFn kAvx2[] = {&AttendAvx2F32, &AttendAvx2Bf16, &AttendAvx2Fp8E4M3,
                                       &AttendAvx2Fp8E5M2};
  // The AVX-512 fp8 kernels permute bytes with vpermb (AVX512_VBMI).
  if (isa >= CpuIsa::kAvx512 && t >= 2 && !DetectCpuFeatures().avx512_vbmi) isa = CpuIsa::kAvx2;
  switch (isa) {
    case CpuIsa::kAmx:
      if (t == 1) return &AttendAmxBf16;
      [[fallthrough]];
    case CpuIsa::kAvx512Bf16:
      if (t == 1) return &AttendAvx512DpBf16;
      if (t == 2) return &AttendAvx512DpFp8E4M3;
      if (t == 3) return &AttendAvx512DpFp8E5M2;
      [[fallthrough]];
    case CpuIsa::kAvx512:
      return kAvx512[t];
    case CpuIsa::kAvx2:
      return kAvx2[t];
    case CpuIsa::kScalar:
      break;
  }
#else
  (void)isa;
#endif
  static constexpr KernelFn kScalar[] = {&AttendScalarF32, &AttendScalarBf16, &AttendScalarFp8E4M3,
                                         &AttendScalarFp8E5M2};
  return kScalar[t];
}

}  // namespace attention_internal

Status PartialAttentionCpu(const PartialAttentionParams& p) {
  CTXPAR_RETURN_IF_ERROR(Validate(p));
  if (p.num_rows == 0) return Status::Ok();
  CTXPAR_ASSIGN_OR_RETURN(CpuIsa isa, SelectCpuIsa());
  const PagedKv& kv = p.kv;
  // vdpbf16ps consumes pairs, two registers' worth of lanes per step.
  if (isa >= CpuIsa::kAvx512Bf16 && kv.head_dim_qk % 32 != 0) isa = CpuIsa::kAvx512;
  // AMX's P V takes 32 of head_dim_v per step.
  if (isa == CpuIsa::kAmx && kv.head_dim_v % 32 != 0) isa = CpuIsa::kAvx512Bf16;
  const KernelFn kernel = attention_internal::SelectKernel(isa, kv.dtype);

  const int heads = p.num_q_heads;
  const int group = heads / kv.num_kv_heads;
  const int dqk = kv.head_dim_qk;
  const int dv = kv.head_dim_v;
  int threads = p.pool != nullptr ? p.pool->size()
                : p.num_threads > 0
                    ? p.num_threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto start_of = [&](int row) { return p.row_kv_start != nullptr ? p.row_kv_start[row] : 0; };
  int64_t total_keys = 0;
  for (int i = 0; i < p.num_rows; ++i) total_keys += p.row_kv_len[i] - start_of(i);
  const double fmas = static_cast<double>(total_keys) * heads * (dqk + dv);
  threads = static_cast<int>(std::min<double>(threads, std::max(1.0, fmas / kFmasPerThread)));

  // Keys per chunk: whole rows when one thread does everything, else small enough for
  // kChunksPerThread chunks per thread over all rows.
  int64_t chunk = p.split_kv_keys;
  if (chunk == 0) {
    const int64_t want = threads * kChunksPerThread;
    chunk =
        threads == 1 ? INT64_MAX : std::max<int64_t>(kMinSplitKeys, (total_keys + want - 1) / want);
    // Whole 16-key tiles, so that no chunk of kTiles16 starts inside one.
    if (chunk != INT64_MAX) chunk = (chunk + 15) / 16 * 16;
  }
  // Row i's splits are the absolute chunks [first_chunk[i], first_chunk[i] + splits[i]) that meet
  // its range; an empty range is one empty split.
  std::vector<int64_t> first_chunk(p.num_rows);
  std::vector<int> splits(p.num_rows);
  for (int i = 0; i < p.num_rows; ++i) {
    const int64_t start = start_of(i), len = p.row_kv_len[i];
    first_chunk[i] = start / chunk;
    splits[i] = len > start ? static_cast<int>((len - 1) / chunk - first_chunk[i] + 1) : 1;
  }
  if (p.chunks != nullptr) {
    ChunkStates& cs = *p.chunks;
    cs.first.assign(p.num_rows + 1, 0);
    for (int i = 0; i < p.num_rows; ++i) cs.first[i + 1] = cs.first[i] + splits[i];
    cs.o.resize(static_cast<size_t>(cs.first[p.num_rows]) * heads * dv);
    cs.lse.resize(static_cast<size_t>(cs.first[p.num_rows]) * heads);
  }
  int64_t partial_floats = 0;
  for (int i = 0; i < p.num_rows && p.chunks == nullptr; ++i) {
    if (splits[i] > 1) partial_floats += static_cast<int64_t>(splits[i]) * heads * (dv + 1);
  }
  std::vector<float> partials(partial_floats);
  // Rows per sequence in this call: a sequence's only row (decode) reads keys no other row
  // brought into cache (KernelArgs::kv_cold).
  auto seq_of = [&](int row) { return p.row_seq != nullptr ? p.row_seq[row] : row; };
  std::unordered_map<int, int> rows_of_seq;
  for (int i = 0; i < p.num_rows; ++i) ++rows_of_seq[seq_of(i)];
  std::vector<SplitRow> split_rows;
  std::vector<int> split_of(p.num_rows, -1);  // the row's index in split_rows, if it has splits
  float* next_partial = partials.data();
  for (int i = 0; i < p.num_rows && p.chunks == nullptr; ++i) {
    if (splits[i] == 1) continue;
    split_of[i] = static_cast<int>(split_rows.size());
    split_rows.push_back(
        {i, splits[i], next_partial, next_partial + static_cast<int64_t>(splits[i]) * heads * dv});
    next_partial += static_cast<int64_t>(splits[i]) * heads * (dv + 1);
  }
  // Where the split of row i in absolute chunk c goes: the output itself when the row has one.
  auto out_of = [&](int i, int64_t c) -> std::pair<float*, float*> {
    if (p.chunks != nullptr) {
      const int64_t at = p.chunks->first[i] + (c - first_chunk[i]);
      return {p.chunks->o.data() + at * heads * dv, p.chunks->lse.data() + at * heads};
    }
    if (split_of[i] < 0) {
      const int64_t head0 = static_cast<int64_t>(i) * heads;
      return {p.o + head0 * dv, p.lse + head0};
    }
    const SplitRow& r = split_rows[split_of[i]];
    const int64_t s = c - first_chunk[i];
    return {r.o + s * heads * dv, r.lse + s * heads};
  };
  // c * chunk <= a row's end for every chunk c it has (and chunk is INT64_MAX only for c = 0).
  auto split_begin = [&](int i, int64_t c) {
    return static_cast<int>(std::max<int64_t>(start_of(i), c * chunk));
  };
  auto split_end = [&](int i, int64_t c) {
    return static_cast<int>(std::min<int64_t>(p.row_kv_len[i], c * chunk + chunk));
  };
  auto has_chunk = [&](int i, int64_t c) {
    return c >= first_chunk[i] && c < first_chunk[i] + splits[i];
  };
  // Consecutive rows of one sequence whose ranges do not move back (a causal prefill chunk,
  // windowed or not): with kTiles16 up to TaskRows of them that start a chunk at the same key
  // make one task.
  const bool multi = kv.format == KvPageFormat::kTiles16;
  const int max_rows =
      attention_internal::TaskRows(isa == CpuIsa::kAmx && kv.dtype == DataType::kBF16, group);
  std::vector<Task> tasks;
  std::vector<attention_internal::KernelRow> task_rows;
  for (int i = 0; i < p.num_rows;) {
    int last = i + 1;
    if (multi && p.row_kv_len[i] > start_of(i)) {
      while (last < p.num_rows && last - i < max_rows && seq_of(last) == seq_of(i) &&
             p.row_kv_len[last] >= p.row_kv_len[last - 1] && start_of(last) >= start_of(last - 1) &&
             p.row_kv_len[last] > start_of(last)) {
        ++last;
      }
    }
    const int64_t c_end = first_chunk[last - 1] + splits[last - 1];
    for (int64_t c = first_chunk[i]; c < c_end; ++c) {
      // The rows with chunk c form a run, as starts and ends do not decrease; within it, rows of
      // the same first key share a task.
      int from = i;
      while (from < last && !has_chunk(from, c)) ++from;
      int to = from;
      while (to < last && has_chunk(to, c)) ++to;
      for (int r0 = from; r0 < to;) {
        int r1 = r0 + 1;
        while (r1 < to && split_begin(r1, c) == split_begin(r0, c)) ++r1;
        const auto [o, lse] = out_of(r1 - 1, c);
        Task t{r1 - 1, split_begin(r1 - 1, c), split_end(r1 - 1, c), o, lse};
        if (r1 - r0 > 1) {
          t.row = r0;
          t.rows = r1 - r0;
          t.rows_at = static_cast<int>(task_rows.size());
          for (int r = r0; r < r1; ++r) {
            const auto [ro, rlse] = out_of(r, c);
            task_rows.push_back(
                {p.q + static_cast<int64_t>(r) * heads * dqk, ro, rlse, split_end(r, c)});
          }
        }
        tasks.push_back(t);
        r0 = r1;
      }
    }
    i = last;
  }
  // Fewer tasks than threads (a decode row of a context within one chunk is one task): single-row
  // tasks split by KV heads. Each head's arithmetic is its own, so no bit changes. Splitting
  // further, to kChunksPerThread tasks a thread, cost more in per-task work than it gained.
  const int64_t num_tasks = static_cast<int64_t>(tasks.size());
  if (threads > 1 && kv.num_kv_heads > 1 && kv.v != nullptr && num_tasks < threads) {
    const int parts =
        static_cast<int>(std::min<int64_t>(kv.num_kv_heads, (threads + num_tasks - 1) / num_tasks));
    std::vector<Task> by_head;
    by_head.reserve(tasks.size() * parts);
    for (const Task& t : tasks) {
      if (t.rows > 1) {
        by_head.push_back(t);
        continue;
      }
      for (int i = 0; i < parts; ++i) {
        Task part = t;
        part.kv_head = kv.num_kv_heads * i / parts;
        part.kv_count = kv.num_kv_heads * (i + 1) / parts - part.kv_head;
        by_head.push_back(part);
      }
    }
    tasks.swap(by_head);
  }
  threads = std::min<int>(threads, static_cast<int>(tasks.size()));

  const size_t scratch_floats = attention_internal::KernelScratchFloats(kv.num_kv_heads, group, dqk,
                                                                        dv, multi ? max_rows : 1);
  std::atomic<bool> out_of_memory{false};
  KernelArgs base;
  base.kv_heads = kv.num_kv_heads;
  base.group = group;
  base.head_dim_qk = dqk;
  base.head_dim_v = dv;
  base.scale = p.scale;
  base.softcap = p.softcap;
  base.k = kv.k;
  base.v = kv.v;
  base.k_row_stride = static_cast<int64_t>(kv.num_kv_heads) * dqk;
  base.k_head_stride = dqk;
  base.v_row_stride =
      kv.v != nullptr ? static_cast<int64_t>(kv.num_kv_heads) * dv : base.k_row_stride;
  base.v_head_stride = kv.v != nullptr ? dv : dqk;
  base.page_size = kv.page_size;
  base.tiles = kv.format == KvPageFormat::kTiles16;
  base.k_page_stride = static_cast<int64_t>(kv.page_size) * kv.num_kv_heads * dqk;
  base.v_page_stride = static_cast<int64_t>(kv.page_size) * kv.num_kv_heads * dv;
  RunParallel(p.pool, threads, static_cast<int>(tasks.size()), [&](int index) {
    float* scratch = ThreadScratch(scratch_floats);
    if (scratch == nullptr) {
      out_of_memory.store(true);
      return;
    }
    const Task& t = tasks[index];
    const int seq = seq_of(t.row);
    KernelArgs a = base;
    a.kv_cold = rows_of_seq.at(seq) == 1;
    a.q = p.q + static_cast<int64_t>(t.row) * heads * dqk;
    a.o = t.o;
    a.lse = t.lse;
    a.pages = kv.block_table + static_cast<int64_t>(seq) * kv.max_pages_per_seq;
    if (t.kv_count > 0) {
      const int64_t q_head = static_cast<int64_t>(t.kv_head) * group;
      const int64_t elem = static_cast<int64_t>(DataTypeSize(kv.dtype));
      a.kv_heads = t.kv_count;
      a.q += q_head * dqk;
      a.o += q_head * dv;
      a.lse += q_head;
      a.k = static_cast<const char*>(kv.k) + KvElementOffset(kv, false, 0, 0, t.kv_head, 0) * elem;
      a.v = static_cast<const char*>(kv.v) + KvElementOffset(kv, true, 0, 0, t.kv_head, 0) * elem;
    }
    a.key_begin = t.begin;
    a.key_end = t.end;
    if (t.rows > 1) {
      a.rows = task_rows.data() + t.rows_at;
      a.num_rows = t.rows;
    }
    a.scratch = scratch;
    kernel(a);
  });
  if (out_of_memory.load()) return Internal("PartialAttentionCpu: out of memory for scratch");
  if (p.chunks != nullptr) return Status::Ok();

  std::vector<float> weights;
  for (const SplitRow& r : split_rows) {
    weights.resize(r.splits);
    for (int h = 0; h < heads; ++h) {
      const int64_t out_head = static_cast<int64_t>(r.row) * heads + h;
      p.lse[out_head] = MergeScales(r.lse + h, r.splits, heads, weights.data());
      float* out = p.o + out_head * dv;
      std::fill(out, out + dv, 0.0f);
      for (int s = 0; s < r.splits; ++s) {
        const float w = weights[s];
        if (w == 0.0f) continue;
        const float* part = r.o + (static_cast<int64_t>(s) * heads + h) * dv;
        for (int d = 0; d < dv; ++d) out[d] += w * part[d];
      }
    }
  }
  return Status::Ok();
}

}  // namespace ctxpar
