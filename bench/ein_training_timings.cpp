// Times a training step with autograd and prints one JSON line per case, like
// ein_cpu_timings: the median and minimum wall time of a step and the kernels it launched.
// bench/compare_training.py runs PyTorch's eager step on the same case in the same run.
//
//   build-bench/bin/ein_training_timings [--reps N] [--warmup N] [--rounds N]
//
// Cases:
//   mlp_step: Linear(D, D) → GELU → Linear(D, D), MSE loss against a target, backward, AdamW
//             step; D = 512, batch B = 256, f32 (the autograd issue's target).
//   mlp_step_operators: the same step written with the C++ operators of ein/tensor_math.h
//             (gelu(x @ w1 + b1) as two eager kernels instead of one map string); the two
//             cases alternate round by round.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ein/ein.h>
#include <ein/flop_counter.h>
#include <ein/nn.h>
#include <ein/optim.h>
#include <fmt/format.h>

namespace ein {
namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double median, min;
};

template <class F>
Timing time_steps(F&& f, int reps, int warmup) {
  for (int i = 0; i < warmup; ++i)
    f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

void mlp_step(int reps, int warmup, bool operators) {
  const int64_t B = 256, D = 512;
  const Tensor x = randn({B, D}, DType::f32, cpu(), 1);
  const Tensor y = randn({B, D}, DType::f32, cpu(), 2);
  // torch.nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
  auto uniform = [](const Shape& s, uint64_t seed, double bound) {
    return map("u[n], b[] -> (2 * u - 1) * b",
               {rand({checked_numel(s)}, DType::f32, cpu(), seed), full({}, bound)})
        .view(s);
  };
  const double bound = 1 / std::sqrt(static_cast<double>(D));
  Tensor w1 = uniform({D, D}, 3, bound).requires_grad_(),
         b1 = uniform({D}, 4, bound).requires_grad_();
  Tensor w2 = uniform({D, D}, 5, bound).requires_grad_(),
         b2 = uniform({D}, 6, bound).requires_grad_();
  optim::AdamW opt({w1, b1, w2, b2}, {.lr = 1e-3});
  auto step = [&] {
    opt.zero_grad();
    Tensor out;
    if (operators) {
      const Tensor h = gelu(einsum("b d, d f -> b f", x, w1) + b1);
      out = einsum("b f, f e -> b e", h, w2) + b2;
    } else {
      const Tensor h = map("h[b f], c[f] -> gelu(h + c)", {einsum("b d, d f -> b f", x, w1), b1});
      out = map("o[b e], c[e] -> o + c", {einsum("b f, f e -> b e", h, w2), b2});
    }
    const Tensor loss = nn::mse_loss(out, y);
    loss.backward();
    opt.step();
  };
  const Timing t = time_steps(step, reps, warmup);
  FlopCounter counter;
  step();
  const CostTotals& c = counter.totals();
  fmt::print(
      "{{\"case\": \"{}\", \"median_s\": {:.6g}, \"min_s\": {:.6g}, \"flops\": {}, "
      "\"matmul_flops\": {}, \"kernels\": {}}}\n",
      operators ? "mlp_step_operators" : "mlp_step", t.median, t.min, c.flops, c.matmul_flops,
      c.kernels);
}

}  // namespace
}  // namespace ein

int main(int argc, char** argv) {
  int reps = 30, warmup = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--warmup") == 0) warmup = std::atoi(argv[i + 1]);
  }
  int rounds = 1;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  for (int r = 0; r < rounds; ++r) {
    ein::mlp_step(reps, warmup, false);
    ein::mlp_step(reps, warmup, true);
  }
}
