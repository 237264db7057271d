// The device the op tests run on. One suite serves both devices: the same test binary runs
// once on the CPU and again with EIN_TEST_DEVICE set (tests/api/ops/CMakeLists.txt registers both):
//   cpu        the default;
//   cuda       cuda:0; every test skips, with the driver's reason, where there is no GPU;
//   fake-cuda  the fake device of tests/support/fake_cuda.h (host memory, the emitted CUDA C++
//              run under the host emulation): the CUDA path in CI without a GPU.
// Inputs made by the suite's helpers live on that device, results are checked there.
#pragma once

#include <ein/tensor.h>

namespace ein::testing {

/// The device under test (cpu, or cuda:0 for both cuda and fake-cuda).
Device device_under_test();

/// `x` on the device under test (itself when it is there).
Tensor on_test_device(const Tensor& x);

}  // namespace ein::testing
