// Running CUDA C++ on the host, for tests without a GPU: a translation unit of the kernel ABI
// (compiler/emit/emit_cuda.h: device pointers, then doubles) is compiled by the host C++ compiler
// against tests/compiler/emit/host_emulation.h into a shared library and loaded, with a C entry that
// unpacks an argument array and runs the emulated launch. Libraries are cached by source hash
// in a folder under the build tree, so a rerun compiles nothing.
#pragma once

#include <string>
#include <vector>

namespace ein::testing {

/// A kernel built for the host. Calling it runs the kernel: `args` holds one device pointer per
/// buffer, then one `const double*` per double parameter; `grid` blocks of `block` threads,
/// blocks one after another, with `shared_bytes` of dynamic shared memory.
class EmulatedLaunch {
 public:
  using Entry = void (*)(void* const* args, unsigned grid, unsigned block, unsigned shared_bytes);
  explicit EmulatedLaunch(Entry entry = nullptr) : entry_(entry) {}
  void operator()(void* const* args, unsigned grid, unsigned block, unsigned shared_bytes) const;

 private:
  Entry entry_;
};

/// Whether the host can run CUDA C++ (the CUDA headers were found at configure time); when
/// not, `why` says what is missing.
bool host_cuda_available(std::string* why = nullptr);

/// Whether emulated kernels are compiled with UBSan's alignment check (the host compiler has
/// its runtime), so that a misaligned typed access stops the process as a GPU would fault.
bool host_cuda_checks_alignment();

/// The host compiler's ThreadSanitizer runtime (libtsan.so), which a test process needs
/// preloaded for EIN_EMULATION_RACECHECK=1 (scripts/racecheck.sh); "" when it has none.
std::string thread_sanitizer_runtime();

/// The parameter declarations of extern "C" function `entry` in `source` ("const float* in0").
std::vector<std::string> cuda_entry_parameters(const std::string& source, const std::string& entry);

/// `source` compiled for the host and loaded; throws std::runtime_error with the compiler's
/// output when it does not compile.
EmulatedLaunch build_emulated(const std::string& source, const std::string& entry);

}  // namespace ein::testing
