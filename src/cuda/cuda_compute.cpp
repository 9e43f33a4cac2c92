// CudaCompute (cuda_compute.h): argument checks, weight residency, staging of host arrays, and
// the launches of compute_kernels.cu on the compute's stream.
#include "cuda/cuda_compute.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/compute_kernels.h"
#include "cuda/cuda_check.h"

namespace ctxpar::cuda {
namespace {

constexpr std::size_t kStageAlign = 256;
constexpr std::size_t kMinScratchBytes = 64 << 10;

std::string Shape(const compute::Tensor& t) {
  // Appends rather than "[" + ...: GCC 12 warns (-Wrestrict) about its own inlined insert.
  std::string s("[");
  s += std::to_string(t.rows);
  s += ", ";
  s += std::to_string(t.cols);
  s += "] (ld ";
  s += std::to_string(t.ld);
  s += ")";
  return s;
}

Rows RowsOf(const compute::Tensor& t) { return {t.f32(), t.rows, t.cols, t.ld}; }

bool Empty(const compute::Tensor& t) { return t.rows == 0 || t.cols == 0; }

Status SameShape(const char* op, const compute::Tensor& a, const char* a_name,
                 const compute::Tensor& b, const char* b_name) {
  if (a.rows == b.rows && a.cols == b.cols) return Status::Ok();
  return InvalidArgument(std::string(op) + ": " + a_name + " " + Shape(a) + " and " + b_name + " " +
                         Shape(b) + " differ in shape");
}

Expected<KernelWeight> KernelWeightOf(compute::WeightType type) {
  switch (type) {
    case compute::WeightType::kF32:
      return KernelWeight::kF32;
    case compute::WeightType::kF16:
      return KernelWeight::kF16;
    case compute::WeightType::kBF16:
      return KernelWeight::kBF16;
    case compute::WeightType::kQ8_0:
      return KernelWeight::kQ8_0;
    case compute::WeightType::kQ4_0:
      return KernelWeight::kQ4_0;
    case compute::WeightType::kQ4_1:
      return KernelWeight::kQ4_1;
    default:
      return Unimplemented(fmt::format(
          "CudaCompute::MatMul: {} weights have no CUDA kernel; CudaCompute takes F32, F16, BF16, "
          "Q8_0, Q4_0 and Q4_1 (the CPU takes {})",
          GgmlTypeName(compute::GgmlTypeOf(type)), compute::kMatMulTypes));
  }
}

}  // namespace

std::size_t CudaCompute::WeightKeyHash::operator()(const WeightKey& k) const {
  return std::hash<const void*>()(k.data) ^ (std::hash<std::size_t>()(k.bytes) << 1);
}

Expected<std::unique_ptr<CudaCompute>> CudaCompute::Create(int device) {
  CTXPAR_ASSIGN_OR_RETURN(const int count, CudaDeviceCount());
  if (device < 0 || device >= count) {
    return Unavailable("no CUDA device " + std::to_string(device) + ": the runtime finds " +
                       std::to_string(count));
  }
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaDeviceProp prop;
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  if (const cudaError_t err = ProbeKernelImage(); err != cudaSuccess) {
    cudaGetLastError();
    return FailedPrecondition("CudaCompute: the kernels were not built for " +
                              std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                              std::to_string(prop.minor) +
                              "; see CMAKE_CUDA_ARCHITECTURES): " + cudaGetErrorString(err));
  }
  cudaStream_t stream = nullptr;
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::unique_ptr<CudaCompute>(new CudaCompute(device, stream, prop));
}

CudaCompute::CudaCompute(int device, cudaStream_t stream, const cudaDeviceProp& prop)
    : device_(device),
      stream_(stream),
      name_(prop.name),
      sm_major_(prop.major),
      sm_minor_(prop.minor),
      num_sms_(prop.multiProcessorCount),
      concurrent_managed_(prop.concurrentManagedAccess != 0) {}

CudaCompute::~CudaCompute() {
  // Nothing to report to: wait for the stream's work (it may read the buffers freed next) as
  // far as the device still answers.
  if (cudaSetDevice(device_) == cudaSuccess) cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

Status CudaCompute::CheckWeightType(compute::WeightType type) {
  return KernelWeightOf(type).status();
}

Status CudaCompute::CheckTensor(const compute::Tensor& t, const char* what) {
  const std::string name = std::string("CudaCompute: ") + what;
  if (t.device != Device::kCuda) {
    return InvalidArgument(name + " is a " + std::string(DeviceName(t.device)) +
                           " tensor; the CUDA ops take cuda tensors");
  }
  if (t.dtype != DataType::kF32) {
    return InvalidArgument(name + " is " + std::string(DataTypeName(t.dtype)) +
                           "; the CUDA ops take f32 tensors");
  }
  if (t.rows < 0 || t.cols < 0 || t.ld < t.cols) {
    return InvalidArgument(name + " has shape " + Shape(t) + ": needs rows, cols >= 0, ld >= cols");
  }
  if (t.data == nullptr && !Empty(t)) return InvalidArgument(name + " has no data");
  return Status::Ok();
}

Status CudaCompute::Bind() const {
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return Status::Ok();
}

void CudaCompute::Record(Status status) {
  if (error_.ok() && !status.ok()) error_ = std::move(status);
}

Status CudaCompute::CheckAddressable(const void* p, const char* what) const {
  const std::string name = std::string("CudaCompute: ") + what;
  if (p == nullptr) return InvalidArgument(name + " is null");
  cudaPointerAttributes attr;
  if (const cudaError_t err = cudaPointerGetAttributes(&attr, p); err != cudaSuccess) {
    cudaGetLastError();
    return InvalidArgument(name +
                           " is no memory the CUDA runtime knows: " + cudaGetErrorString(err));
  }
  if (attr.type == cudaMemoryTypeUnregistered) {
    return InvalidArgument(name +
                           " is pageable host memory, which the device cannot address (use "
                           "Allocate's managed memory)");
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device_) {
    return InvalidArgument(name + " is memory of CUDA device " + std::to_string(attr.device) +
                           ", not of device " + std::to_string(device_));
  }
  return Status::Ok();
}

Status CudaCompute::CheckOperand(const compute::Tensor& t, const char* what) const {
  CTXPAR_RETURN_IF_ERROR(CheckTensor(t, what));
  if (t.rows > INT_MAX || t.cols > INT_MAX) {
    return InvalidArgument(std::string("CudaCompute: ") + what + " has shape " + Shape(t) +
                           ": rows and cols must fit an int");
  }
  return Empty(t) ? Status::Ok() : CheckAddressable(t.data, what);
}

Expected<DeviceBuffer> CudaCompute::Allocate(std::size_t bytes) const {
  if (bytes == 0) return DeviceBuffer(nullptr, 0, Device::kCuda, nullptr);
  CTXPAR_RETURN_IF_ERROR(Bind());
  void* p = nullptr;
  if (const cudaError_t err = cudaMallocManaged(&p, bytes); err != cudaSuccess) {
    cudaGetLastError();
    return Unavailable("CudaCompute::Allocate: " + std::to_string(bytes) +
                       " bytes of managed memory on " + name_ + ": " + cudaGetErrorString(err));
  }
  std::shared_ptr<void> owner(p, [](void* q) { cudaFree(q); });
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaMemset(p, 0, bytes));
  // The host writes the buffer next (the KV pool's pages): the zeros must have landed.
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy));
  return DeviceBuffer(p, bytes, Device::kCuda, std::move(owner));
}

std::string CudaCompute::Describe() const {
  return "cuda: " + name_ + ", sm_" + std::to_string(sm_major_) + std::to_string(sm_minor_) + ", " +
         std::to_string(num_sms_) +
         " SMs; matmul fp32 (F32, F16, BF16, Q8_0, Q4_0, Q4_1); attention bf16 KV";
}

Status CudaCompute::Reserve(DeviceBuffer* buffer, std::size_t bytes) {
  if (buffer->size() >= bytes) return Status::Ok();
  // Ops already enqueued may still read the old buffer.
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  const std::size_t size = std::max({bytes, 2 * buffer->size(), kMinScratchBytes});
  void* p = nullptr;
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, size));
  *buffer =
      DeviceBuffer(p, size, Device::kCuda, std::shared_ptr<void>(p, [](void* q) { cudaFree(q); }));
  return Status::Ok();
}

Expected<const void*> CudaCompute::Resident(const void* host, std::size_t bytes) {
  const WeightKey key{host, bytes};
  if (const auto it = weights_.find(key); it != weights_.end()) return it->second.data();
  void* p = nullptr;
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  DeviceBuffer buffer(p, bytes, Device::kCuda,
                      std::shared_ptr<void>(p, [](void* q) { cudaFree(q); }));
  CTXPAR_CUDA_RETURN_IF_ERROR(cudaMemcpy(p, host, bytes, cudaMemcpyDefault));
  weights_.emplace(key, std::move(buffer));
  return static_cast<const void*>(p);
}

Status CudaCompute::Stage(std::span<const HostArray> arrays, const void** device) {
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for (const HostArray& a : arrays) {
    offsets.push_back(total);
    total += (a.bytes + kStageAlign - 1) / kStageAlign * kStageAlign;
  }
  CTXPAR_RETURN_IF_ERROR(Reserve(&scratch_, total));
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    char* dst = scratch_.as<char>() + offsets[i];
    CTXPAR_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, arrays[i].data, arrays[i].bytes, cudaMemcpyDefault, stream_));
    device[i] = dst;
  }
  return Status::Ok();
}

Status CudaCompute::MatMulOne(const compute::MatMulOut& out, const compute::Tensor& x) {
  const compute::QuantMatrix& w = out.w;
  const Expected<KernelWeight> type = KernelWeightOf(w.type);
  if (!type.ok()) {
    if (out.ldy >= w.rows && w.rows > 0 && x.rows > 0 &&
        CheckAddressable(out.y, "MatMul's y").ok()) {
      // 0xff bytes are NaN floats: a refused product shows rather than passing for a result.
      CTXPAR_CUDA_RETURN_IF_ERROR(cudaMemset2DAsync(out.y, out.ldy * sizeof(float), 0xff,
                                                    w.rows * sizeof(float), x.rows, stream_));
    }
    return type.status();
  }
  const std::size_t block_bytes = compute::BlockBytes(w.type);
  const std::size_t groups = w.cols / compute::kBlock;
  if (w.rows < 0 || w.cols != x.cols || w.cols % compute::kBlock != 0 ||
      w.row_stride < groups * block_bytes ||
      (w.type == compute::WeightType::kF32 && w.row_stride % sizeof(float) != 0)) {
    return InvalidArgument("CudaCompute::MatMul: weights [" + std::to_string(w.rows) + ", " +
                           std::to_string(w.cols) + "] (row stride " +
                           std::to_string(w.row_stride) + " bytes) against x " + Shape(x) +
                           ": needs cols == x.cols, a multiple of 32, and whole rows of blocks");
  }
  if (out.ldy < w.rows) {
    return InvalidArgument("CudaCompute::MatMul: ldy " + std::to_string(out.ldy) + " < rows " +
                           std::to_string(w.rows));
  }
  if (w.rows == 0 || x.rows == 0) return Status::Ok();
  if (w.data == nullptr) return InvalidArgument("CudaCompute::MatMul: weights have no data");
  CTXPAR_RETURN_IF_ERROR(CheckAddressable(out.y, "MatMul's y"));
  const std::size_t bytes = (w.rows - 1) * w.row_stride + groups * block_bytes;
  CTXPAR_ASSIGN_OR_RETURN(const void* weights, Resident(w.data, bytes));
  MatMulArgs a;
  a.type = *type;
  a.w = static_cast<const std::uint8_t*>(weights);
  a.row_stride = static_cast<std::int64_t>(w.row_stride);
  a.block_bytes = static_cast<std::int64_t>(block_bytes);
  a.rows = w.rows;
  a.cols = w.cols;
  a.x = x.f32();
  a.ldx = x.ld;
  a.n = static_cast<int>(x.rows);
  a.y = out.y;
  a.ldy = out.ldy;
  return CudaStatus(LaunchMatMul(a, stream_), "CudaCompute::MatMul launch");
}

void CudaCompute::MatMul(std::span<const compute::MatMulOut> outs, const compute::Tensor& x) {
  const Status checked = [&] {
    CTXPAR_RETURN_IF_ERROR(Bind());
    return CheckOperand(x, "MatMul's x");
  }();
  for (const compute::MatMulOut& out : outs) Record(checked.ok() ? MatMulOne(out, x) : checked);
}

void CudaCompute::MatMul(const compute::F32Matrix& w, const compute::Tensor& x,
                         const compute::Tensor& y) {
  Record([&]() -> Status {
    CTXPAR_RETURN_IF_ERROR(Bind());
    CTXPAR_RETURN_IF_ERROR(CheckOperand(x, "MatMul's x"));
    CTXPAR_RETURN_IF_ERROR(CheckOperand(y, "MatMul's y"));
    if (w.rows < 0 || w.cols != x.cols || w.ld < w.cols || y.rows != x.rows || y.cols != w.rows) {
      return InvalidArgument("CudaCompute::MatMul: fp32 weights [" + std::to_string(w.rows) + ", " +
                             std::to_string(w.cols) + "] (ld " + std::to_string(w.ld) + "), x " +
                             Shape(x) + ", y " + Shape(y) +
                             ": needs x [n, w.cols] and y [n, w.rows]");
    }
    if (Empty(y)) return Status::Ok();
    if (w.w == nullptr) return InvalidArgument("CudaCompute::MatMul: fp32 weights have no data");
    const std::size_t bytes =
        (static_cast<std::size_t>(w.rows - 1) * w.ld + w.cols) * sizeof(float);
    CTXPAR_ASSIGN_OR_RETURN(const void* weights, Resident(w.w, bytes));
    MatMulF32Args a;
    a.w = static_cast<const float*>(weights);
    a.ldw = w.ld;
    a.rows = w.rows;
    a.cols = w.cols;
    a.x = x.f32();
    a.ldx = x.ld;
    a.n = static_cast<int>(x.rows);
    a.y = y.f32();
    a.ldy = y.ld;
    return CudaStatus(LaunchMatMulF32(a, stream_), "CudaCompute::MatMul launch");
  }());
}

void CudaCompute::RmsNorm(const compute::Tensor& x, const float* weight, float eps,
                          const compute::Tensor& y) {
  Record(Norm("RmsNorm", x, weight, eps, y, /*accumulate=*/false));
}

void CudaCompute::AddRmsNorm(const compute::Tensor& y, const float* weight, float eps,
                             const compute::Tensor& x) {
  Record(Norm("AddRmsNorm", y, weight, eps, x, /*accumulate=*/true));
}

Status CudaCompute::Norm(std::string_view op, const compute::Tensor& in, const float* weight,
                         float eps, const compute::Tensor& out, bool accumulate) {
  CTXPAR_RETURN_IF_ERROR(Bind());
  const std::string what = fmt::format("CudaCompute::{}", op);
  CTXPAR_RETURN_IF_ERROR(CheckOperand(in, (what + "'s input").c_str()));
  CTXPAR_RETURN_IF_ERROR(CheckOperand(out, (what + "'s output").c_str()));
  CTXPAR_RETURN_IF_ERROR(SameShape(what.c_str(), in, "input", out, "output"));
  if (Empty(in)) return Status::Ok();
  if (weight == nullptr) return InvalidArgument(what + ": weight is null");
  const HostArray arrays[] = {{weight, in.cols * sizeof(float)}};
  const void* staged[1];
  CTXPAR_RETURN_IF_ERROR(Stage(arrays, staged));
  return CudaStatus(LaunchRmsNorm(RowsOf(in), static_cast<const float*>(staged[0]), eps,
                                  RowsOf(out), accumulate, stream_),
                    (what + " launch").c_str());
}

void CudaCompute::SumsOfSquares(const compute::Tensor& x, int group, double* out,
                                std::int64_t out_ld) {
  Record([&]() -> Status {
    CTXPAR_RETURN_IF_ERROR(Bind());
    CTXPAR_RETURN_IF_ERROR(CheckOperand(x, "SumsOfSquares' x"));
    if (group < 1 || x.cols % group != 0 || out_ld < x.cols / group) {
      return InvalidArgument("CudaCompute::SumsOfSquares: group " + std::to_string(group) +
                             " and out_ld " + std::to_string(out_ld) + " for x " + Shape(x) +
                             ": needs group >= 1 dividing cols and out_ld >= cols / group");
    }
    if (Empty(x)) return Status::Ok();
    CTXPAR_RETURN_IF_ERROR(CheckAddressable(out, "SumsOfSquares' out"));
    return CudaStatus(LaunchSumsOfSquares(RowsOf(x), group, out, out_ld, stream_),
                      "CudaCompute::SumsOfSquares launch");
  }());
}

void CudaCompute::ScaleRows(const compute::Tensor& x, const float* scales, const float* weight) {
  Record([&]() -> Status {
    CTXPAR_RETURN_IF_ERROR(Bind());
    CTXPAR_RETURN_IF_ERROR(CheckOperand(x, "ScaleRows' x"));
    if (Empty(x)) return Status::Ok();
    if (scales == nullptr) return InvalidArgument("CudaCompute::ScaleRows: scales is null");
    const HostArray arrays[] = {{scales, x.rows * sizeof(float)},
                                {weight, weight != nullptr ? x.cols * sizeof(float) : 0}};
    const void* staged[2];
    CTXPAR_RETURN_IF_ERROR(Stage(std::span(arrays, weight != nullptr ? 2 : 1), staged));
    return CudaStatus(
        LaunchScaleRows(RowsOf(x), static_cast<const float*>(staged[0]),
                        weight != nullptr ? static_cast<const float*>(staged[1]) : nullptr,
                        stream_),
        "CudaCompute::ScaleRows launch");
  }());
}

void CudaCompute::AddBias(const compute::Tensor& x, const float* bias) {
  Record([&]() -> Status {
    CTXPAR_RETURN_IF_ERROR(Bind());
    CTXPAR_RETURN_IF_ERROR(CheckOperand(x, "AddBias' x"));
    if (Empty(x)) return Status::Ok();
    if (bias == nullptr) return InvalidArgument("CudaCompute::AddBias: bias is null");
    const HostArray arrays[] = {{bias, x.cols * sizeof(float)}};
    const void* staged[1];
    CTXPAR_RETURN_IF_ERROR(Stage(arrays, staged));
    return CudaStatus(LaunchAddBias(RowsOf(x), static_cast<const float*>(staged[0]), stream_),
                      "CudaCompute::AddBias launch");
  }());
}

void CudaCompute::Add(const compute::Tensor& x, const compute::Tensor& y) {
  Record([&]() -> Status {
    CTXPAR_RETURN_IF_ERROR(Bind());
    CTXPAR_RETURN_IF_ERROR(CheckOperand(x, "Add's x"));
    CTXPAR_RETURN_IF_ERROR(CheckOperand(y, "Add's y"));
    CTXPAR_RETURN_IF_ERROR(SameShape("CudaCompute::Add", x, "x", y, "y"));
    return CudaStatus(LaunchAdd(RowsOf(x), RowsOf(y), stream_), "CudaCompute::Add launch");
  }());
}

void CudaCompute::Rope(compute::RopeStyle style, const compute::RopeAngles& angles,
                       std::span<const int> positions,
                       std::span<const compute::RopeTarget> targets) {
  Record([&]() -> Status {
    const int dims = angles.rope_dims();
    if (dims == 0) return Status::Ok();  // RopeAngles' "leaves x as it is"
    CTXPAR_RETURN_IF_ERROR(Bind());
    const auto n = static_cast<std::int64_t>(positions.size());
    for (const compute::RopeTarget& t : targets) {
      CTXPAR_RETURN_IF_ERROR(CheckOperand(t.x, "Rope's target"));
      if (t.x.rows != n || t.num_heads < 0 || t.head_stride < dims ||
          (t.num_heads > 0 &&
           static_cast<std::int64_t>(t.num_heads - 1) * t.head_stride + dims > t.x.cols)) {
        return InvalidArgument("CudaCompute::Rope: a target " + Shape(t.x) + " of " +
                               std::to_string(t.num_heads) + " heads at stride " +
                               std::to_string(t.head_stride) + " for " + std::to_string(n) +
                               " positions and rope_dims " + std::to_string(dims) +
                               ": needs one row per position and its heads inside the row");
      }
    }
    if (n == 0 || targets.empty()) return Status::Ok();
    std::vector<float> table(static_cast<std::size_t>(n) * dims);
    for (std::int64_t r = 0; r < n; ++r) angles.CosSin(positions[r], table.data() + r * dims);
    const HostArray arrays[] = {{table.data(), table.size() * sizeof(float)}};
    const void* staged[1];
    CTXPAR_RETURN_IF_ERROR(Stage(arrays, staged));
    for (const compute::RopeTarget& t : targets) {
      CTXPAR_RETURN_IF_ERROR(
          CudaStatus(LaunchRope(style == compute::RopeStyle::kNeox, RowsOf(t.x), t.num_heads,
                                t.head_stride, static_cast<const float*>(staged[0]), dims, stream_),
                     "CudaCompute::Rope launch"));
    }
    return Status::Ok();
  }());
}

void CudaCompute::Gated(compute::GatedActivation act, const compute::Tensor& gate,
                        const compute::Tensor& up, const compute::Tensor& out) {
  Record([&]() -> Status {
    CTXPAR_RETURN_IF_ERROR(Bind());
    CTXPAR_RETURN_IF_ERROR(CheckOperand(gate, "Gated's gate"));
    CTXPAR_RETURN_IF_ERROR(CheckOperand(up, "Gated's up"));
    CTXPAR_RETURN_IF_ERROR(CheckOperand(out, "Gated's out"));
    CTXPAR_RETURN_IF_ERROR(SameShape("CudaCompute::Gated", gate, "gate", up, "up"));
    CTXPAR_RETURN_IF_ERROR(SameShape("CudaCompute::Gated", gate, "gate", out, "out"));
    KernelGate kernel = KernelGate::kSwiGlu;
    switch (act) {
      case compute::GatedActivation::kSwiGlu:
        kernel = KernelGate::kSwiGlu;
        break;
      case compute::GatedActivation::kGeGlu:
        kernel = KernelGate::kGeGlu;
        break;
      case compute::GatedActivation::kSwiGluOai:
        kernel = KernelGate::kSwiGluOai;
        break;
    }
    return CudaStatus(LaunchGated(kernel, RowsOf(gate), RowsOf(up), RowsOf(out),
                                  compute::kSwiGluOaiAlpha, compute::kSwiGluOaiLimit, stream_),
                      "CudaCompute::Gated launch");
  }());
}

Expected<CudaAttentionPlan> CudaCompute::PlanAttention(const PartialAttentionParams& params,
                                                       int max_kv_len) {
  const int keys = params.split_kv_keys;
  if (keys > 0 && keys % kCudaKeysPerSplitQuantum == 0) {
    // One split per absolute chunk of `keys`: force that many splits over whole chunks (capped
    // at the cache's capacity); a plan whose splits are not exactly `keys` long is not taken.
    const std::int64_t splits = std::max<std::int64_t>(1, (max_kv_len + keys - 1) / keys);
    const std::int64_t bound =
        std::min(splits * keys,
                 static_cast<std::int64_t>(params.kv.max_pages_per_seq) * params.kv.page_size);
    if (bound >= max_kv_len && bound <= INT_MAX) {
      Expected<CudaAttentionPlan> plan = PlanPartialAttentionCuda(
          params, static_cast<int>(bound), num_sms_, static_cast<int>(splits));
      if (plan.ok() && plan->keys_per_split == keys) return plan;
    }
  }
  return PlanPartialAttentionCuda(params, max_kv_len, num_sms_);
}

Status CudaCompute::PartialAttention(const PartialAttentionParams& params) {
  constexpr const char* kApi = "CudaCompute::PartialAttention";
  CTXPAR_RETURN_IF_ERROR(Bind());
  if (params.kv.dtype != DataType::kBF16) {
    return Unimplemented(std::string(kApi) + ": " + std::string(DataTypeName(params.kv.dtype)) +
                         " KV; the CUDA kernels read bf16 KV only");
  }
  if (params.chunks != nullptr) {
    return Unimplemented(std::string(kApi) +
                         ": chunk states (params.chunks); the CUDA kernels write merged O and lse");
  }
  if (params.num_rows > 0) {
    CTXPAR_RETURN_IF_ERROR(CheckAddressable(params.q, "PartialAttention's q"));
    CTXPAR_RETURN_IF_ERROR(CheckAddressable(params.o, "PartialAttention's o"));
    CTXPAR_RETURN_IF_ERROR(CheckAddressable(params.lse, "PartialAttention's lse"));
    CTXPAR_RETURN_IF_ERROR(CheckAddressable(params.kv.k, "PartialAttention's kv.k"));
    CTXPAR_RETURN_IF_ERROR(
        CheckAddressable(params.kv.block_table, "PartialAttention's kv.block_table"));
    if (params.kv.v != nullptr) {
      CTXPAR_RETURN_IF_ERROR(CheckAddressable(params.kv.v, "PartialAttention's kv.v"));
    }
    if (params.row_seq != nullptr) {
      CTXPAR_RETURN_IF_ERROR(CheckAddressable(params.row_seq, "PartialAttention's row_seq"));
    }
    if (params.row_kv_start != nullptr) {
      CTXPAR_RETURN_IF_ERROR(
          CheckAddressable(params.row_kv_start, "PartialAttention's row_kv_start"));
    }
    CTXPAR_RETURN_IF_ERROR(CheckAddressable(params.row_kv_len, "PartialAttention's row_kv_len"));
    cudaPointerAttributes attr;
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attr, params.row_kv_len));
    if (attr.type != cudaMemoryTypeManaged && attr.type != cudaMemoryTypeHost) {
      return InvalidArgument(std::string(kApi) +
                             ": row_kv_len is device memory; the host reads it to plan the "
                             "split, so it must be managed (Allocate) or pinned host memory");
    }
  }
  if (!concurrent_managed_) {
    // Without concurrent managed access the host must not touch managed memory while kernels run.
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  }
  int max_kv_len = 0;
  for (int i = 0; i < params.num_rows; ++i) {
    max_kv_len = std::max(max_kv_len, params.row_kv_len[i]);
  }
  CTXPAR_ASSIGN_OR_RETURN(const CudaAttentionPlan plan, PlanAttention(params, max_kv_len));
  CTXPAR_RETURN_IF_ERROR(Reserve(&workspace_, plan.workspace_bytes));
  return PartialAttentionCuda(params, plan, workspace_.data(), stream_);
}

Status CudaCompute::Synchronize() {
  const Status synced = [&]() -> Status {
    CTXPAR_RETURN_IF_ERROR(Bind());
    CTXPAR_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }();
  Status first = std::move(error_);
  error_ = Status::Ok();
  return first.ok() ? synced : first;
}

}  // namespace ctxpar::cuda
