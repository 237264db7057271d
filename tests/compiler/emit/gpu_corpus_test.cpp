// Every corpus kernel on a GPU: its CUDA C++ compiled by NVRTC for the device, launched through
// runtime/cuda/launch.h on random inputs in device memory, and compared with Kernel IR's
// float64 semantics (evaluate()), as emulate_test.cpp does on the host. Skipped, with the
// reason, where there is no driver or no NVRTC; without a GPU only the launcher's refusals run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/emit_cuda.h"
#include "compiler/emit/cuda_corpus.h"
#include "api/ops/ops_test_support.h"
#include "runtime/cuda/backend.h"
#include "runtime/cuda/launch.h"
#include <ein/tensor.h>

namespace ein {
namespace {

TEST(CudaLaunch, AnEmptyGridLaunchesNothingAndOtherwiseWithoutADriverItIsADeviceError) {
  if (cuda_is_available()) GTEST_SKIP() << "a CUDA driver and device are present";
  const CudaBinary none;
  const Stream stream = Stream::default_stream(0);
  EXPECT_NO_THROW(launch_cuda_kernel(none, "k", /*grid=*/0, 256, {}, {}, stream));
  try {
    launch_cuda_kernel(none, "k", 1, 256, {}, {}, stream);
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()), cuda_driver_info().reason);
  }
}

class GpuCorpus : public ::testing::TestWithParam<int> {};

TEST_P(GpuCorpus, MatchesTheFloat64Semantics) {
  if (!cuda_is_available()) GTEST_SKIP() << cuda_driver_info().reason;
  if (!nvrtc_info().available) GTEST_SKIP() << nvrtc_info().reason;
  const testing::CorpusKernel& c = testing::cuda_corpus().at(GetParam());
  const CudaKernel emitted = emit_cuda(c.kernel);
  CudaCompileOptions options;
  options.arch = cuda_device_properties(0).arch();
  const auto binary =
      CudaCompiler::instance().compile(emitted.source, emitted.entry + ".cu", options);

  const testing::CorpusOracle o = testing::corpus_oracle(GetParam());
  const size_t nb = o.general.buffers.size();
  std::vector<Tensor> device(nb);
  std::vector<void*> args;
  for (size_t b = 0; b < nb; ++b) {
    device[b] = o.initial_slot(b).to(cuda());
    args.push_back(device[b].numel() ? device[b].device_ptr() : nullptr);
  }

  const Stream stream = Stream::create(0);
  launch_cuda_kernel(*binary, emitted.entry, emitted.launch.grid, emitted.launch.block, args,
                     o.general.params, stream);
  stream.synchronize();
  for (size_t b = 0; b < nb; ++b)
    if (o.general.buffers[b].output)
      o.expect_output(b, device[b].to_vector<double>(),
                      fmt::format("output b{} of {} on sm_{}", b, c.label, options.arch));
}

INSTANTIATE_TEST_SUITE_P(Corpus, GpuCorpus,
                         ::testing::Range(0, static_cast<int>(testing::cuda_corpus().size())),
                         [](const auto& p) { return testing::corpus_test_name(p.param); });

}  // namespace
}  // namespace ein
