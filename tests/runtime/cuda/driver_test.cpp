// The CUDA driver through dlopen (runtime/cuda/driver.h): the report for a missing driver; the
// toolkit's stub libcuda (which exports every entry point and fails every call) to check that
// each symbol ein looks up exists under that name and that a failing cuInit is reported with
// its CUresult; CUresult texts; and, only where a driver and a GPU exist, the device facts.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "runtime/cuda/driver.h"

namespace ein {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!cuda_is_available()) GTEST_SKIP() << cuda_driver_info().reason

// Installed with the toolkit for linking; never on a loader path.
const std::filesystem::path kStubDriver = "/usr/local/cuda/lib64/stubs/libcuda.so";

TEST(CudaDriver, AMissingDriverIsReportedWithWhatWasTried) {
  CudaDriverApi api;
  const CudaDriverInfo info = detail::load_cuda_driver({"/nonexistent/libcuda.so.1"}, api);
  EXPECT_FALSE(info.available);
  EXPECT_EQ(info.reason.rfind("no CUDA driver: libcuda.so.1 not found (", 0), 0u) << info.reason;
  EXPECT_NE(info.reason.find("/nonexistent/libcuda.so.1"), std::string::npos) << info.reason;
  EXPECT_NE(info.reason.find("ein::cpu()"), std::string::npos) << info.reason;
  EXPECT_EQ(api.init, nullptr);  // nothing installed
}

TEST(CudaDriver, TheStubLibraryHasEveryEntryPointAndItsCuInitFailureIsReported) {
  if (!std::filesystem::exists(kStubDriver))
    GTEST_SKIP() << kStubDriver << " is not installed (it comes with the CUDA toolkit)";
  CudaDriverApi api;
  const CudaDriverInfo info = detail::load_cuda_driver({kStubDriver.string()}, api);
  EXPECT_FALSE(info.available);
  EXPECT_EQ(info.library, kStubDriver.string());
  // Every dlsym succeeded (else the reason would list what "lacks"); cuInit then failed.
  EXPECT_EQ(info.reason.find("lacks"), std::string::npos) << info.reason;
  EXPECT_NE(info.reason.find("could not start: cuInit failed: CUDA_ERROR_STUB_LIBRARY (34)"),
            std::string::npos)
      << info.reason;
  EXPECT_EQ(api.init, nullptr);  // a driver that cannot start installs nothing
}

TEST(CudaDriver, ResultsAreNamedAndFailedCallsThrowDeviceErrors) {
  EXPECT_NE(cuda_result_text(2).find("CUDA_ERROR_OUT_OF_MEMORY (2)"), std::string::npos);
  EXPECT_NE(cuda_result_text(100).find("CUDA_ERROR_NO_DEVICE (100)"), std::string::npos);
  EXPECT_NO_THROW(check_cuda(0, "cuCtxSynchronize"));
  try {
    check_cuda(700, "cuLaunchKernel");
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory "
                  "access was encountered"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaDriver, WithoutADriverAskingForItIsAClearDeviceError) {
  if (cuda_is_available()) GTEST_SKIP() << "a CUDA driver and device are present";
  const std::string& reason = cuda_driver_info().reason;
  EXPECT_FALSE(reason.empty());
  try {
    (void)cuda_driver();
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()), reason);
  }
  EXPECT_THROW((void)cuda_device_properties(0), DeviceError);
  EXPECT_THROW(make_cuda_context_current(0), DeviceError);
}

TEST(CudaDriver, DevicesHavePropertiesAndContexts) {
  SKIP_WITHOUT_CUDA();
  const CudaDriverInfo& info = cuda_driver_info();
  EXPECT_GE(info.version, 11000);
  const CudaDeviceProperties& p = cuda_device_properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.arch(), 50);
  EXPECT_GT(p.sm_count, 0);
  EXPECT_GT(p.total_memory, int64_t{1} << 30);
  EXPECT_NO_THROW(make_cuda_context_current(0));
  EXPECT_NO_THROW(check_cuda(cuda_driver().ctx_synchronize(), "cuCtxSynchronize"));
  try {
    (void)cuda_device_properties(info.device_count);
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ein
