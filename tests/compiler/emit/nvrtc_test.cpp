// NVRTC through dlopen (runtime/cuda/nvrtc.h): the report when the library is missing, the error
// for code that does not compile (status, log, numbered source), the ptxas report the corpus
// test relies on (checked on a kernel built to spill), PTX for an architecture NVRTC does not
// know, sm_90a's architecture-specific target, and the memory and disk caches. Skipped, with
// the reason, where NVRTC is missing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/cuda/nvrtc.h"

namespace ein {
namespace {

#define SKIP_WITHOUT_NVRTC()                                                    \
  if (!nvrtc_info().available) GTEST_SKIP() << nvrtc_info().reason

constexpr const char* kScale = R"(
extern "C" __global__ void scale(const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = 2.0f * x[i];
}
)";

/// A fresh folder under the temporary directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("ein_nvrtc_test_" + std::to_string(::getpid()) + "_" +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { std::filesystem::remove_all(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

TEST(Nvrtc, AMissingLibraryIsReportedWithWhatWasTried) {
  const NvrtcInfo info = detail::load_nvrtc({"/nonexistent/libnvrtc.so.13", "libnvrtc-nope.so"});
  EXPECT_FALSE(info.available);
  EXPECT_NE(info.reason.find("CUDA compilation needs NVRTC"), std::string::npos) << info.reason;
  EXPECT_NE(info.reason.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << info.reason;
  EXPECT_NE(info.reason.find("libnvrtc-nope.so"), std::string::npos) << info.reason;
}

TEST(Nvrtc, LoadsWithAVersionArchitecturesAndTheCudaHeaders) {
  SKIP_WITHOUT_NVRTC();
  const NvrtcInfo& info = nvrtc_info();
  EXPECT_GE(info.major, 11);
  EXPECT_FALSE(info.library.empty());
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(info.include_dir) / "cuda_bf16.h"))
      << info.include_dir;
  for (int arch : {80, 90})
    EXPECT_TRUE(std::binary_search(info.archs.begin(), info.archs.end(), arch)) << arch;
}

// NVRTC from pip (PyTorch's nvidia-cuda-nvrtc wheel) comes with an include folder that has
// cuda_fp16.h and mma.h but not the crt/mma.h that mma.h includes: a toolkit's folder later in
// the list is preferred to it, and without one it is still used, saying that WMMA cannot compile.
TEST(Nvrtc, TheCudaHeadersArePickedWithMmaWhereThereAreSome) {
  namespace fs = std::filesystem;
  const TempDir dir;
  const fs::path& root = dir.path;
  const fs::path pip = root / "pip", toolkit = root / "toolkit", none = root / "none";
  for (const fs::path& d : {pip, toolkit / "crt", none}) fs::create_directories(d);
  for (const fs::path& f : {pip / "cuda_fp16.h", pip / "mma.h", toolkit / "cuda_fp16.h",
                            toolkit / "mma.h", toolkit / "crt" / "mma.h"})
    std::ofstream(f) << "\n";
  const detail::CudaHeaders both = detail::find_cuda_headers({none, pip, toolkit});
  EXPECT_EQ(both.dir, toolkit.string());
  EXPECT_TRUE(both.mma);
  const detail::CudaHeaders pip_only = detail::find_cuda_headers({none, pip});
  EXPECT_EQ(pip_only.dir, pip.string());
  EXPECT_FALSE(pip_only.mma);
  const detail::CudaHeaders nothing = detail::find_cuda_headers({none, root / "missing"});
  EXPECT_EQ(nothing.dir, "");
  EXPECT_FALSE(nothing.mma);
}

TEST(Nvrtc, ACompileErrorCarriesTheLogAndTheNumberedSource) {
  SKIP_WITHOUT_NVRTC();
  const std::string bad = "extern \"C\" __global__ void broken(float* y) {\n  y[0] = undeclared;\n}\n";
  try {
    CudaCompiler::instance().compile(bad, "broken.cu", {});
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("could not compile broken.cu for sm_90"), std::string::npos) << what;
    EXPECT_NE(what.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << what;
    EXPECT_NE(what.find("identifier \"undeclared\" is undefined"), std::string::npos) << what;
    EXPECT_NE(what.find("    2 |   y[0] = undeclared;"), std::string::npos) << what;
  }
}

TEST(Nvrtc, PtxasUsageReportsSpillsOfAKernelThatSpills) {
  SKIP_WITHOUT_NVRTC();
  // 64 live accumulators under a 32-register cap must spill; the same code uncapped must not.
  const std::string src = R"(
extern "C" __global__ void pressure(const float* x, float* y) {
  float a[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) a[i] = x[threadIdx.x + i * 256];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k)
#pragma unroll
    for (int i = 0; i < 64; ++i) { a[i] = a[i] * a[(i + k + 1) % 64] + 1.0f; s += a[i]; }
  y[threadIdx.x] = s;
}
)";
  CudaCompileOptions capped{90, true, {"-maxrregcount=32"}};
  const auto spilled = CudaCompiler::instance().compile(src, "pressure.cu", capped);
  const auto usage = parse_ptxas_usage(spilled->log, "pressure");
  ASSERT_TRUE(usage) << spilled->log;
  EXPECT_GT(usage->spill_stores + usage->spill_loads, 0) << spilled->log;
  EXPECT_LE(usage->registers, 32);

  const auto free = CudaCompiler::instance().compile(src, "pressure.cu", {90, true, {}});
  const auto free_usage = parse_ptxas_usage(free->log, "pressure");
  ASSERT_TRUE(free_usage) << free->log;
  EXPECT_EQ(free_usage->spill_stores + free_usage->spill_loads, 0) << free->log;
  EXPECT_GT(free_usage->registers, 32);
  EXPECT_FALSE(parse_ptxas_usage(free->log, "other"));
}

// The static shared memory of each function is read from its own report line (a function
// without any must not take the next one's).
TEST(Nvrtc, PtxasUsageReadsEachFunctionsStaticSharedMemory) {
  const std::string log =
      "ptxas info    : Function properties for plain\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 10 registers, used 0 barriers\n"
      "ptxas info    : Function properties for tiled\n"
      "ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]\n";
  const auto plain = parse_ptxas_usage(log, "plain"), tiled = parse_ptxas_usage(log, "tiled");
  ASSERT_TRUE(plain && tiled);
  EXPECT_EQ(plain->registers, 10);
  EXPECT_EQ(plain->shared_bytes, 0);
  EXPECT_EQ(tiled->registers, 40);
  EXPECT_EQ(tiled->stack_frame, 8);
  EXPECT_EQ(tiled->shared_bytes, 16384);

  SKIP_WITHOUT_NVRTC();
  const char* src = R"(
extern "C" __global__ void __launch_bounds__(128) reversed(float* o) {
  __shared__ float s[1024];
  s[threadIdx.x] = o[threadIdx.x];
  __syncthreads();
  o[threadIdx.x] = s[1023 - threadIdx.x];
}
)";
  const auto binary = CudaCompiler::instance().compile(src, "reversed.cu", {90, true, {}});
  const auto usage = parse_ptxas_usage(binary->log, "reversed");
  ASSERT_TRUE(usage) << binary->log;
  EXPECT_EQ(usage->shared_bytes, 4096) << binary->log;
}

TEST(Nvrtc, CubinForAKnownArchitecturePtxForANewerOne) {
  SKIP_WITHOUT_NVRTC();
  const auto cubin = CudaCompiler::instance().compile(kScale, "scale.cu", {80, false, {}});
  EXPECT_FALSE(cubin->ptx);
  EXPECT_EQ(cubin->arch, 80);
  EXPECT_EQ(cubin->image.substr(0, 4), "\x7f" "ELF");
  const int newest = nvrtc_info().archs.back();
  const auto ptx = CudaCompiler::instance().compile(kScale, "scale.cu", {newest + 1, false, {}});
  EXPECT_TRUE(ptx->ptx);
  EXPECT_EQ(ptx->arch, newest);
  EXPECT_NE(ptx->image.find(".target sm_" + std::to_string(newest)), std::string::npos);
  EXPECT_NE(ptx->image.find(".entry scale("), std::string::npos);
  EXPECT_THROW(CudaCompiler::instance().compile(kScale, "scale.cu", {10, false, {}}), DeviceError);
}

// sm_90a's instructions (wgmma here) compile for the architecture-specific target alone; a
// target this NVRTC does not know is an error, not a PTX fallback (which would need sm_90a's
// PTX the driver may not take).
TEST(Nvrtc, ArchitectureSpecificTargets) {
  SKIP_WITHOUT_NVRTC();
  if (!std::binary_search(nvrtc_info().archs.begin(), nvrtc_info().archs.end(), 90))
    GTEST_SKIP() << "this NVRTC does not compile for sm_90";
  const char* fence = "extern \"C\" __global__ void fence() {\n"
                      "  asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n}\n";
  const auto cubin = CudaCompiler::instance().compile(fence, "fence.cu", {90, false, {}, true});
  EXPECT_FALSE(cubin->ptx);
  EXPECT_EQ(cubin->arch, 90);
  EXPECT_THROW(CudaCompiler::instance().compile(fence, "fence.cu", {90, false, {}}), DeviceError);
  const int newest = nvrtc_info().archs.back();
  EXPECT_THROW(CudaCompiler::instance().compile(kScale, "scale.cu", {newest + 1, false, {}, true}),
               DeviceError);
}

TEST(Nvrtc, CachesInMemoryThenOnDiskKeyedBySourceOptionsAndArchitecture) {
  SKIP_WITHOUT_NVRTC();
  TempDir dir;
  CudaCompiler& c = CudaCompiler::instance();
  const auto saved = c.disk_cache_dir();
  c.set_disk_cache_dir(dir.path);
  const std::string src = std::string(kScale) + "// cache test " + std::to_string(::getpid()) + "\n";
  const NvrtcStats s0 = c.stats();
  const auto first = c.compile(src, "scale.cu", {90, false, {}});
  const NvrtcStats s1 = c.stats();
  EXPECT_EQ(s1.compiled, s0.compiled + 1);
  EXPECT_EQ(c.compile(src, "scale.cu", {90, false, {}}), first);  // the same object
  EXPECT_EQ(c.stats().memory_hits, s1.memory_hits + 1);
  c.compile(src, "scale.cu", {80, false, {}});  // another arch: another key
  c.compile(src, "scale.cu", {90, false, {"-lineinfo"}});  // other options: another key
  EXPECT_EQ(c.stats().compiled, s0.compiled + 3);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 3);

  c.clear_memory_cache();
  const NvrtcStats s2 = c.stats();
  const auto again = c.compile(src, "scale.cu", {90, false, {}});
  EXPECT_EQ(c.stats().disk_hits, s2.disk_hits + 1);
  EXPECT_EQ(c.stats().compiled, s2.compiled);
  EXPECT_EQ(again->image, first->image);

  // A damaged entry is rejected and recompiled.
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    std::filesystem::resize_file(e.path(), 20);
  c.clear_memory_cache();
  const auto rebuilt = c.compile(src, "scale.cu", {90, false, {}});
  EXPECT_EQ(c.stats().disk_rejected, s2.disk_rejected + 1);
  EXPECT_EQ(rebuilt->image, first->image);
  c.set_disk_cache_dir(saved);
}

}  // namespace
}  // namespace ein
