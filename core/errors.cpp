// Messages of the shared error types.
#include <ein/errors.h>

#include <sstream>
#include <string>

namespace ein {

OutOfMemoryError::OutOfMemoryError(std::string device, int64_t bytes_requested,
                                   int64_t bytes_allocated)
    : RuntimeError("out of memory on " + device + ": tried to allocate " +
                   std::to_string(bytes_requested) + " bytes (" +
                   std::to_string(bytes_requested / (1024 * 1024)) + " MiB) with " +
                   std::to_string(bytes_allocated) + " bytes already allocated by ein"),
      bytes_requested_(bytes_requested) {}

namespace detail {

std::string numbered_lines(std::string_view source) {
  std::ostringstream out;
  std::istringstream in{std::string(source)};
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    out.width(5);
    out << n << " | " << line << "\n";
  }
  return out.str();
}

}  // namespace detail

}  // namespace ein
