// GGUF model files (versions 2 and 3, little-endian): metadata, tensor infos and tensor data.
//
// Open() memory-maps the file read-only and keeps it mapped while any copy of the GgufFile
// lives; tensor data is never copied. Copies share the mapping but duplicate the metadata (a
// vocabulary is ~100k strings): move the object or share a std::shared_ptr<const GgufFile>.
// As with any mapping, truncating the file on disk while it is mapped is undefined (SIGBUS). The
// parser checks every count, length and offset against the bytes that remain before it allocates,
// and that every tensor's data lies inside the data section without overlapping another's, so a
// truncated or malformed file gives kDataLoss naming the field and the offset, never a crash; a
// big-endian file or version 1 gives kUnimplemented. Errors of Open and of the lookups carry
// catalog IDs and name the file (CTXPAR-GGUF-001..007); FromBytes gives the parser's detail
// alone.
//
// Shapes follow ggml: shape[0] (ne0) is the innermost, contiguous dimension; a 2-D weight of
// shape {ne0, ne1} is ne1 rows of ne0 elements, each row stored as ggml blocks of its type.
//
// Thread safety: a GgufFile is immutable after Open(); const methods are safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ctxpar/quant.h"
#include "ctxpar/status.h"

namespace ctxpar {

// GGUF metadata value types, ids as in the GGUF specification.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u32", "string", "array", ...
std::string_view GgufTypeName(GgufType type);

// One metadata value: a scalar, a string, or an array of one element type. Arrays of arrays
// (nested up to GgufFile::kMaxArrayDepth) hold their elements as GgufValues.
class GgufValue {
 public:
  using Data = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                            std::string, uint64_t, int64_t, double, std::vector<uint8_t>,
                            std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
                            std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>,
                            std::vector<bool>, std::vector<std::string>, std::vector<uint64_t>,
                            std::vector<int64_t>, std::vector<double>, std::vector<GgufValue>>;

  explicit GgufValue(Data data) : data_(std::move(data)) {}

  GgufType type() const;
  // The element type of an array; for scalars the same as type().
  GgufType element_type() const;
  bool is_array() const { return type() == GgufType::kArray; }
  // Element count of an array; 1 for scalars.
  size_t size() const;

  // The value when it holds exactly T (a scalar type, std::string, or std::vector<E>), else
  // nullptr.
  template <typename T>
  const T* get_if() const {
    return std::get_if<T>(&data_);
  }
  const Data& data() const { return data_; }

  // "u32", "string", "array[i32]", "array[array[u8]]"
  std::string TypeName() const;

 private:
  Data data_;
};

struct GgufMetadataEntry {
  std::string key;
  GgufValue value;
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> shape;  // ne0 first (innermost)
  GgmlType type;
  uint64_t offset;      // from the start of the data section, as stored in the file
  uint64_t size_bytes;  // ggml's nbytes for this shape and type
  const uint8_t* data;  // into the mapping; valid while the GgufFile lives

  int64_t num_elements() const;
  // shape[0] for tensors with dims, 1 for 0-dim tensors.
  int64_t row_length() const;
  int64_t num_rows() const;
  size_t row_bytes() const;
};

class GgufFile {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;
  static constexpr int kMaxDims = 4;
  static constexpr int kMaxArrayDepth = 8;

  // Maps the file read-only. NotFound / InvalidArgument when it cannot be opened or mapped,
  // DataLoss / Unimplemented as above.
  static Expected<GgufFile> Open(const std::string& path);
  // Parses an in-memory image (tests, fuzzing); the GgufFile owns the bytes.
  static Expected<GgufFile> FromBytes(std::vector<uint8_t> bytes);

  // The path given to Open, or "(in-memory GGUF)" for FromBytes.
  const std::string& path() const;
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // File offset of the data section (after the tensor infos, padded to alignment()).
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const;

  // Metadata in file order.
  const std::vector<GgufMetadataEntry>& metadata() const { return metadata_; }
  // The value of a key, or nullptr.
  const GgufValue* Find(std::string_view key) const;

  // Typed lookups. NotFound naming the file and the key when it is absent (CTXPAR-GGUF-004);
  // InvalidArgument naming the file, the key, the stored and the requested type when the stored
  // type is not exactly the requested one (CTXPAR-GGUF-005).
  Expected<std::string> GetString(std::string_view key) const;
  Expected<uint32_t> GetU32(std::string_view key) const;
  Expected<int32_t> GetI32(std::string_view key) const;
  Expected<uint64_t> GetU64(std::string_view key) const;
  Expected<float> GetF32(std::string_view key) const;
  Expected<bool> GetBool(std::string_view key) const;
  // Any integer type whose value fits int64 (token ids are u32 in some files, i32 in others).
  Expected<int64_t> GetInteger(std::string_view key) const;
  // Any floating type (f32 or f64), widened.
  Expected<double> GetFloat(std::string_view key) const;
  // An array with elements of exactly type T: std::string, float, int32_t, uint32_t, ...
  template <typename T>
  Expected<std::vector<T>> GetArray(std::string_view key) const {
    CTXPAR_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(key));
    if (const auto* a = v->get_if<std::vector<T>>()) return *a;
    return WrongType(key, *v, ArrayTypeName<T>());
  }
  // A reference to the stored array, without a copy (the 49152 tokens of a vocabulary).
  template <typename T>
  Expected<const std::vector<T>*> GetArrayRef(std::string_view key) const {
    CTXPAR_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(key));
    if (const auto* a = v->get_if<std::vector<T>>()) return a;
    return WrongType(key, *v, ArrayTypeName<T>());
  }

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // NotFound naming the file and the tensor (CTXPAR-GGUF-007).
  Expected<const GgufTensor*> FindTensor(std::string_view name) const;

 private:
  struct Storage;
  class Parser;

  GgufFile() = default;
  static Expected<GgufFile> Parse(std::shared_ptr<const Storage> storage);
  Expected<const GgufValue*> Lookup(std::string_view key) const;
  template <typename T>
  Expected<T> GetExact(std::string_view key, std::string_view wanted) const;
  Status WrongType(std::string_view key, const GgufValue& v, std::string_view wanted) const;
  template <typename T>
  static std::string_view ArrayTypeName();

  std::shared_ptr<const Storage> storage_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufMetadataEntry> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Dequantizes rows [first_row, first_row + num_rows) of a tensor into dst (num_rows *
// row_length() floats); OutOfRange when the rows are not inside the tensor, Unimplemented for a
// type DequantizeRow does not support. Tensor parallelism dequantizes only its shard this way.
Status DequantizeRows(const GgufTensor& tensor, int64_t first_row, int64_t num_rows, float* dst);
// The whole tensor as fp32, in ggml order (row after row).
Expected<std::vector<float>> DequantizeTensor(const GgufTensor& tensor);

template <typename T>
std::string_view GgufFile::ArrayTypeName() {
  if constexpr (std::is_same_v<T, uint8_t>) return "array[u8]";
  if constexpr (std::is_same_v<T, int8_t>) return "array[i8]";
  if constexpr (std::is_same_v<T, uint16_t>) return "array[u16]";
  if constexpr (std::is_same_v<T, int16_t>) return "array[i16]";
  if constexpr (std::is_same_v<T, uint32_t>) return "array[u32]";
  if constexpr (std::is_same_v<T, int32_t>) return "array[i32]";
  if constexpr (std::is_same_v<T, float>) return "array[f32]";
  if constexpr (std::is_same_v<T, bool>) return "array[bool]";
  if constexpr (std::is_same_v<T, std::string>) return "array[string]";
  if constexpr (std::is_same_v<T, uint64_t>) return "array[u64]";
  if constexpr (std::is_same_v<T, int64_t>) return "array[i64]";
  if constexpr (std::is_same_v<T, double>) return "array[f64]";
  if constexpr (std::is_same_v<T, GgufValue>) return "array[array]";
}

}  // namespace ctxpar
