// safetensors files (HF's weight format) and checkpoints made of them.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON (an object; may end with
// spaces), then the data section. Each header entry but `__metadata__` (string -> string) names a
// tensor: {"dtype", "shape" (row-major, outermost first), "data_offsets": [begin, end) within the
// data section}. Open() memory-maps the file read-only; tensor data is never copied.
//
// Validation (as strict as the format's reference implementation): the header length fits the
// file and is at most kMaxHeaderBytes; the header is one JSON object without repeated keys; every
// entry has exactly those three fields of the right types; the dtype is one ctxpar reads (F32,
// BF16, F16, F64; another known safetensors dtype is kUnimplemented naming it); end - begin equals
// the element count times the element size (no overflow); the tensors neither overlap nor leave
// gaps, and together cover the data section exactly. A malformed file gives kDataLoss naming the
// tensor (or the header field) and the problem, never a crash.
//
// A checkpoint (SafetensorsCheckpoint) is a directory with model.safetensors, or with
// model.safetensors.index.json whose weight_map names the file of each tensor (HF's sharded
// layout); every tensor must be in the file the map names, and no name may appear twice.
//
// Thread safety: both classes are immutable after opening; const methods are safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ctxpar/dtype.h"
#include "ctxpar/status.h"

namespace ctxpar {

struct SafetensorsTensor {
  std::string name;
  DataType dtype = DataType::kF32;  // kF32, kBF16, kF16 or kF64
  std::vector<int64_t> shape;       // outermost first; {} is a scalar
  uint64_t begin = 0;               // byte range in the data section
  uint64_t end = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while its file lives

  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

  // NotFound / InvalidArgument when the file cannot be opened or mapped, DataLoss or
  // Unimplemented as above; messages start with the path.
  static Expected<SafetensorsFile> Open(const std::string& path);
  // Parses an in-memory image (tests, fuzzing); the SafetensorsFile owns the bytes.
  static Expected<SafetensorsFile> FromBytes(std::vector<uint8_t> bytes);

  // In data-section order.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // NotFound naming the tensor.
  Expected<const SafetensorsTensor*> Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const;

 private:
  struct Storage;
  SafetensorsFile() = default;
  static Expected<SafetensorsFile> Parse(std::shared_ptr<const Storage> storage);

  std::shared_ptr<const Storage> storage_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Elements [first, first + count) of `tensor` (row-major) widened or rounded to fp32 / fp64:
// BF16 and F16 are exact in both, F64 is rounded to nearest in fp32. OutOfRange when the range is
// not inside the tensor.
Status CopyElements(const SafetensorsTensor& tensor, int64_t first, int64_t count, float* out);
Status CopyElements(const SafetensorsTensor& tensor, int64_t first, int64_t count, double* out);

class SafetensorsCheckpoint {
 public:
  // Opens DIR/model.safetensors.index.json and the files it names, else DIR/model.safetensors.
  static Expected<SafetensorsCheckpoint> Open(const std::string& dir);

  // NotFound naming the tensor and the directory.
  Expected<const SafetensorsTensor*> Find(std::string_view name) const;
  // Every tensor of every file, file by file.
  std::vector<const SafetensorsTensor*> tensors() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, const SafetensorsTensor*> index_;
};

}  // namespace ctxpar
