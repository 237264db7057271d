// The values of the emitted CUDA kernels without a GPU: every corpus kernel's CUDA C++ is
// compiled with the host C++ compiler against host_emulation.h (real threads per block, real
// barriers, warp shuffles through per-warp barriers), launched on random inputs with a small
// grid (so the grid-stride loops wrap), and compared with Kernel IR's float64 semantics
// (kernel_ir.h's evaluate()). Elementwise kernels with a vector path run twice: with aligned
// pointers (the 16-byte path) and with pointers one element off (the scalar path).
// What this does not check: device libm and the GPU's own conversions (host_emulation.h).
// Skipped when the CUDA headers (cuda_fp16.h, ...) are not installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "compiler/emit_cuda.h"
#include "cuda/cuda_corpus.h"
#include "ops/ops_test_support.h"
#include "runtime/tensor.h"
#include "support/host_cuda.h"

namespace ein {
namespace {

/// Blocks the emulation launches at most: more than one, fewer than most kernels need, so
/// every grid-stride loop takes several turns.
constexpr int64_t kEmulatedBlocks = 3;

using testing::EmulatedLaunch;

class Emulate : public ::testing::TestWithParam<int> {};

TEST_P(Emulate, MatchesTheFloat64Semantics) {
  if (std::string why; !testing::host_cuda_available(&why)) GTEST_SKIP() << why;
  const testing::CorpusKernel& c = testing::cuda_corpus().at(GetParam());
  const CudaKernel cuda = emit_cuda(c.kernel);
  if (cuda.launch.grid == 0) return;  // an empty domain: nothing is launched
  const EmulatedLaunch launch = testing::build_emulated(cuda.source, cuda.entry);

  // The oracle: Kernel IR with total stores kept as totals, on the same (rounded) values.
  const Kernel general = to_general_form(c.kernel);
  const size_t nb = general.buffers.size();
  std::vector<bool> total(nb, false);
  for (const KernelStore& st : general.stores)
    total[st.buffer] = st.total != Combine::none;
  int64_t rows = 1, row = 1;
  for (int d = 0; d < static_cast<int>(general.domain.size()); ++d)
    (d < general.parallel_dims() ? rows : row) *= general.domain[d];
  constexpr double kUnwritten = 7;  // what outputs hold before the kernel runs
  std::vector<Tensor> inputs(nb);
  std::vector<std::vector<double>> want(nb);
  for (size_t b = 0; b < nb; ++b) {
    const KernelBuffer& buf = general.buffers[b];
    const int64_t n = testing::buffer_extent(general, buf);
    if (!buf.output) {
      inputs[b] = testing::corpus_input(buf.dtype, n, 1000 * GetParam() + b);
      want[b] = inputs[b].to_vector<double>();
    } else {
      want[b].assign(n, kUnwritten);
    }
  }
  evaluate(general, want);
  // A 16-bit store rounds (past the finite range, to ±inf): compare with the rounded values.
  for (size_t b = 0; b < nb; ++b) {
    const DType t = general.buffers[b].dtype;
    if (general.buffers[b].output && !total[b] && (t == DType::f16 || t == DType::bf16))
      want[b] = from_data<double>(want[b], {static_cast<int64_t>(want[b].size())})
                    .to(t)
                    .to_vector<double>();
  }

  const bool both_paths = cuda.vector_width > 1;
  for (int misaligned = 0; misaligned <= (both_paths ? 1 : 0); ++misaligned) {
    SCOPED_TRACE(fmt::format("{}, {} pointers", c.label, misaligned ? "misaligned" : "aligned"));
    // Each buffer gets one spare element in front, so it can start off its alignment.
    std::vector<Tensor> storage(nb);
    std::vector<void*> args;
    for (size_t b = 0; b < nb; ++b) {
      const KernelBuffer& buf = general.buffers[b];
      if (!buf.output) {
        const int64_t n = inputs[b].numel();
        storage[b] = empty({n + 1}, buf.dtype);
        storage[b].slice(0, misaligned, misaligned + n).copy_(inputs[b]);
      } else {
        // A total's slot is a scratch of one compute-type value per row (emit_cuda.h's ABI).
        const DType t = total[b] ? general.compute : buf.dtype;
        const int64_t n = total[b] ? rows : testing::buffer_extent(general, buf);
        storage[b] = from_data<double>(std::vector<double>(n + 1, kUnwritten), {n + 1}).to(t);
      }
      args.push_back(static_cast<char*>(storage[b].data_ptr()) +
                     (misaligned ? element_size(storage[b].dtype()) : 0));
    }
    std::vector<double> params(general.params);
    for (double& p : params)
      args.push_back(&p);
    launch(args.data(), static_cast<unsigned>(std::min(cuda.launch.grid, kEmulatedBlocks)),
           static_cast<unsigned>(cuda.launch.block));

    for (size_t b = 0; b < nb; ++b) {
      const KernelBuffer& buf = general.buffers[b];
      if (!buf.output) continue;
      const int64_t begin = misaligned ? 1 : 0;
      std::vector<double> got = storage[b].to_vector<double>();
      got = std::vector<double>(got.begin() + begin, got.end() - (1 - begin));
      if (total[b]) got = testing::combine_total(general, static_cast<int>(b), got);
      const Tensor got_tensor = from_data<double>(got, {static_cast<int64_t>(got.size())});
      testing::expect_close(got_tensor, {{static_cast<int64_t>(want[b].size())}, want[b]},
                            testing::corpus_tolerance(buf.dtype, total[b] ? rows * row : row),
                            fmt::format("output b{} of {}\n{}", b, c.label, cuda.source));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, Emulate,
                         ::testing::Range(0, static_cast<int>(testing::cuda_corpus().size())),
                         [](const auto& p) { return testing::corpus_test_name(p.param); });

}  // namespace
}  // namespace ein
