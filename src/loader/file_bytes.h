// The bytes of a model file as the file readers hold them (not public API): a read-only mapping
// of the file, or an image held in memory (tests, fuzzing). The readers' Storage types derive
// from it, so that one implementation opens, checks and maps every format's files.
//
// Thread safety: immutable once mapped or filled; safe to read from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar::loader {

class FileBytes {
 public:
  FileBytes() = default;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

  // Maps `path` read-only; `kind` names the format in messages ("GGUF", "safetensors"). NotFound
  // when the file does not exist; InvalidArgument when it cannot be opened, is not a regular
  // file or cannot be mapped.
  Status Map(const std::string& path, std::string_view kind);
  // Holds an in-memory image.
  void Hold(std::vector<uint8_t> bytes);

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::vector<uint8_t> bytes_;
  void* map_ = nullptr;
  int fd_ = -1;
};

}  // namespace ctxpar::loader
