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

/// Elements a buffer spans (emulate_test.cpp's rule).
int64_t extent(const Kernel& k, const KernelBuffer& b) {
  int64_t last = 0;
  for (size_t d = 0; d < k.domain.size(); ++d) {
    if (b.strides[d] == 0) continue;
    if (k.domain[d] == 0) return 0;
    last += (k.domain[d] - 1) * b.strides[d];
  }
  return last + 1;
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
      std::vector<double> v = testing::normal_values(extent(general, buf), 1000 * GetParam() + b);
      if (!kFloatDTypes.contains(buf.dtype))
        for (double& x : v)
          x = std::floor(std::abs(x) * 3);
      host = from_data<double>(v, {static_cast<int64_t>(v.size())}).to(buf.dtype);
      want[b] = host.to_vector<double>();
    } else {
      want[b].assign(extent(general, buf), kUnwritten);
      const DType t = total[b] ? general.compute : buf.dtype;  // a total's per-row scratch
      const int64_t n = total[b] ? rows : extent(general, buf);
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
    if (total[b]) {  // the runtime's host combine of the per-row values
      Combine combine = Combine::none;
      for (const KernelStore& st : general.stores)
        if (st.buffer == static_cast<int>(b)) combine = st.total;
      double acc = combine_identity(combine);
      for (double v : got)
        acc = combine_values(combine, acc, v);
      got = {acc};
    }
    const testing::Tolerance tol =
        buf.dtype == DType::f8e4m3 ? testing::Tolerance{1.0 / 16, 1e-3}
        : buf.dtype == DType::f8e5m2
            ? testing::Tolerance{1.0 / 8, 1e-3}
            : testing::tolerance_for(buf.dtype, total[b] ? rows * row : row);
    testing::expect_close(from_data<double>(got, {static_cast<int64_t>(got.size())}),
                          {{static_cast<int64_t>(want[b].size())}, want[b]}, tol,
                          fmt::format("output b{} of {} on sm_{}", b, c.label, options.arch));
  }
}

std::string label(const ::testing::TestParamInfo<int>& info) {
  std::string out = fmt::format("k{:03}_", info.param);
  for (char ch : testing::cuda_corpus().at(info.param).label)
    out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out;
}

INSTANTIATE_TEST_SUITE_P(Corpus, GpuCorpus,
                         ::testing::Range(0, static_cast<int>(testing::cuda_corpus().size())),
                         label);

}  // namespace
}  // namespace ein
