// AtomicFile on POSIX: open/write/fsync/rename/fsync(dir). The order matters: the data must be
// durable before the rename makes it visible, and the rename must be durable before a caller
// acts on it (for example by pointing `latest` at the new checkpoint).
#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <ein/errors.h>

namespace ein {
namespace {

/// "cannot <what> '<path>': <strerror(errno)>".
[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  const int err = errno;
  throw RuntimeError("cannot " + what + " '" + path + "': " + std::strerror(err));
}

/// The directory holding `path` ("." when it has none).
std::string parent_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno("create", temp_path_);
}

AtomicFile::~AtomicFile() {
  if (!committed_) abandon();
}

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw RuntimeError("cannot write '" + temp_path_ + "': the file is closed");
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("write", temp_path_);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t size) {
  if (fd_ < 0) throw RuntimeError("cannot write '" + temp_path_ + "': the file is closed");
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("write", temp_path_);
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw RuntimeError("cannot commit '" + path_ + "': the file is closed");
  if (::fsync(fd_) != 0) throw_errno("fsync", temp_path_);
  const int fd = fd_;
  fd_ = -1;
  // close() can report a deferred write error (NFS); the data is then not known to be there.
  if (::close(fd) != 0) throw_errno("close", temp_path_);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) throw_errno("rename to", path_);
  committed_ = true;
  sync_directory(parent_directory(path_));
}

void sync_directory(const std::string& dir) {
  const std::string name = dir.empty() ? std::string(".") : dir;
  const int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open directory", name);
  // Some file systems refuse fsync on a directory (EINVAL); they order renames themselves.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(fd);
    errno = err;
    throw_errno("fsync directory", name);
  }
  ::close(fd);
}

}  // namespace ein
