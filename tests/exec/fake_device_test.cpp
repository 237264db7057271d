// The fake CUDA device refuses what a GPU refuses. Its memory is apart from the host as a GPU's
// is (tests/support/fake_device_memory.h): host code that reads a device pointer, and a kernel
// that reaches past either end of a buffer, stop with a message naming what they touched; only
// the fake's own copies, launches and GEMMs open the buffers they are given. A launch asking
// for more shared memory than an sm_90 block has, its __shared__ arrays included, is refused.
// Asynchronous copies happen as late as a GPU may do them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include <ein/errors.h>
#include <ein/ops.h>
#include <ein/tensor.h>
#include "runtime/cuda/execution.h"
#include "runtime/cuda/nvrtc.h"
#include "support/fake_cuda.h"

namespace ein {
namespace {

class FakeDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why; !testing::FakeCudaDevice::available(&why)) GTEST_SKIP() << why;
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

/// Runs `body` as a kernel of one block of 32 threads over `out`, a device buffer of `n` floats
/// all 1; returns what it holds after.
std::vector<float> run_probe(const std::string& body, int64_t n) {
  testing::FakeCudaDevice fake;
  const Tensor out = full({n}, 1.0, DType::f32, cuda());
  const std::string source =
      fmt::format("extern \"C\" __global__ void ein_probe(float* out) {{\n  {}\n}}\n", body);
  const auto function = cuda_execution().prepare(0, {source, "ein_probe"});
  void* buffers[] = {out.device_ptr()};
  cuda_execution().launch(0, *function, 1, 32, buffers, {}, 0);
  return out.to(cpu()).to_vector<float>();
}

TEST_F(FakeDevice, KernelsReachTheirBuffersAndCopiesReadThem) {
  const std::vector<float> got = run_probe("if (threadIdx.x < 17) out[threadIdx.x] += 1;", 17);
  EXPECT_EQ(got, std::vector<float>(17, 2.0f));
}

TEST_F(FakeDevice, HostCodeCannotReadIt) {
  testing::FakeCudaDevice fake;
  const Tensor t = full({16}, 3.0, DType::f32, cuda());
  EXPECT_EQ(t.to(cpu()).to_vector<float>(), std::vector<float>(16, 3.0f));
  EXPECT_DEATH(
      {
        const volatile float* p = static_cast<const float*>(t.device_ptr());
        (void)p[0];
      },
      "fake cuda: an access to byte 0 of a device allocation of 64 bytes at .*, which the host "
      "cannot reach.*outside any copy, launch or GEMM");
}

TEST_F(FakeDevice, AKernelReadingPastTheEndStops) {
  // 16 floats end on a 64-byte boundary, where the guard page starts.
  EXPECT_DEATH(run_probe("if (threadIdx.x == 0) out[0] = out[16];", 16),
               "byte 64 of a device allocation of 64 bytes at .*, past its end \\(kernel "
               "ein_probe;");
}

TEST_F(FakeDevice, AKernelReadingFarBeforeTheStartStops) {
  EXPECT_DEATH(run_probe("if (threadIdx.x == 0) out[0] = out[-1100];", 16),
               "byte -4400 of a device allocation of 64 bytes at .*, before its start");
}

TEST_F(FakeDevice, AKernelWritingBesideItsBufferIsNamed) {
  // 17 floats: bytes 68..127 are slack before the guard page, and the page's start is padding.
  EXPECT_DEATH(run_probe("if (threadIdx.x == 0) out[17] = 0;", 17),
               "fake cuda: kernel ein_probe wrote byte 68 of a device allocation of 68 bytes at "
               ".*, past its end");
  EXPECT_DEATH(run_probe("if (threadIdx.x == 0) out[-1] = 0;", 17),
               "fake cuda: kernel ein_probe wrote byte -4 of a device allocation of 68 bytes at "
               ".*, before its start");
}

TEST_F(FakeDevice, SharedArraysCountTowardsABlocksSharedMemory) {
  if (!nvrtc_info().available) GTEST_SKIP() << "NVRTC reports a kernel's __shared__ arrays";
  testing::FakeCudaDevice fake;
  const Tensor out = zeros({1}, DType::f32, cuda());
  const std::string source =
      "extern \"C\" __global__ void ein_probe_tile(float* out) {\n"
      "  __shared__ float tile[8192];\n"  // 32 KiB (a kernel has at most 48 KiB of them)
      "  tile[threadIdx.x] = 1;\n  __syncthreads();\n"
      "  if (threadIdx.x == 0) out[0] = tile[31];\n}\n";
  const auto function = cuda_execution().prepare(0, {source, "ein_probe_tile"});
  void* buffers[] = {out.device_ptr()};
  cuda_execution().launch(0, *function, 1, 32, buffers, {}, 195 * 1024);  // 227 KiB in all
  EXPECT_EQ(out.to(cpu()).to_vector<float>(), std::vector<float>{1.0f});
  try {
    cuda_execution().launch(0, *function, 1, 32, buffers, {}, 196 * 1024);  // 228 KiB
    ADD_FAILURE() << "a block of 228 KiB of shared memory launched";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("ein_probe_tile asks for 200704 bytes of dynamic shared "
                                         "memory a block beside 32768 of __shared__ arrays; an "
                                         "sm_90 block takes at most 232448 in all"),
              std::string::npos)
        << e.what();
  }
}

// A copy to the device from pinned memory reads its source when the stream gets there, which
// on the fake is the next operation: a source the host changes before then is what arrives (on
// a GPU, a race the host loses when the stream is busy).
TEST_F(FakeDevice, AnAsynchronousCopyReadsItsSourceWhenTheStreamGetsThere) {
  testing::FakeCudaDevice fake;
  const Tensor pinned = full({8}, 1.0).pin_memory();
  const Tensor on_device = pinned.to(cuda(), /*non_blocking=*/true);
  pinned.fill_(2.0);  // too early: nothing has waited for the copy
  EXPECT_EQ(on_device.to(cpu()).to_vector<float>(), std::vector<float>(8, 2.0f));
  // Waited for, the source may change.
  const Tensor waited = pinned.to(cuda(), /*non_blocking=*/true);
  synchronize();
  pinned.fill_(3.0);
  EXPECT_EQ(waited.to(cpu()).to_vector<float>(), std::vector<float>(8, 2.0f));
}

}  // namespace
}  // namespace ein
