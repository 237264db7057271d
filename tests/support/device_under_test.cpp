// EIN_TEST_DEVICE for the op tests (tests/support/device_under_test.h): a global test
// environment that installs the fake device, or skips every test where cuda has no driver.
#include "support/device_under_test.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/cuda/driver.h"
#include "support/fake_cuda.h"

namespace ein::testing {
namespace {

std::string requested() {
  const char* v = std::getenv("EIN_TEST_DEVICE");
  return v ? v : "cpu";
}

class DeviceEnvironment final : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string d = requested();
    if (d == "cpu") return;
    if (d == "cuda") {
      const CudaDriverInfo& info = cuda_driver_info();
      if (!info.available) GTEST_SKIP() << "EIN_TEST_DEVICE=cuda: " << info.reason;
      if (info.device_count == 0) GTEST_SKIP() << "EIN_TEST_DEVICE=cuda: the driver sees no GPU";
      return;
    }
    if (d == "fake-cuda") {
      std::string why;
      if (!FakeCudaDevice::available(&why)) GTEST_SKIP() << "EIN_TEST_DEVICE=fake-cuda: " << why;
      fake_ = std::make_unique<FakeCudaDevice>();
      return;
    }
    FAIL() << "EIN_TEST_DEVICE=" << d << ": expected cpu, cuda or fake-cuda";
  }
  void TearDown() override {
    if (fake_)
      std::printf("fake-cuda: %lld kernels prepared (%lld in f64 with local memory on sm_80/90), "
                  "%lld launches, %lld GEMMs\n",
                  static_cast<long long>(fake_->kernels_prepared()),
                  static_cast<long long>(fake_->f64_kernels_spilling()),
                  static_cast<long long>(fake_->launches()),
                  static_cast<long long>(fake_->gemms()));
    fake_.reset();
  }

 private:
  std::unique_ptr<FakeCudaDevice> fake_;
};

[[maybe_unused]] ::testing::Environment* const g_environment =
    ::testing::AddGlobalTestEnvironment(new DeviceEnvironment);

}  // namespace

Device device_under_test() {
  static const Device d = requested() == "cpu" ? cpu() : cuda(0);
  return d;
}

Tensor on_test_device(const Tensor& x) {
  return x.to(device_under_test());
}

}  // namespace ein::testing
