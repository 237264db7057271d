// CUDA C++ → cubin (or PTX) through NVRTC, loaded with dlopen on first use so that ein builds
// and runs where no CUDA toolkit is installed; compiled images are cached in memory and on disk.
// It compiles; it does not load modules or launch kernels (that needs the driver API) and it
// knows nothing of Kernel IR (compiler/emit/emit_cuda.h writes the sources).
//
// ## Finding NVRTC and the CUDA headers
//
// The library is the first that dlopen accepts of: $EIN_NVRTC (a path), libnvrtc.so.13 and
// libnvrtc.so (the default search path), /usr/local/cuda/lib64/libnvrtc.so.13 and
// /usr/local/cuda/lib64/libnvrtc.so. The headers the kernels include (cuda_fp16.h, cuda_bf16.h,
// cuda_fp8.h, and mma.h for the WMMA tensor-core attention) are passed with -I from one of: the
// library's ../include, $CUDA_HOME/include, $CUDA_PATH/include, the toolkit CMake found at build
// time, /usr/local/cuda/include; the first holding all of them (mma.h with its crt/mma.h), else
// the first holding cuda_fp16.h. The second case is NVRTC from pip (the nvidia-cuda-nvrtc wheel
// that PyTorch pulls in): its include folder has cuda_fp16.h but no crt/, so mma.h cannot
// compile there, and NvrtcInfo::mma_headers says so (the attention then takes its scalar
// kernels, or its PTX tensor-core ones under EIN_CUDA_ATTENTION=ptx, which need no mma.h:
// exec/attention_cuda.h).
//
// ## Targets
//
// compile() asks for a cubin for sm_<arch> when this NVRTC supports that architecture, and
// otherwise (an architecture newer than the NVRTC) for PTX of the newest virtual architecture
// it supports that is not newer than <arch>, which the driver JIT-compiles on load.
//
// ## Caching
//
// The key is XXH3-128 of (source, the options, the target, the NVRTC version) with the CPU
// JIT's key function and checked file format (runtime/jit/disk_cache.h); entries live in
// $EIN_CACHE_DIR/cuda, else $XDG_CACHE_HOME/ein/cuda, else ~/.cache/ein/cuda. An entry holds
// the image and NVRTC's log (so a verbose compile's resource usage survives a cache hit).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ein/errors.h>

namespace ein {

/// Where NVRTC was found, or why it was not.
struct NvrtcInfo {
  bool available = false;    ///< whether compile() can run
  std::string reason;       ///< when not available: what was tried and dlopen's last error
  std::string library;      ///< the file that was loaded
  std::string include_dir;  ///< the CUDA headers' folder passed with -I ("" when none found)
  bool mma_headers = false;  ///< whether include_dir has mma.h and its crt/mma.h (WMMA kernels)
  int major = 0, minor = 0;  ///< NVRTC's version
  std::vector<int> archs;    ///< the sm_XX numbers this NVRTC compiles for, ascending
};

/// NVRTC, loaded on the first call (thread-safe; later calls return the same object).
const NvrtcInfo& nvrtc_info();

/// One compilation's options.
struct CudaCompileOptions {
  int arch = 90;         ///< the device's compute capability × 10 (sm_80 → 80, sm_90 → 90)
  bool verbose = false;  ///< pass --ptxas-options=-v: the log gets registers, stack and spills
  std::vector<std::string> extra;  ///< more NVRTC options (e.g. "-maxrregcount=32")
  /// The architecture-specific target sm_<arch>a (wgmma, setmaxnreg on sm_90a): a cubin that
  /// runs on that architecture alone; DeviceError when this NVRTC does not compile for <arch>.
  bool arch_specific = false;
};

/// A compiled translation unit.
struct CudaBinary {
  std::string image;  ///< a cubin (ELF) for sm_<arch>, or PTX text for compute_<arch>
  bool ptx = false;   ///< true when `image` is PTX (the requested arch is unknown to NVRTC)
  int arch = 0;       ///< the architecture compiled for
  std::string log;    ///< NVRTC's log (warnings; with verbose, ptxas' resource usage)
};

/// One kernel's resource usage as ptxas reports it (a verbose compile's log).
struct PtxasUsage {
  int registers = 0;
  int64_t stack_frame = 0;   ///< bytes of local memory per thread for the frame
  int64_t spill_stores = 0;  ///< bytes of registers spilled to local memory
  int64_t spill_loads = 0;
  int64_t shared_bytes = 0;  ///< static shared memory a block (its __shared__ arrays)
};

/// The usage of entry `entry` in a verbose log, or nullopt when the log does not report it.
std::optional<PtxasUsage> parse_ptxas_usage(std::string_view log, std::string_view entry);

/// Counters of the compiler since process start.
struct NvrtcStats {
  int64_t compiled = 0, memory_hits = 0, disk_hits = 0, disk_rejected = 0;
};

/// The process-wide CUDA compiler with its caches.
class CudaCompiler {
 public:
  static CudaCompiler& instance();  ///< the process-wide compiler (thread-safe)
  ~CudaCompiler();
  CudaCompiler(const CudaCompiler&) = delete;
  CudaCompiler& operator=(const CudaCompiler&) = delete;

  /// Compiles `source` (named `name` in NVRTC's messages) or returns the cached image. Throws
  /// DeviceError when NVRTC is missing (with nvrtc_info().reason) and when the source does not
  /// compile (the status, NVRTC's log and the source with line numbers).
  std::shared_ptr<const CudaBinary> compile(std::string_view source, std::string_view name,
                                            const CudaCompileOptions& options);
  NvrtcStats stats() const;  ///< a snapshot of the counters
  /// Sets the disk cache folder (created on first write); an empty path disables it.
  void set_disk_cache_dir(std::filesystem::path dir);
  std::filesystem::path disk_cache_dir() const;  ///< the disk cache folder, or empty
  void clear_memory_cache();  ///< for tests: the next compile() goes to disk

 private:
  CudaCompiler();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace detail {
/// Loads NVRTC from the first of `candidates` dlopen accepts (nvrtc_info() uses the list in
/// the header comment); exposed so tests can see the report for a missing library.
NvrtcInfo load_nvrtc(const std::vector<std::string>& candidates);

/// The CUDA headers' folder among `dirs` (in order): the first holding cuda_fp16.h, mma.h and
/// crt/mma.h, else the first holding cuda_fp16.h (mma = false), else none ("").
struct CudaHeaders {
  std::string dir;
  bool mma = false;
};
CudaHeaders find_cuda_headers(const std::vector<std::filesystem::path>& dirs);
}  // namespace detail

}  // namespace ein
