// The CUDA runtime's timings for bench/gpu/run.sh, one table row per line ("name | value |
// unit | how"): NVRTC compile of a CUDA source cold (no caches), from the disk cache and from
// memory; and on a GPU, device-to-device copy bandwidth (cuMemcpyDtoD), pinned host-to-device
// bandwidth (cuMemcpyHtoDAsync) and a bf16 GEMM through cuBLASLt. Rows that need a GPU say
// why they were skipped where there is none.
//   ein_cuda_timings SOURCE.cu [ARCH]     (ARCH: sm number, default the device's or 90)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/nvrtc.h"
#include <ein/storage.h>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void row(const std::string& name, double value, const std::string& unit, const std::string& how) {
  fmt::print("{:<34} | {:>10.3f} | {:<7} | {}\n", name, value, unit, how);
}

void skipped(const std::string& name, const std::string& why) {
  fmt::print("{:<34} | {:>10} | {:<7} | skipped: {}\n", name, "-", "", why);
}

void time_nvrtc(const std::string& source, int arch) {
  using ein::CudaCompiler;
  CudaCompiler& nvrtc = CudaCompiler::instance();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("ein_cuda_timings_{}", ::getpid());
  std::filesystem::remove_all(dir);
  nvrtc.set_disk_cache_dir(dir);
  ein::CudaCompileOptions options;
  options.arch = arch;
  // The process's first compile also pays NVRTC's start-up; later ones with no cache entry
  // (the source with a comment added: a new key) are what each further kernel costs.
  Clock::time_point t0 = Clock::now();
  nvrtc.compile(source + "\n// first\n", "bench.cu", options);
  row("nvrtc compile, process's first", seconds_since(t0) * 1e3, "ms",
      "no cache entry, NVRTC's start-up included");
  std::vector<double> cold;
  for (int i = 0; i < 5; ++i) {
    t0 = Clock::now();
    nvrtc.compile(i == 4 ? source : fmt::format("{}\n// {}\n", source, i), "bench.cu", options);
    cold.push_back(seconds_since(t0) * 1e3);
  }
  std::sort(cold.begin(), cold.end());
  row(fmt::format("nvrtc compile, cold (sm_{})", arch), cold[2], "ms",
      fmt::format("no cache entry: NVRTC runs; median of 5 ({:.1f} to {:.1f})", cold.front(),
                  cold.back()));
  nvrtc.clear_memory_cache();
  t0 = Clock::now();
  nvrtc.compile(source, "bench.cu", options);
  row("nvrtc compile, disk cache hit", seconds_since(t0) * 1e3, "ms",
      "memory cache cleared: read + check the entry");
  t0 = Clock::now();
  constexpr int kHits = 1000;
  for (int i = 0; i < kHits; ++i)
    nvrtc.compile(source, "bench.cu", options);
  row("nvrtc compile, memory cache hit", seconds_since(t0) / kHits * 1e6, "us",
      "hash of source + options, map lookup");
  std::filesystem::remove_all(dir);
}

void time_gpu() {
  using namespace ein;
  const CudaDeviceProperties& props = cuda_device_properties(0);
  fmt::print("# device: {} (sm_{}, {} SMs, {:.1f} GiB), driver {}\n", props.name, props.arch(),
             props.sm_count, props.total_memory / double(int64_t{1} << 30),
             cuda_driver_info().version);
  const int64_t bytes = int64_t{1} << 30;
  const auto src = Storage::allocate(bytes, cuda()), dst = Storage::allocate(bytes, cuda());
  const CudaDriverApi& api = cuda_driver();
  auto dptr = [](void* p) { return static_cast<CuDevicePtr>(reinterpret_cast<uintptr_t>(p)); };
  constexpr int kCopies = 20;
  check_cuda(api.memcpy_dtod(dptr(dst->data()), dptr(src->data()), bytes), "cuMemcpyDtoD");
  cuda_synchronize(0);
  Clock::time_point t0 = Clock::now();
  for (int i = 0; i < kCopies; ++i)
    check_cuda(api.memcpy_dtod(dptr(dst->data()), dptr(src->data()), bytes), "cuMemcpyDtoD");
  cuda_synchronize(0);
  const double dt = seconds_since(t0) / kCopies;
  row("D2D copy, 1 GiB (read + write)", 2.0 * bytes / dt / 1e9, "GB/s",
      "cuMemcpyDtoD x20; bytes read + written per second");

  const int64_t pinned_bytes = int64_t{256} << 20;
  PinnedBuffer host(pinned_bytes);
  const Stream stream = Stream::create(0);
  copy_to_device_async(dst->data(), host.data(), pinned_bytes, stream);
  stream.synchronize();
  t0 = Clock::now();
  for (int i = 0; i < kCopies; ++i)
    copy_to_device_async(dst->data(), host.data(), pinned_bytes, stream);
  stream.synchronize();
  row("H2D copy, 256 MiB pinned", pinned_bytes * double(kCopies) / seconds_since(t0) / 1e9, "GB/s",
      "cuMemcpyHtoDAsync x20 on one stream");

  if (!cublaslt_info().available)
    return skipped("cuBLASLt bf16 GEMM 4096^3", cublaslt_info().reason);
  constexpr int64_t n = 4096;
  GemmBatch g;
  g.dtype = DType::bf16;
  g.m = g.n = g.k = n;
  g.lda = g.ldb = g.ldc = n;
  g.a = src->data();  // 32 MiB each of whatever the copies left: timing only
  g.b = static_cast<char*>(src->data()) + (int64_t{64} << 20);
  g.c = dst->data();
  {
    StreamGuard guard(stream);
    for (int i = 0; i < 3; ++i)
      cublaslt_gemm(g, GemmMath::exact, stream);  // warm-up, heuristic
    stream.synchronize();
    constexpr int kGemms = 50;
    t0 = Clock::now();
    for (int i = 0; i < kGemms; ++i)
      cublaslt_gemm(g, GemmMath::exact, stream);
    stream.synchronize();
    row("cuBLASLt bf16 GEMM 4096^3", 2.0 * n * n * n * kGemms / seconds_since(t0) / 1e12, "TFLOP/s",
        "ein's cublaslt_gemm x50 (plan + heuristic per call)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: {} SOURCE.cu [ARCH]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream source;
  source << in.rdbuf();
  if (!in) {
    fmt::print(stderr, "cannot read {}\n", argv[1]);
    return 2;
  }
  int arch = argc > 2 ? std::stoi(argv[2]) : 90;
  if (argc <= 2 && ein::cuda_is_available()) arch = ein::cuda_device_properties(0).arch();
  fmt::print("{:<34} | {:>10} | {:<7} | {}\n", "measure", "value", "unit", "how");
  try {
    if (const ein::NvrtcInfo& nvrtc = ein::nvrtc_info(); nvrtc.available) {
      // Which NVRTC and headers the kernels compile with: without crt/mma.h, bf16 attention
      // takes the scalar kernels by default (exec/attention_cuda.h)
      fmt::print(
          "{:<34} | {:>10} | {:<7} | {}\n", "nvrtc version",
          fmt::format("{}.{}", nvrtc.major, nvrtc.minor), "",
          fmt::format("NVRTC {}.{} from {}; headers {} {}", nvrtc.major, nvrtc.minor, nvrtc.library,
                      nvrtc.include_dir.empty() ? "none found" : nvrtc.include_dir,
                      nvrtc.mma_headers ? "with crt/mma.h (WMMA attention)"
                                        : "without crt/mma.h (WMMA attention falls back to the "
                                          "scalar kernels)"));
      time_nvrtc(source.str(), arch);
    } else
      skipped("nvrtc compile", ein::nvrtc_info().reason);
    if (ein::cuda_is_available())
      time_gpu();
    else
      skipped("GPU copies and GEMM", ein::cuda_driver_info().reason);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
