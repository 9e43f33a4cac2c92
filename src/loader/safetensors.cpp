// safetensors: the checked parse of the header, the file mapping and sharded checkpoints.
#include "ctxpar/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "ctxpar/error_catalog.h"
#include "loader/file_bytes.h"
#include "loader/loader_errors.h"

namespace ctxpar {

static_assert(std::endian::native == std::endian::little,
              "the safetensors reader copies little-endian values straight into host types");

struct SafetensorsFile::Storage : loader::FileBytes {};

namespace {

using Json = nlohmann::json;

// The safetensors dtypes ctxpar reads, and the others, which it names when refusing.
struct ReadableDtype {
  std::string_view name;
  DataType dtype;
};
constexpr ReadableDtype kReadable[] = {{"F32", DataType::kF32},
                                       {"BF16", DataType::kBF16},
                                       {"F16", DataType::kF16},
                                       {"F64", DataType::kF64}};
constexpr std::string_view kOtherDtypes[] = {
    "BOOL", "U8",      "I8",      "I16",     "U16", "I32",     "U32",     "I64",
    "U64",  "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

// A non-negative integer of the header, or nullopt (a float, a negative number, anything else).
std::optional<uint64_t> Unsigned(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// One header entry, checked; `where` locates it in messages.
Expected<SafetensorsTensor> ParseEntry(const std::string& name, const Json& entry) {
  const std::string where = fmt::format("tensor '{}'", name);
  if (!entry.is_object()) return DataLoss(fmt::format("{}: the entry is not a JSON object", where));
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return DataLoss(fmt::format("{}: unknown field '{}'", where, key));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) return DataLoss(fmt::format("{}: no '{}' field", where, key));
  }
  SafetensorsTensor t;
  t.name = name;
  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) return DataLoss(fmt::format("{}: dtype is not a string", where));
  const std::string dtype_name = dtype.get<std::string>();
  const ReadableDtype* known = nullptr;
  for (const ReadableDtype& d : kReadable) {
    if (d.name == dtype_name) known = &d;
  }
  if (known == nullptr) {
    if (std::find(std::begin(kOtherDtypes), std::end(kOtherDtypes), dtype_name) !=
        std::end(kOtherDtypes)) {
      return Unimplemented(fmt::format("{}: dtype {} is not one ctxpar reads (F32, BF16, F16, F64)",
                                       where, dtype_name));
    }
    return DataLoss(fmt::format("{}: dtype '{}' is not a safetensors dtype", where, dtype_name));
  }
  t.dtype = known->dtype;
  const Json& shape = entry["shape"];
  if (!shape.is_array()) return DataLoss(fmt::format("{}: shape is not an array", where));
  uint64_t elements = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    std::optional<uint64_t> d = Unsigned(shape[i]);
    if (!d || *d > uint64_t(std::numeric_limits<int64_t>::max())) {
      return DataLoss(fmt::format("{}: shape[{}] = {} is not a non-negative integer", where, i,
                                  shape[i].dump()));
    }
    t.shape.push_back(static_cast<int64_t>(*d));
    if (*d != 0 && elements > uint64_t(std::numeric_limits<int64_t>::max()) / *d) overflow = true;
    elements *= *d;
  }
  const uint64_t elem = DataTypeSize(t.dtype);
  if (overflow || elements > uint64_t(std::numeric_limits<int64_t>::max()) / elem) {
    return DataLoss(fmt::format("{}: shape {} overflows the byte count", where, shape.dump()));
  }
  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !Unsigned(offsets[0]) ||
      !Unsigned(offsets[1])) {
    return DataLoss(fmt::format("{}: data_offsets {} is not [begin, end] of non-negative integers",
                                where, offsets.dump()));
  }
  t.begin = *Unsigned(offsets[0]);
  t.end = *Unsigned(offsets[1]);
  if (t.end < t.begin) {
    return DataLoss(
        fmt::format("{}: data_offsets [{}, {}] end before begin", where, t.begin, t.end));
  }
  if (t.end - t.begin != elements * elem) {
    return DataLoss(
        fmt::format("{}: data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", where,
                    t.begin, t.end, t.end - t.begin, shape.dump(), dtype_name, elements * elem));
  }
  return t;
}

template <typename Out>
Status Copy(const SafetensorsTensor& t, int64_t first, int64_t count, Out* out) {
  const int64_t n = t.num_elements();
  if (first < 0 || count < 0 || first > n || count > n - first) {
    return OutOfRange(fmt::format("elements [{}, {}) are not inside tensor '{}' of {} elements",
                                  first, first + count, t.name, n));
  }
  const uint8_t* src = t.data + uint64_t(first) * DataTypeSize(t.dtype);
  for (int64_t i = 0; i < count; ++i) {
    uint16_t h;
    float f;
    double d;
    switch (t.dtype) {
      case DataType::kBF16:
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = static_cast<Out>(Bf16ToFloat(h));
        break;
      case DataType::kF16:
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = static_cast<Out>(Fp16ToFp32(h));
        break;
      case DataType::kF32:
        std::memcpy(&f, src + 4 * i, 4);
        out[i] = static_cast<Out>(f);
        break;
      default:
        std::memcpy(&d, src + 8 * i, 8);
        out[i] = static_cast<Out>(d);
        break;
    }
  }
  return Status::Ok();
}

}  // namespace

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expected<SafetensorsFile> SafetensorsFile::Parse(std::shared_ptr<const Storage> storage) {
  const uint64_t size = storage->size();
  if (size < 8) {
    return DataLoss(fmt::format("the file has {} bytes; the header length alone needs 8", size));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, storage->data(), 8);
  if (header_len > kMaxHeaderBytes) {
    return DataLoss(fmt::format("header length {} at offset 0 exceeds the limit of {} bytes",
                                header_len, kMaxHeaderBytes));
  }
  if (header_len > size - 8) {
    return DataLoss(fmt::format("header length {} at offset 0 runs past the end of file (size {})",
                                header_len, size));
  }
  const char* text = reinterpret_cast<const char*>(storage->data() + 8);
  if (header_len == 0 || text[0] != '{') {
    return DataLoss("the header at offset 8 does not start with '{'");
  }
  std::set<std::string> keys;
  std::string repeated;
  const Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& value) {
    if (event == Json::parse_event_t::key && depth == 1 &&
        !keys.insert(value.get<std::string>()).second && repeated.empty()) {
      repeated = value.get<std::string>();
    }
    return true;
  };
  // The format allows trailing spaces after the object (writers pad the data to 8 bytes).
  uint64_t json_len = header_len;
  while (json_len > 0 && text[json_len - 1] == ' ') --json_len;
  Json header = Json::parse(text, text + json_len, on_event, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return DataLoss(
        fmt::format("the header at offset 8 ({} bytes) is not one JSON object", header_len));
  }
  if (!repeated.empty()) return DataLoss(fmt::format("the header repeats the key '{}'", repeated));

  SafetensorsFile file;
  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = size - data_begin;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return DataLoss("__metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return DataLoss(fmt::format("__metadata__ '{}' is not a string", key));
        }
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    CTXPAR_ASSIGN_OR_RETURN(SafetensorsTensor t, ParseEntry(name, entry));
    if (t.end > data_size) {
      return DataLoss(fmt::format(
          "tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes at "
          "offset {}, file size {})",
          name, t.begin, t.end, data_size, data_begin, size));
    }
    t.data = storage->data() + data_begin + t.begin;
    file.tensors_.push_back(std::move(t));
  }
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& t : file.tensors_) {
    if (t.begin < covered) {
      return DataLoss(fmt::format("tensor '{}' at [{}, {}) overlaps tensor '{}' at [{}, {})",
                                  t.name, t.begin, t.end, previous->name, previous->begin,
                                  previous->end));
    }
    if (t.begin > covered) {
      return DataLoss(fmt::format("tensor '{}' at [{}, {}) leaves the bytes [{}, {}) unused",
                                  t.name, t.begin, t.end, covered, t.begin));
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != data_size) {
    return DataLoss(
        fmt::format("the tensors cover {} bytes of the {}-byte data section at offset {}", covered,
                    data_size, data_begin));
  }
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_[file.tensors_[i].name] = i;
  file.storage_ = std::move(storage);
  return file;
}

Expected<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  static constexpr loader_internal::OpenErrorIds kIds{"CTXPAR-ST-001", "CTXPAR-ST-002",
                                                      "CTXPAR-ST-003"};
  auto storage = std::make_shared<Storage>();
  if (std::optional<loader::MapFailure> failure = storage->Map(path)) {
    return loader_internal::CannotOpen(kIds, path, *failure);
  }
  auto parsed = Parse(std::move(storage));
  if (!parsed.ok()) return loader_internal::ParseFailed(kIds, path, parsed.status());
  return parsed;
}

Expected<SafetensorsFile> SafetensorsFile::FromBytes(std::vector<uint8_t> bytes) {
  auto storage = std::make_shared<Storage>();
  storage->Hold(std::move(bytes));
  return Parse(std::move(storage));
}

uint64_t SafetensorsFile::file_size() const { return storage_ ? storage_->size() : 0; }

Expected<const SafetensorsTensor*> SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) return NotFound(fmt::format("no tensor named '{}'", name));
  return &tensors_[it->second];
}

Status CopyElements(const SafetensorsTensor& tensor, int64_t first, int64_t count, float* out) {
  return Copy(tensor, first, count, out);
}

Status CopyElements(const SafetensorsTensor& tensor, int64_t first, int64_t count, double* out) {
  return Copy(tensor, first, count, out);
}

namespace {

// weight_map of an index file: tensor name -> file name (a plain name inside the directory).
Expected<std::map<std::string, std::string>> ReadWeightMap(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return DataLoss(fmt::format("cannot read '{}'", path));
  Json index = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return DataLoss(fmt::format("{}: not a JSON object with a weight_map object", path));
  }
  std::map<std::string, std::string> map;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      return DataLoss(fmt::format("{}: weight_map '{}' is not a file name", path, tensor));
    }
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      return DataLoss(
          fmt::format("{}: weight_map '{}' names '{}', which is not a file of the "
                      "directory",
                      path, tensor, f));
    }
    map[tensor] = f;
  }
  return map;
}

Status Inconsistent(const std::string& dir, const std::string& detail) {
  return CatalogError("CTXPAR-ST-004", {{"dir", PyRepr(dir)}, {"detail", detail}});
}

}  // namespace

Expected<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& dir) {
  SafetensorsCheckpoint ckpt;
  ckpt.dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> names;
  if (std::filesystem::exists(index_path)) {
    auto read = ReadWeightMap(index_path);
    if (!read.ok()) return Inconsistent(dir, read.status().message());
    weight_map = std::move(*read);
    std::set<std::string> unique;
    for (const auto& [tensor, file] : weight_map) unique.insert(file);
    names.assign(unique.begin(), unique.end());
  } else {
    names.push_back("model.safetensors");
  }
  for (const std::string& name : names) {
    CTXPAR_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(dir + "/" + name));
    ckpt.files_.push_back(std::move(f));
  }
  for (size_t i = 0; i < ckpt.files_.size(); ++i) {
    for (const SafetensorsTensor& t : ckpt.files_[i].tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end() || it->second != names[i]) {
          return Inconsistent(
              dir, fmt::format("{}: tensor '{}' is not where {} puts it ({})", names[i], t.name,
                               index_path, it == weight_map.end() ? "nowhere" : it->second));
        }
      }
      if (!ckpt.index_.emplace(t.name, &t).second) {
        return Inconsistent(dir, fmt::format("tensor '{}' appears in two files", t.name));
      }
    }
  }
  for (const auto& [tensor, file] : weight_map) {
    if (ckpt.index_.count(tensor) == 0) {
      return Inconsistent(dir, fmt::format("{} puts tensor '{}' in {}, which does not hold it",
                                           index_path, tensor, file));
    }
  }
  return ckpt;
}

Expected<const SafetensorsTensor*> SafetensorsCheckpoint::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  if (it == index_.end()) {
    return NotFound(fmt::format("the checkpoint {} has no tensor named '{}'", dir_, name));
  }
  return it->second;
}

std::vector<const SafetensorsTensor*> SafetensorsCheckpoint::tensors() const {
  std::vector<const SafetensorsTensor*> out;
  for (const SafetensorsFile& f : files_) {
    for (const SafetensorsTensor& t : f.tensors()) out.push_back(&t);
  }
  return out;
}

}  // namespace ctxpar
