// A shared library opened at run time (NVRTC, the CUDA driver, cuBLASLt: runtime/cuda/nvrtc.cpp,
// cuda_driver.cpp, cublaslt.cpp): the first of several candidate names that dlopen accepts,
// then its entry points by name, keeping what failed for the caller's message. It closes
// nothing: a caller keeps the library for the process, or dlcloses `handle` itself when the
// library turns out unusable.
#pragma once

#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

namespace ein::detail {

struct DynamicLibrary {
  void* handle = nullptr;  ///< null when no candidate loaded
  std::string name;        ///< the candidate that loaded
  std::string tried;       ///< one line per candidate that failed: "\n  " + dlerror()
  std::string missing;     ///< entry points bind() did not find, ", "-separated

  /// Opens the first candidate dlopen accepts (RTLD_NOW | RTLD_LOCAL).
  static DynamicLibrary open(const std::vector<std::string>& candidates) {
    DynamicLibrary lib;
    for (const std::string& candidate : candidates) {
      lib.handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (lib.handle) {
        lib.name = candidate;
        break;
      }
      const char* error = ::dlerror();
      lib.tried += "\n  " + (error ? std::string(error) : candidate + ": not found");
    }
    return lib;
  }

  /// Sets `fn` to entry point `symbol`; null, noted in `missing`, when the library lacks it.
  template <class Fn>
  void bind(Fn& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<Fn>>(::dlsym(handle, symbol));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  }
};

}  // namespace ein::detail
