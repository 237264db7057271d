// Messages of the shared error types.
#include <ein/errors.h>

#include <string>

namespace ein {

OutOfMemoryError::OutOfMemoryError(std::string device, int64_t bytes_requested,
                                   int64_t bytes_allocated)
    : RuntimeError("out of memory on " + device + ": tried to allocate " +
                   std::to_string(bytes_requested) + " bytes (" +
                   std::to_string(bytes_requested / (1024 * 1024)) + " MiB) with " +
                   std::to_string(bytes_allocated) + " bytes already allocated by ein"),
      bytes_requested_(bytes_requested) {}

}  // namespace ein
