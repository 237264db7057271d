// cache_root(): the one reading of EIN_CACHE_DIR, XDG_CACHE_HOME and HOME.
#include "runtime/cache_dir.h"

#include <cstdlib>

namespace ein {

std::filesystem::path cache_root() {
  if (const char* dir = std::getenv("EIN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::filesystem::path(xdg) / "ein";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::filesystem::path(home) / ".cache" / "ein";
  return {};
}

bool cache_root_is_explicit() {
  const char* dir = std::getenv("EIN_CACHE_DIR");
  return dir && *dir;
}

}  // namespace ein
