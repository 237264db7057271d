// Where ein keeps what it can recompute but would rather not: $EIN_CACHE_DIR, else
// $XDG_CACHE_HOME/ein, else ~/.cache/ein. The JIT's and NVRTC's binaries and the measured CPU
// peak live in folders below it; nothing there is needed for correctness.
#pragma once

#include <filesystem>

namespace ein {

/// The cache root as above; empty when none of the variables is set.
std::filesystem::path cache_root();

/// Whether the root came from $EIN_CACHE_DIR (the JIT keeps its binaries right in it then).
bool cache_root_is_explicit();

}  // namespace ein
