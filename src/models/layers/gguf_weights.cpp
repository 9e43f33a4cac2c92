#include "models/layers/gguf_weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string_view>

#include "ctxpar/error_catalog.h"
#include "ctxpar/gguf_hparams.h"

namespace ctxpar::model {

Expected<int> GgufVocabSize(const GgufFile& f, int dim) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* embd, f.FindTensor("token_embd.weight"));
  if (embd->shape.size() != 2 || embd->shape[0] != dim || embd->shape[1] < 1 ||
      embd->shape[1] > (1 << 30)) {
    return HparamError(f, "the shape of tensor token_embd.weight",
                       fmt::format("[{}]", fmt::join(embd->shape, ", ")),
                       fmt::format("it must be [{}, n_vocab] with n_vocab in [1, 2^30]", dim));
  }
  const int vocab = static_cast<int>(embd->shape[1]);
  // The key, where the file has it, must state the same size.
  CTXPAR_ASSIGN_OR_RETURN(const std::string arch, f.GetString("general.architecture"));
  const std::string key = arch + ".vocab_size";
  if (f.Find(key) != nullptr) {
    CTXPAR_ASSIGN_OR_RETURN(const int stated, ReadIntHparam(f, key, 1, 1 << 30));
    if (stated != vocab) {
      return HparamError(f, key, stated,
                         fmt::format("token_embd.weight has {} rows (the vocabulary)", vocab));
    }
  }
  return vocab;
}

Expected<DenseBlockWeights> GgufDenseBlock(const GgufFile& f, const std::string& prefix,
                                           const HeadLayout& l, const HeadShard& s,
                                           ActFormat format, bool fused, bool with_mlp) {
  const int hd = l.head_dim;
  const int q_width = l.num_heads * hd, kv_width = l.num_kv_heads * hd;
  const int ffn_first = s.ffn_bounds[s.tp_rank];
  const int ffn_count = s.ffn_bounds[s.tp_rank + 1] - ffn_first;
  const int dim_first = s.dim_bounds[s.tp_rank];
  const int dim_count = s.dim_bounds[s.tp_rank + 1] - dim_first;
  const std::string& b = prefix;
  if (fused) {
    // Rows [q | k | v] and [gate | up] of one matrix each: the same rows of each part as below.
    CTXPAR_ASSIGN_OR_RETURN(
        auto qkv, GgufMatrix(f, b + "attn_qkv.weight", l.dim, q_width + 2 * kv_width, format));
    CTXPAR_ASSIGN_OR_RETURN(auto wo,
                            GgufMatrix(f, b + "attn_output.weight", q_width, l.dim, format));
    CTXPAR_ASSIGN_OR_RETURN(auto gate_up,
                            GgufMatrix(f, b + "ffn_up.weight", l.dim, 2 * l.ffn_dim, format));
    CTXPAR_ASSIGN_OR_RETURN(auto down,
                            GgufMatrix(f, b + "ffn_down.weight", l.ffn_dim, l.dim, format));
    return DenseBlockWeights{
        .wq = qkv.RowRange(s.q_first * hd, s.q_heads * hd),
        .wk = qkv.RowRange(q_width + s.kv_first * hd, s.kv_heads * hd),
        .wv = qkv.RowRange(q_width + kv_width + s.kv_first * hd, s.kv_heads * hd),
        .wo = wo.RowRange(dim_first, dim_count),
        .gate = gate_up.RowRange(ffn_first, ffn_count),
        .up = gate_up.RowRange(l.ffn_dim + ffn_first, ffn_count),
        .down = down.RowRange(dim_first, dim_count)};
  }
  CTXPAR_ASSIGN_OR_RETURN(auto wq, GgufMatrix(f, b + "attn_q.weight", l.dim, q_width, format));
  CTXPAR_ASSIGN_OR_RETURN(auto wk, GgufMatrix(f, b + "attn_k.weight", l.dim, kv_width, format));
  CTXPAR_ASSIGN_OR_RETURN(auto wv, GgufMatrix(f, b + "attn_v.weight", l.dim, kv_width, format));
  CTXPAR_ASSIGN_OR_RETURN(auto wo, GgufMatrix(f, b + "attn_output.weight", q_width, l.dim, format));
  auto rows = [&](const QuantMatrix& m, int first, int count) {
    return WithInt8Pack(m.RowRange(first, count), format);
  };
  if (!with_mlp) {
    return DenseBlockWeights{.wq = rows(wq, s.q_first * hd, s.q_heads * hd),
                             .wk = rows(wk, s.kv_first * hd, s.kv_heads * hd),
                             .wv = rows(wv, s.kv_first * hd, s.kv_heads * hd),
                             .wo = rows(wo, dim_first, dim_count)};
  }
  CTXPAR_ASSIGN_OR_RETURN(auto gate,
                          GgufMatrix(f, b + "ffn_gate.weight", l.dim, l.ffn_dim, format));
  CTXPAR_ASSIGN_OR_RETURN(auto up, GgufMatrix(f, b + "ffn_up.weight", l.dim, l.ffn_dim, format));
  CTXPAR_ASSIGN_OR_RETURN(auto down,
                          GgufMatrix(f, b + "ffn_down.weight", l.ffn_dim, l.dim, format));
  return DenseBlockWeights{.wq = rows(wq, s.q_first * hd, s.q_heads * hd),
                           .wk = rows(wk, s.kv_first * hd, s.kv_heads * hd),
                           .wv = rows(wv, s.kv_first * hd, s.kv_heads * hd),
                           .wo = rows(wo, dim_first, dim_count),
                           .gate = rows(gate, ffn_first, ffn_count),
                           .up = rows(up, ffn_first, ffn_count),
                           .down = rows(down, dim_first, dim_count)};
}

Status TensorError(const GgufFile& f, std::string_view tensor, const std::string& problem) {
  return CatalogError(
      "CTXPAR-MODEL-011",
      {{"path", f.path()}, {"item", fmt::format("tensor {}", tensor)}, {"problem", problem}});
}

bool Int8Weights(const GgufFile& f) {
  for (const GgufTensor& t : f.tensors()) {
    if (t.shape.size() == 2 && t.type != GgmlType::kQ4_1 && t.type != GgmlType::kQ8_0) {
      return false;
    }
  }
  return true;
}

Status CheckInt8Activations(bool llama_cpp_numerics, bool int8_weights,
                            std::string_view architecture) {
  if (!llama_cpp_numerics || int8_weights) return Status::Ok();
  return CatalogError(
      "CTXPAR-MODEL-005",
      {{"flag", "--llama-cpp-numerics"},
       {"feature", "files whose weights are all Q4_1 or Q8_0 (int8 activations)"},
       {"architecture", fmt::format("this {} file (weights of other types)", architecture)}});
}

Status CheckGgufKeys(const GgufFile& f, std::string_view architecture, const std::string& prefix,
                     std::span<const std::string_view> read) {
  for (const GgufMetadataEntry& e : f.metadata()) {
    const std::string_view key = e.key;
    if (!key.starts_with(prefix)) continue;
    if (std::find(read.begin(), read.end(), key.substr(prefix.size())) != read.end()) continue;
    return CatalogError("CTXPAR-MODEL-011",
                        {{"path", f.path()},
                         {"item", fmt::format("key {}", key)},
                         {"problem", fmt::format("is not read by ctxpar's {}: the feature it "
                                                 "states would be ignored",
                                                 architecture)}});
  }
  return Status::Ok();
}

namespace {

std::string ShapeText(const GgufTensor& t) { return fmt::format("[{}]", fmt::join(t.shape, ", ")); }

Status CheckMatrixType(const GgufFile& f, const GgufTensor& t) {
  if (WeightTypeFor(t.type).ok()) return Status::Ok();
  return TensorError(f, t.name,
                     fmt::format("has ggml type {}, a type no matmul kernel takes (they take {})",
                                 GgmlTypeName(t.type), kMatMulTypes));
}

// Where the float values of t lie: each block of `block` bytes holds `count` of `width` bytes
// from `offset` (fp32, or fp16 / bf16 bits).
struct FloatSlots {
  std::size_t block, offset;
  int count, width;
  bool bf16;
};

// The weights of a float type, the scales (d, and m or dmin) of a quantized one.
std::optional<FloatSlots> SlotsOf(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return FloatSlots{4, 0, 1, 4, false};
    case GgmlType::kF16:
      return FloatSlots{2, 0, 1, 2, false};
    case GgmlType::kBF16:
      return FloatSlots{2, 0, 1, 2, true};
    case GgmlType::kQ4_0:
      return FloatSlots{sizeof(BlockQ4_0), 0, 1, 2, false};
    case GgmlType::kQ4_1:
      return FloatSlots{sizeof(BlockQ4_1), 0, 2, 2, false};
    case GgmlType::kQ5_1:
      return FloatSlots{sizeof(BlockQ5_1), 0, 2, 2, false};
    case GgmlType::kIQ4_NL:
      return FloatSlots{sizeof(BlockIQ4NL), 0, 1, 2, false};
    case GgmlType::kIQ4_XS:
      return FloatSlots{sizeof(BlockIQ4XS), 0, 1, 2, false};
    case GgmlType::kQ8_0:
      return FloatSlots{sizeof(BlockQ8_0), 0, 1, 2, false};
    case GgmlType::kQ5_0:
      return FloatSlots{sizeof(BlockQ5_0), 0, 1, 2, false};
    case GgmlType::kQ2_K:
      return FloatSlots{sizeof(BlockQ2K), offsetof(BlockQ2K, d), 2, 2, false};
    case GgmlType::kQ3_K:
      return FloatSlots{sizeof(BlockQ3K), offsetof(BlockQ3K, d), 1, 2, false};
    case GgmlType::kQ4_K:
      return FloatSlots{sizeof(BlockQ4K), 0, 2, 2, false};
    case GgmlType::kQ5_K:
      return FloatSlots{sizeof(BlockQ5K), 0, 2, 2, false};
    case GgmlType::kQ6_K:
      return FloatSlots{sizeof(BlockQ6K), offsetof(BlockQ6K, d), 1, 2, false};
    case GgmlType::kMXFP4:  // the E8M0 exponent byte
      return FloatSlots{sizeof(BlockMXFP4), 0, 1, 1, false};
    default:
      return std::nullopt;
  }
}

// CTXPAR-MODEL-011 at the first NaN or infinity among t's weights (float types) or block scales:
// such a file runs to changed text or NaN logits with no other error.
Status CheckFinite(const GgufFile& f, const GgufTensor& t) {
  const std::optional<FloatSlots> slots = SlotsOf(t.type);
  if (!slots) return Status::Ok();
  const bool weights = slots->block == std::size_t(slots->width);
  const std::size_t blocks = t.size_bytes / slots->block;
  for (std::size_t b = 0; b < blocks; ++b) {
    for (int i = 0; i < slots->count; ++i) {
      const std::uint8_t* p = t.data + b * slots->block + slots->offset + i * slots->width;
      bool finite;
      if (slots->width == 1) {
        // E8M0's NaN (OCP); ggml would read it as 2^127, whose product with 12 overflows.
        finite = *p != 0xff;
      } else if (slots->width == 4) {
        std::uint32_t u;
        std::memcpy(&u, p, 4);
        finite = (u & 0x7f800000u) != 0x7f800000u;
      } else {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        const std::uint16_t exponent = slots->bf16 ? 0x7f80 : 0x7c00;
        finite = (h & exponent) != exponent;
      }
      if (!finite) {
        return TensorError(f, t.name,
                           weights ? fmt::format("holds a NaN or infinite weight (element {})", b)
                                   : fmt::format("holds a NaN or infinite scale (block {})", b));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckGgufTensors(const GgufFile& f, std::string_view architecture, int num_layers,
                        std::span<const std::string_view> globals,
                        std::span<const std::string_view> per_layer) {
  for (const GgufTensor& t : f.tensors()) {
    std::string_view name = t.name;
    bool known = std::find(globals.begin(), globals.end(), name) != globals.end();
    if (!known && name.starts_with("blk.")) {
      const std::size_t dot = name.find('.', 4);
      const std::string_view index = name.substr(4, dot == std::string_view::npos ? 0 : dot - 4);
      int layer = -1;
      const auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), layer);
      if (!index.empty() && ec == std::errc() && end == index.data() + index.size() &&
          layer >= num_layers) {
        return TensorError(f, name,
                           fmt::format("belongs to layer {}, past the {} layers of block_count",
                                       layer, num_layers));
      }
      known =
          !index.empty() && ec == std::errc() && end == index.data() + index.size() &&
          std::find(per_layer.begin(), per_layer.end(), name.substr(dot + 1)) != per_layer.end();
    }
    if (!known) {
      return TensorError(f, name,
                         fmt::format("is not a weight of {}: it would be ignored", architecture));
    }
    if (t.shape.size() >= 2) {
      CTXPAR_RETURN_IF_ERROR(CheckMatrixType(f, t));
    } else if (t.type != GgmlType::kF32) {
      return TensorError(
          f, name,
          fmt::format("is a vector of type {}; vectors must be F32", GgmlTypeName(t.type)));
    }
    CTXPAR_RETURN_IF_ERROR(CheckFinite(f, t));
  }
  return Status::Ok();
}

Expected<QuantMatrix> GgufMatrix(const GgufFile& f, const std::string& name, int64_t cols,
                                 int64_t rows, ActFormat format) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f.FindTensor(name));
  if (t->shape.size() != 2 || t->shape[0] != cols || t->shape[1] != rows) {
    return TensorError(f, name,
                       fmt::format("has shape {}, but the hyperparameters make it [{}, {}]",
                                   ShapeText(*t), cols, rows));
  }
  QuantMatrix m;
  CTXPAR_RETURN_IF_ERROR(CheckMatrixType(f, *t));
  m.type = *WeightTypeFor(t->type);
  const Status format_ok = CheckActFormat(format, m.type);
  if (!format_ok.ok()) {
    return Status(format_ok.code(), fmt::format("tensor {}: {}", name, format_ok.message()));
  }
  m.data = t->data;
  m.rows = static_cast<int>(rows);
  m.cols = static_cast<int>(cols);
  m.row_stride = t->row_bytes();
  return m;
}

Expected<QuantMatrix> GgufExperts(const GgufFile& f, const std::string& name, int64_t cols,
                                  int64_t rows, int64_t experts) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f.FindTensor(name));
  if (t->shape.size() != 3 || t->shape[0] != cols || t->shape[1] != rows ||
      t->shape[2] != experts) {
    return TensorError(f, name,
                       fmt::format("has shape {}, but the hyperparameters make it [{}, {}, {}]",
                                   ShapeText(*t), cols, rows, experts));
  }
  CTXPAR_RETURN_IF_ERROR(CheckMatrixType(f, *t));
  QuantMatrix m;
  m.type = *WeightTypeFor(t->type);
  m.data = t->data;
  m.rows = static_cast<int>(rows * experts);
  m.cols = static_cast<int>(cols);
  m.row_stride = t->row_bytes();
  return m;
}

Expected<const float*> GgufVector(const GgufFile& f, const std::string& name, int64_t dim) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f.FindTensor(name));
  if (t->type != GgmlType::kF32 || t->num_elements() != dim) {
    return TensorError(f, name,
                       fmt::format("is {} of shape {}, but it must be F32 with {} elements",
                                   GgmlTypeName(t->type), ShapeText(*t), dim));
  }
  return reinterpret_cast<const float*>(t->data);
}

Status GgufVectors(const GgufFile& f, const std::string& prefix,
                   std::initializer_list<VectorSlot> slots) {
  for (const VectorSlot& slot : slots) {
    CTXPAR_ASSIGN_OR_RETURN(*slot.out, GgufVector(f, prefix + slot.name, slot.dim));
  }
  return Status::Ok();
}

}  // namespace ctxpar::model
