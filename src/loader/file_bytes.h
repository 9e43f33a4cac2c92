// The bytes of a model file as the file readers hold them (not public API): a read-only mapping
// of the file, or an image held in memory (tests, fuzzing). The readers' Storage types derive
// from it, so that one implementation opens, checks and maps every format's files; each reader
// turns a failure into its own catalog error.
//
// Thread safety: immutable once mapped or filled; safe to read from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar::loader {

// Why a file could not be mapped: kNotFound (it does not exist) or kInvalidArgument, and the
// reason in words ("Permission denied", "it is a directory", "cannot map it: ...").
struct MapFailure {
  StatusCode code;
  std::string reason;
};

class FileBytes {
 public:
  FileBytes() = default;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

  // Maps `path` read-only; nullopt on success.
  std::optional<MapFailure> Map(const std::string& path);
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
