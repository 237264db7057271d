// AtomicFile: writes a file so that a crash at any moment leaves either the old file or the
// complete new one at its path, never a torn one (temp file, fsync, rename, fsync of the
// directory, as in SQLite's and LevelDB's manifests). It does not lock: two writers of the
// same path race, and the last rename wins.
//
//   ein::AtomicFile f("run/latest");
//   f.write("step_100.safetensors\n");
//   f.commit();  // durable and visible from here on; without commit the temp file is removed
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ein {

/// A file being written at `path + ".tmp.<pid>"` that commit() renames over `path`.
/// Errors are RuntimeErrors naming the file and the system's reason (strerror).
class AtomicFile {
 public:
  /// Creates (or truncates) the temporary file next to `path`.
  explicit AtomicFile(std::string path);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `size` bytes (retrying short writes and EINTR).
  void write(const void* data, size_t size);
  /// Appends the bytes of `text`.
  void write(std::string_view text) { write(text.data(), text.size()); }
  /// Overwrites `size` bytes at `offset`, which must lie within what was written (a header
  /// completed once the data after it is known); the append position does not move.
  void write_at(uint64_t offset, const void* data, size_t size);
  /// fsyncs and closes the file, renames it over path(), then fsyncs the directory, so both
  /// the bytes and the new name survive a power loss. No write() may follow.
  void commit();

  /// The final path.
  const std::string& path() const { return path_; }
  /// Where the bytes are written until commit().
  const std::string& temp_path() const { return temp_path_; }

 private:
  /// Closes and unlinks the temporary file, ignoring errors (the cleanup path).
  void abandon() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;  ///< the temporary file; -1 once closed
  bool committed_ = false;
};

/// fsyncs the directory `dir` ("" means the current one) so that entries created or renamed
/// in it are durable; a RuntimeError naming it on failure.
void sync_directory(const std::string& dir);

}  // namespace ein
