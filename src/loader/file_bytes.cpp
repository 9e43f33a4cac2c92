#include "loader/file_bytes.h"

#include <fcntl.h>
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

std::optional<MapFailure> FileBytes::Map(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    return MapFailure{err == ENOENT ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                      std::strerror(err)};
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) return MapFailure{StatusCode::kInvalidArgument, std::strerror(errno)};
  if (!S_ISREG(st.st_mode)) {
    return MapFailure{StatusCode::kInvalidArgument,
                      S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file"};
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* map = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (map == MAP_FAILED) {
      return MapFailure{StatusCode::kInvalidArgument,
                        std::string("cannot map it: ") + std::strerror(errno)};
    }
    map_ = map;
    data_ = static_cast<const uint8_t*>(map);
  }
  return std::nullopt;
}

void FileBytes::Hold(std::vector<uint8_t> bytes) {
  bytes_ = std::move(bytes);
  data_ = bytes_.data();
  size_ = bytes_.size();
}

}  // namespace ctxpar::loader
