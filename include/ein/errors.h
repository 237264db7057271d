// Error types shared by the runtime and the compiler, by blame (../ARCHITECTURE.md):
// a misuse of the tensor API (RuntimeError), memory that cannot be had (OutOfMemoryError),
// and a device or code-generator failure (DeviceError). Mistakes in pattern or script text
// are ein::UserError (include/ein/diagnostic.h), which carries a source range for the caret.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ein {

/// A call that breaks a tensor API rule: a view on incompatible strides, an index out of
/// range, data<T>() with the wrong T. The message states the rule and the facts.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An allocation that could not be satisfied; says how many bytes were asked for.
class OutOfMemoryError : public RuntimeError {
 public:
  OutOfMemoryError(std::string device, int64_t bytes_requested, int64_t bytes_allocated);
  /// Bytes the failed request asked for.
  int64_t bytes_requested() const { return bytes_requested_; }

 private:
  int64_t bytes_requested_;
};

/// A failure of the machinery below ein: the JIT, NVRTC, the CUDA driver. The message holds
/// the status, the tool's log and, for generated code, the source with line numbers.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
/// `source` with each line prefixed by its number ("    7 | ..."), for a DeviceError that
/// shows generated code (the JIT's MLIR, NVRTC's CUDA C++).
std::string numbered_lines(std::string_view source);
}  // namespace detail

}  // namespace ein
