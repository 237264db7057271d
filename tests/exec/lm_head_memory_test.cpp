// The FlashAttention issue's GPU memory target for the fused LM head: at the shape
// bench/gpu/run.sh times (rows 8192, d 768, vocabulary 50257, f32), a forward + backward of
// `cross_entropy(h @ w, y)` through the path `ein train` takes peaks at most a tenth of the
// unfused head's device memory above its inputs.
//
// Storage counts the bytes every tensor asks for on any device (include/ein/storage.h), so the
// fake device (host memory posing as cuda:0, the same kernels, GEMM plans and allocations;
// tests/support/fake_cuda.h) counts what a GPU counts, but for cuBLASLt's workspace (at most
// 32 MiB during a GEMM, allocated only on a GPU). Each head's peak is checked to be exactly what
// its plan holds: the fused head dw, dh, one chunk of 512 rows' logits and the rows' loss and
// logsumexp; the unfused one the logits, their gradient and the rows' results. On the fake, at a
// smaller shape (the emulation runs every GPU thread as a host thread: the benchmark shape takes
// five minutes; EIN_LM_HEAD_SHAPE=8192,768,50257 runs it); on a GPU, at the benchmark shape.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/ops.h>
#include <ein/storage.h>
#include <ein/tensor_math.h>
#include <fmt/format.h>

#include "script/script.h"
#include "support/cuda_device_test.h"

namespace ein {
namespace {

class LmHeadMemory : public testing::CudaDeviceTest {};

struct Shape3 {
  int64_t rows, d, v;
};
constexpr Shape3 kBenchmarkShape{8192, 768, 50257};

/// Device bytes above the inputs the fused head's plan holds (f32): dw, dh, one chunk of
/// logits (512 rows: exec/cross_entropy_cuda.cpp's chunk_rows below d = 3072) and the rows'
/// loss and logsumexp.
int64_t fused_plan_bytes(Shape3 s) {
  return 4 * (s.d * s.v + s.rows * s.d + std::min<int64_t>(512, s.rows) * s.v + 2 * s.rows);
}

/// The unfused head's: the logits and their gradient, live together in the backward, with 12
/// bytes a row and 8 more of the rows' results (measured at 600, 1200 and 8192 rows).
int64_t unfused_plan_bytes(Shape3 s) {
  return 4 * 2 * s.rows * s.v + 12 * s.rows + 8;
}

struct HeadRun {
  int64_t peak = 0;  ///< device bytes above the inputs, at most, during forward + backward
  double loss = 0;
  Tensor dh, dw;
};

HeadRun run_head(const std::filesystem::path& script, bool fused, const Tensor& h, const Tensor& w,
                 const Tensor& y) {
  script::LoadOptions o;
  o.stdlib = {EIN_STDLIB_DIR};
  o.fused_cross_entropy = fused;
  o.device = cuda();
  auto program = script::Program::load(script.string(), o);
  HeadRun r;
  Tensor hh = h.detach().requires_grad_(), ww = w.detach().requires_grad_();
  const int64_t before = memory_allocated(cuda());
  reset_peak_memory_stats(cuda());
  {
    const Tensor loss = program->call("head", {hh, ww, y})[0];
    loss.backward(ones({}, DType::f32, cuda()));
    r.loss = loss.item();
    synchronize();
  }
  r.peak = max_memory_allocated(cuda()) - before;
  r.dh = hh.grad().to(cpu());
  r.dw = ww.grad().to(cpu());
  return r;
}

/// The largest |a - b| / (1 + |b|) over two tensors' elements.
double largest_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), z = b.to_vector<float>();
  double most = 0;
  for (size_t i = 0; i < x.size(); ++i)
    most = std::max(most, std::abs(static_cast<double>(x[i]) - z[i]) / (1 + std::abs(z[i])));
  return most;
}

TEST_P(LmHeadMemory, PeaksAreWhatTheirPlansHold) {
  // The plans at the benchmark shape: 282.6 MB against 3294.0 MB.
  EXPECT_LE(fused_plan_bytes(kBenchmarkShape) * 10, unfused_plan_bytes(kBenchmarkShape));

  Shape3 s = GetParam() == "gpu" ? kBenchmarkShape : Shape3{600, 40, 2600};  // 2 chunks
  if (const char* e = std::getenv("EIN_LM_HEAD_SHAPE")) {
    char comma;
    std::istringstream(e) >> s.rows >> comma >> s.d >> comma >> s.v;
  }
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("ein_lm_head_memory_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const auto script = dir / "lm_head.ein";
  std::ofstream(script) << "import nn\n"
                           "fn head(h: f32[n d], w: f32[d v], y: i64[n]) -> f32[] = "
                           "cross_entropy(h @ w, y)\n";
  // As bench/attention/ein_lm_head_timings.cpp: h as a LayerNorm leaves it, w at GPT-2's scale.
  const Tensor h = randn({s.rows, s.d}, DType::f32, cpu(), 1).to(cuda());
  Tensor w = randn({s.d, s.v}, DType::f32, cpu(), 2);
  w *= 0.02;
  const Tensor wc = w.to(cuda());
  std::vector<int64_t> targets(static_cast<size_t>(s.rows));
  for (int64_t i = 0; i < s.rows; ++i)
    targets[i] = (i * 7919) % s.v;
  const Tensor y = from_data(targets, {s.rows}).to(cuda());

  const HeadRun fused = run_head(script, true, h, wc, y);
  const HeadRun unfused = run_head(script, false, h, wc, y);
  std::filesystem::remove_all(dir);
  std::printf(
      "LM head %lld x %lld x %lld f32 on %s: peak above the inputs %.1f MB fused, "
      "%.1f MB unfused (1/%.2f); beyond their plans %lld and %lld bytes\n",
      static_cast<long long>(s.rows), static_cast<long long>(s.d), static_cast<long long>(s.v),
      GetParam().c_str(), fused.peak / 1e6, unfused.peak / 1e6,
      static_cast<double>(unfused.peak) / std::max<int64_t>(fused.peak, 1),
      static_cast<long long>(fused.peak - fused_plan_bytes(s)),
      static_cast<long long>(unfused.peak - unfused_plan_bytes(s)));
  // What a GPU may hold beyond the plans: cuBLASLt's workspace during a GEMM.
  const int64_t slack = GetParam() == "gpu" ? int64_t{32} << 20 : 0;
  EXPECT_GE(fused.peak, fused_plan_bytes(s));
  EXPECT_LE(fused.peak, fused_plan_bytes(s) + slack) << "the fused head holds more than its plan";
  EXPECT_GE(unfused.peak, unfused_plan_bytes(s));
  EXPECT_LE(unfused.peak, unfused_plan_bytes(s) + slack)
      << "the unfused head holds more than its plan";
  if (s.rows == kBenchmarkShape.rows && s.d == kBenchmarkShape.d && s.v == kBenchmarkShape.v) {
    EXPECT_LE(fused.peak * 10, unfused.peak);
  }

  EXPECT_NEAR(fused.loss, unfused.loss, 1e-5 * std::abs(unfused.loss));
  EXPECT_LT(largest_difference(fused.dh, unfused.dh), 1e-5);
  EXPECT_LT(largest_difference(fused.dw, unfused.dw), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(FakeCuda, LmHeadMemory, ::testing::Values("fake"));
INSTANTIATE_TEST_SUITE_P(Gpu, LmHeadMemory, ::testing::Values("gpu"));

}  // namespace
}  // namespace ein
