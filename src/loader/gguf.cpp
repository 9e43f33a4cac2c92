// GGUF parsing: the checked walk over header, metadata and tensor infos.
#include "ctxpar/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>

#include "loader/file_bytes.h"
#include "loader/loader_errors.h"

namespace ctxpar {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader copies little-endian fields straight into host integers");

struct GgufFile::Storage : loader::FileBytes {
  std::string path = "(in-memory GGUF)";
};

namespace {

constexpr uint64_t kI64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// The smallest encoding of one value of a type: how many elements an array count may claim.
uint64_t MinEncodedSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
    case GgufType::kString:  // the u64 length
      return 8;
    case GgufType::kArray:  // element type + count
      return 12;
  }
  return 1;
}

bool IsGgufType(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::kF64); }

// Every tensor's bytes are its own: two tensors whose data ranges overlap would alias weights
// (a writer bug or a crafted file), so the file is refused naming both.
Status CheckNoOverlap(const std::vector<GgufTensor>& tensors) {
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : tensors) {
    if (t.size_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& a = *by_offset[i - 1];
    const GgufTensor& b = *by_offset[i];
    if (b.offset < a.offset + a.size_bytes) {
      return DataLoss(fmt::format(
          "tensor '{}' data [{}, {}) overlaps tensor '{}' data [{}, {}) (offsets in the data "
          "section); each tensor needs bytes of its own",
          b.name, b.offset, b.offset + b.size_bytes, a.name, a.offset, a.offset + a.size_bytes));
    }
  }
  return Status::Ok();
}

}  // namespace

// Reads the GGUF image front to back. Every read checks the bytes that remain first; `what`
// callables build the field's description only when an error needs it.
class GgufFile::Parser {
 public:
  Parser(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  template <typename What>
  Status Need(uint64_t n, const What& what) const {
    if (n <= remaining()) return Status::Ok();
    return DataLoss(fmt::format("{} at offset {} needs {} bytes but only {} remain (file size {})",
                                what(), pos_, n, remaining(), size_));
  }

  template <typename T, typename What>
  Status Read(T* out, const What& what) {
    CTXPAR_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  template <typename What>
  Status ReadString(std::string* out, const What& what) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    CTXPAR_RETURN_IF_ERROR(Read(&len, [&] { return what() + " string length"; }));
    if (len > remaining()) {
      return DataLoss(fmt::format(
          "{} string length {} at offset {} exceeds the {} bytes remaining (file size {})", what(),
          len, at, remaining(), size_));
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

  template <typename What>
  Status ReadValue(GgufType type, int depth, const What& what, GgufValue::Data* out) {
    switch (type) {
      case GgufType::kU8:
        return ReadScalar<uint8_t>(what, out);
      case GgufType::kI8:
        return ReadScalar<int8_t>(what, out);
      case GgufType::kU16:
        return ReadScalar<uint16_t>(what, out);
      case GgufType::kI16:
        return ReadScalar<int16_t>(what, out);
      case GgufType::kU32:
        return ReadScalar<uint32_t>(what, out);
      case GgufType::kI32:
        return ReadScalar<int32_t>(what, out);
      case GgufType::kF32:
        return ReadScalar<float>(what, out);
      case GgufType::kU64:
        return ReadScalar<uint64_t>(what, out);
      case GgufType::kI64:
        return ReadScalar<int64_t>(what, out);
      case GgufType::kF64:
        return ReadScalar<double>(what, out);
      case GgufType::kBool: {
        uint8_t b = 0;
        CTXPAR_RETURN_IF_ERROR(ReadBoolByte(&b, what));
        *out = b != 0;
        return Status::Ok();
      }
      case GgufType::kString: {
        std::string s;
        CTXPAR_RETURN_IF_ERROR(ReadString(&s, what));
        *out = std::move(s);
        return Status::Ok();
      }
      case GgufType::kArray:
        return ReadArray(depth, what, out);
    }
    return Internal("unreachable GGUF type");
  }

 private:
  template <typename T, typename What>
  Status ReadScalar(const What& what, GgufValue::Data* out) {
    T v{};
    CTXPAR_RETURN_IF_ERROR(Read(&v, what));
    *out = v;
    return Status::Ok();
  }

  template <typename What>
  Status ReadBoolByte(uint8_t* b, const What& what) {
    const uint64_t at = pos_;
    CTXPAR_RETURN_IF_ERROR(Read(b, what));
    if (*b > 1) {
      return DataLoss(fmt::format("{} bool at offset {} is {}, not 0 or 1", what(), at, *b));
    }
    return Status::Ok();
  }

  template <typename T>
  void ReadPod(uint64_t count, GgufValue::Data* out) {
    std::vector<T> v(count);
    if (count > 0) std::memcpy(v.data(), data_ + pos_, count * sizeof(T));
    pos_ += count * sizeof(T);
    *out = std::move(v);
  }

  template <typename What>
  Status ReadArray(int depth, const What& what, GgufValue::Data* out) {
    const uint64_t at = pos_;
    uint32_t elem_id = 0;
    CTXPAR_RETURN_IF_ERROR(Read(&elem_id, [&] { return what() + " array element type"; }));
    if (!IsGgufType(elem_id)) {
      return DataLoss(fmt::format(
          "{} array element type {} at offset {} is not a GGUF type (0..12)", what(), elem_id, at));
    }
    const auto elem = static_cast<GgufType>(elem_id);
    if (elem == GgufType::kArray && depth + 1 >= kMaxArrayDepth) {
      return DataLoss(
          fmt::format("{} at offset {} nests arrays deeper than {}", what(), at, kMaxArrayDepth));
    }
    uint64_t count = 0;
    CTXPAR_RETURN_IF_ERROR(Read(&count, [&] { return what() + " array count"; }));
    // Bounds the allocation below by the file size.
    if (count > remaining() / MinEncodedSize(elem)) {
      return DataLoss(fmt::format(
          "{} array count {} of {} at offset {} exceeds the {} bytes remaining (file size {})",
          what(), count, GgufTypeName(elem), at + 4, remaining(), size_));
    }
    switch (elem) {
      case GgufType::kU8:
        ReadPod<uint8_t>(count, out);
        return Status::Ok();
      case GgufType::kI8:
        ReadPod<int8_t>(count, out);
        return Status::Ok();
      case GgufType::kU16:
        ReadPod<uint16_t>(count, out);
        return Status::Ok();
      case GgufType::kI16:
        ReadPod<int16_t>(count, out);
        return Status::Ok();
      case GgufType::kU32:
        ReadPod<uint32_t>(count, out);
        return Status::Ok();
      case GgufType::kI32:
        ReadPod<int32_t>(count, out);
        return Status::Ok();
      case GgufType::kF32:
        ReadPod<float>(count, out);
        return Status::Ok();
      case GgufType::kU64:
        ReadPod<uint64_t>(count, out);
        return Status::Ok();
      case GgufType::kI64:
        ReadPod<int64_t>(count, out);
        return Status::Ok();
      case GgufType::kF64:
        ReadPod<double>(count, out);
        return Status::Ok();
      case GgufType::kBool: {
        std::vector<bool> v(count);
        for (uint64_t i = 0; i < count; ++i) {
          uint8_t b = 0;
          CTXPAR_RETURN_IF_ERROR(
              ReadBoolByte(&b, [&] { return fmt::format("{} element {}", what(), i); }));
          v[i] = b != 0;
        }
        *out = std::move(v);
        return Status::Ok();
      }
      case GgufType::kString: {
        std::vector<std::string> v(count);
        for (uint64_t i = 0; i < count; ++i) {
          CTXPAR_RETURN_IF_ERROR(
              ReadString(&v[i], [&] { return fmt::format("{} element {}", what(), i); }));
        }
        *out = std::move(v);
        return Status::Ok();
      }
      case GgufType::kArray: {
        std::vector<GgufValue> v;
        v.reserve(count);
        for (uint64_t i = 0; i < count; ++i) {
          GgufValue::Data d;
          // Type-erased so that the recursion instantiates one template, not one per depth.
          const std::function<std::string()> element_what = [&] {
            return fmt::format("{} element {}", what(), i);
          };
          CTXPAR_RETURN_IF_ERROR(ReadArray(depth + 1, element_what, &d));
          v.emplace_back(std::move(d));
        }
        *out = std::move(v);
        return Status::Ok();
      }
    }
    return Internal("unreachable GGUF array type");
  }

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Expected<GgufFile> GgufFile::Parse(std::shared_ptr<const Storage> storage) {
  GgufFile file;
  Parser p(storage->data(), storage->size());
  const uint64_t size = storage->size();

  char magic[4];
  CTXPAR_RETURN_IF_ERROR(p.Read(&magic, [] { return std::string("magic"); }));
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    return DataLoss(fmt::format("magic at offset 0 is {:02x} {:02x} {:02x} {:02x}, not 'GGUF'",
                                static_cast<uint8_t>(magic[0]), static_cast<uint8_t>(magic[1]),
                                static_cast<uint8_t>(magic[2]), static_cast<uint8_t>(magic[3])));
  }
  uint32_t version = 0;
  CTXPAR_RETURN_IF_ERROR(p.Read(&version, [] { return std::string("version"); }));
  const uint32_t swapped = __builtin_bswap32(version);
  if (swapped == 2 || swapped == 3) {
    return Unimplemented(fmt::format(
        "GGUF version field at offset 4 reads {} as big-endian: big-endian GGUF files are not "
        "supported",
        swapped));
  }
  if (version == 1) {
    return Unimplemented("GGUF version 1 (32-bit counts) is not supported; versions 2 and 3 are");
  }
  if (version != 2 && version != 3) {
    return DataLoss(
        fmt::format("version at offset 4 is {}; GGUF versions 2 and 3 are supported", version));
  }
  file.version_ = version;

  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
  CTXPAR_RETURN_IF_ERROR(p.Read(&tensor_count, [] { return std::string("tensor count"); }));
  CTXPAR_RETURN_IF_ERROR(p.Read(&kv_count, [] { return std::string("metadata key count"); }));
  // A key is at least its length, its type and a one-byte value.
  if (kv_count > p.remaining() / 13) {
    return DataLoss(fmt::format(
        "metadata key count {} at offset 16 exceeds what the {} bytes remaining can hold", kv_count,
        p.remaining()));
  }

  file.metadata_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    CTXPAR_RETURN_IF_ERROR(
        p.ReadString(&key, [&] { return fmt::format("metadata key #{} name", i); }));
    const auto what = [&] { return fmt::format("metadata key #{} ('{}')", i, key); };
    const uint64_t type_at = p.pos();
    uint32_t type_id = 0;
    CTXPAR_RETURN_IF_ERROR(p.Read(&type_id, [&] { return what() + " value type"; }));
    if (!IsGgufType(type_id)) {
      return DataLoss(fmt::format("{} value type {} at offset {} is not a GGUF type (0..12)",
                                  what(), type_id, type_at));
    }
    GgufValue::Data data;
    CTXPAR_RETURN_IF_ERROR(p.ReadValue(static_cast<GgufType>(type_id), 0, what, &data));
    if (file.metadata_index_.count(key) != 0) {
      return DataLoss(fmt::format("{} at offset {} repeats an earlier key", what(), type_at));
    }
    file.metadata_index_.emplace(key, file.metadata_.size());
    file.metadata_.push_back({std::move(key), GgufValue(std::move(data))});
  }

  if (const GgufValue* a = file.Find("general.alignment")) {
    const auto* v = a->get_if<uint32_t>();
    if (v == nullptr) {
      return DataLoss(fmt::format("general.alignment has type {}; it must be u32", a->TypeName()));
    }
    if (*v == 0 || (*v & (*v - 1)) != 0) {
      return DataLoss(fmt::format("general.alignment is {}; it must be a power of two", *v));
    }
    file.alignment_ = *v;
  }

  // name length + n_dims + type + offset, with no dims.
  if (tensor_count > p.remaining() / 24) {
    return DataLoss(fmt::format(
        "tensor count {} at offset 8 exceeds what the {} bytes remaining after the metadata can "
        "hold",
        tensor_count, p.remaining()));
  }
  file.tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t{};
    CTXPAR_RETURN_IF_ERROR(
        p.ReadString(&t.name, [&] { return fmt::format("tensor #{} name", i); }));
    const auto what = [&] { return fmt::format("tensor #{} ('{}')", i, t.name); };
    const uint64_t dims_at = p.pos();
    uint32_t n_dims = 0;
    CTXPAR_RETURN_IF_ERROR(p.Read(&n_dims, [&] { return what() + " dimension count"; }));
    if (n_dims > kMaxDims) {
      return DataLoss(fmt::format("{} dimension count {} at offset {} exceeds {}", what(), n_dims,
                                  dims_at, kMaxDims));
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t at = p.pos();
      uint64_t ne = 0;
      CTXPAR_RETURN_IF_ERROR(p.Read(&ne, [&] { return fmt::format("{} ne[{}]", what(), d); }));
      if (ne > kI64Max) {
        return DataLoss(
            fmt::format("{} ne[{}] = {} at offset {} exceeds int64", what(), d, ne, at));
      }
      const auto sne = static_cast<int64_t>(ne);
      if (sne != 0 && elements > std::numeric_limits<int64_t>::max() / sne) {
        return DataLoss(fmt::format("{} element count overflows int64 at ne[{}] = {} (offset {})",
                                    what(), d, ne, at));
      }
      elements *= sne;
      t.shape.push_back(sne);
    }
    const uint64_t type_at = p.pos();
    uint32_t type_id = 0;
    CTXPAR_RETURN_IF_ERROR(p.Read(&type_id, [&] { return what() + " type"; }));
    const GgmlTypeTraits* traits = FindGgmlType(type_id);
    if (traits == nullptr) {
      return DataLoss(
          fmt::format("{} type id {} at offset {} is not a ggml type", what(), type_id, type_at));
    }
    t.type = traits->type;
    const int64_t ne0 = t.row_length();
    if (ne0 % traits->block_size != 0) {
      return DataLoss(fmt::format("{} ne[0] = {} is not a multiple of the {} block size {}", what(),
                                  ne0, traits->name, traits->block_size));
    }
    // bytes = elements / block_size * type_size; type_size < 2^9 keeps the bound exact.
    const int64_t blocks = elements / traits->block_size;
    if (blocks > std::numeric_limits<int64_t>::max() / traits->type_size) {
      return DataLoss(fmt::format("{} byte size overflows int64 ({} elements of {})", what(),
                                  elements, traits->name));
    }
    t.size_bytes = static_cast<uint64_t>(blocks * traits->type_size);
    const uint64_t offset_at = p.pos();
    CTXPAR_RETURN_IF_ERROR(p.Read(&t.offset, [&] { return what() + " data offset"; }));
    if (t.offset % file.alignment_ != 0) {
      return DataLoss(
          fmt::format("{} data offset {} at offset {} is not a multiple of the "
                      "alignment {}",
                      what(), t.offset, offset_at, file.alignment_));
    }
    if (file.tensor_index_.count(t.name) != 0) {
      return DataLoss(
          fmt::format("{} at offset {} repeats an earlier tensor name", what(), dims_at));
    }
    file.tensor_index_.emplace(t.name, file.tensors_.size());
    file.tensors_.push_back(std::move(t));
  }

  // pos <= size < 2^63 and alignment <= 2^31, so the rounding cannot overflow.
  file.data_offset_ = (p.pos() + file.alignment_ - 1) / file.alignment_ * file.alignment_;
  const uint64_t data_room = file.data_offset_ <= size ? size - file.data_offset_ : 0;
  for (GgufTensor& t : file.tensors_) {
    if (file.data_offset_ > size || t.offset > data_room || t.size_bytes > data_room - t.offset) {
      uint64_t begin = 0;
      uint64_t end = 0;
      if (__builtin_add_overflow(file.data_offset_, t.offset, &begin) ||
          __builtin_add_overflow(begin, t.size_bytes, &end)) {
        return DataLoss(fmt::format(
            "tensor '{}' data at {} + {} ({} bytes) overflows the file offsets (size {})", t.name,
            file.data_offset_, t.offset, t.size_bytes, size));
      }
      return DataLoss(fmt::format("tensor '{}' data [{}, {}) past end of file (size {})", t.name,
                                  begin, end, size));
    }
    t.data = storage->data() + file.data_offset_ + t.offset;
  }
  CTXPAR_RETURN_IF_ERROR(CheckNoOverlap(file.tensors_));
  file.storage_ = std::move(storage);
  return file;
}

Expected<GgufFile> GgufFile::Open(const std::string& path) {
  static constexpr loader_internal::OpenErrorIds kIds{"CTXPAR-GGUF-001", "CTXPAR-GGUF-002",
                                                      "CTXPAR-GGUF-003"};
  auto storage = std::make_shared<Storage>();
  storage->path = path;
  if (std::optional<loader::MapFailure> failure = storage->Map(path)) {
    return loader_internal::CannotOpen(kIds, path, *failure);
  }
  auto file = Parse(std::move(storage));
  if (!file.ok()) return loader_internal::ParseFailed(kIds, path, file.status());
  return file;
}

Expected<GgufFile> GgufFile::FromBytes(std::vector<uint8_t> bytes) {
  auto storage = std::make_shared<Storage>();
  storage->Hold(std::move(bytes));
  return Parse(std::move(storage));
}

uint64_t GgufFile::file_size() const { return storage_ ? storage_->size() : 0; }

const std::string& GgufFile::path() const {
  static const std::string kNone;
  return storage_ ? storage_->path : kNone;
}

}  // namespace ctxpar
