// Every corpus kernel on a GPU: its CUDA C++ compiled by NVRTC for the device, launched through
// runtime/cuda_launch.h on random inputs in device memory, and compared with Kernel IR's
// float64 semantics (evaluate()), as emulate_test.cpp does on the host. Skipped, with the
// reason, where there is no driver or no NVRTC; without a GPU only the launcher's refusals run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit_cuda.h"
#include "cuda/cuda_corpus.h"
#include "ops/ops_test_support.h"
#include "runtime/cuda_backend.h"
#include "runtime/cuda_launch.h"
#include "runtime/tensor.h"

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

  const Kernel general = to_general_form(c.kernel);
  const size_t nb = general.buffers.size();
  std::vector<bool> total(nb, false);
  for (const KernelStore& st : general.stores)
    total[st.buffer] = st.total != Combine::none;
  int64_t rows = 1, row = 1;
  for (int d = 0; d < static_cast<int>(general.domain.size()); ++d)
    (d < general.parallel_dims() ? rows : row) *= general.domain[d];
  constexpr double kUnwritten = 7;
  std::vector<Tensor> device(nb);
  std::vector<std::vector<double>> want(nb);
  std::vector<void*> args;
  for (size_t b = 0; b < nb; ++b) {
    const KernelBuffer& buf = general.buffers[b];
    Tensor host;
    if (!buf.output) {
      host = testing::corpus_input(buf.dtype, testing::buffer_extent(general, buf), 1000 * GetParam() + b);
      want[b] = host.to_vector<double>();
    } else {
      want[b].assign(testing::buffer_extent(general, buf), kUnwritten);
      const DType t = total[b] ? general.compute : buf.dtype;  // a total's per-row scratch
      const int64_t n = total[b] ? rows : testing::buffer_extent(general, buf);
      host = from_data<double>(std::vector<double>(n, kUnwritten), {n}).to(t);
    }
    device[b] = host.to(cuda());
    args.push_back(device[b].storage() ? device[b].storage()->data() : nullptr);
  }
  evaluate(general, want);
  for (size_t b = 0; b < nb; ++b) {
    const DType t = general.buffers[b].dtype;
    if (general.buffers[b].output && !total[b] && (t == DType::f16 || t == DType::bf16))
      want[b] = from_data<double>(want[b], {static_cast<int64_t>(want[b].size())})
                    .to(t)
                    .to_vector<double>();
  }

  const Stream stream = Stream::create(0);
  launch_cuda_kernel(*binary, emitted.entry, emitted.launch.grid, emitted.launch.block, args,
                     general.params, stream);
  stream.synchronize();
  for (size_t b = 0; b < nb; ++b) {
    const KernelBuffer& buf = general.buffers[b];
    if (!buf.output) continue;
    std::vector<double> got = device[b].to_vector<double>();
    if (total[b]) got = testing::combine_total(general, static_cast<int>(b), got);
    const testing::Tolerance tol = testing::corpus_tolerance(buf.dtype, total[b] ? rows * row : row);
    testing::expect_close(from_data<double>(got, {static_cast<int64_t>(got.size())}),
                          {{static_cast<int64_t>(want[b].size())}, want[b]}, tol,
                          fmt::format("output b{} of {} on sm_{}", b, c.label, options.arch));
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, GpuCorpus,
                         ::testing::Range(0, static_cast<int>(testing::cuda_corpus().size())),
                         [](const auto& p) { return testing::corpus_test_name(p.param); });

}  // namespace
}  // namespace ein
