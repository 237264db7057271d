// A test fixture for CUDA devices, parametrised by where it runs: "fake" (the FakeCudaDevice of
// fake_cuda.h, installed for the test; skipped with the reason where it cannot run) or "gpu" (a
// real device; skipped without one). Instantiate a suite with both:
//   INSTANTIATE_TEST_SUITE_P(FakeCuda, Suite, ::testing::Values("fake"));
//   INSTANTIATE_TEST_SUITE_P(Gpu, Suite, ::testing::Values("gpu"));
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "runtime/cuda/driver.h"
#include "support/fake_cuda.h"

namespace ein::testing {

class CudaDeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "fake") {
      std::string why;
      if (!FakeCudaDevice::available(&why)) GTEST_SKIP() << why;
      fake_ = std::make_unique<FakeCudaDevice>();
    } else if (!cuda_is_available()) {
      GTEST_SKIP() << "no GPU: " << cuda_driver_info().reason;
    }
  }
  void TearDown() override { fake_.reset(); }

  std::unique_ptr<FakeCudaDevice> fake_;  ///< the fake device, or null on a GPU
};

}  // namespace ein::testing
