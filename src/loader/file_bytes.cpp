#include "loader/file_bytes.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ctxpar::loader {

FileBytes::~FileBytes() {
  if (map_ != nullptr) munmap(map_, size_);
  if (fd_ >= 0) close(fd_);
}

Status FileBytes::Map(const std::string& path, std::string_view kind) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    std::string msg = fmt::format("cannot open {} file '{}': {}", kind, path, std::strerror(err));
    if (err == ENOENT) return NotFound(std::move(msg));
    return InvalidArgument(std::move(msg));
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    return InvalidArgument(
        fmt::format("cannot stat {} file '{}': {}", kind, path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgument(fmt::format("{} path '{}' is not a regular file", kind, path));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* map = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (map == MAP_FAILED) {
      return InvalidArgument(
          fmt::format("cannot map {} file '{}': {}", kind, path, std::strerror(errno)));
    }
    map_ = map;
    data_ = static_cast<const uint8_t*>(map);
  }
  return Status::Ok();
}

void FileBytes::Hold(std::vector<uint8_t> bytes) {
  bytes_ = std::move(bytes);
  data_ = bytes_.data();
  size_ = bytes_.size();
}

}  // namespace ctxpar::loader
