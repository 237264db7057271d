// Example 3: gradients and what they cost, the lecture's way.
//
// Run: scripts/build.sh && build/bin/example_03_autograd
//
// 1. The linear model: loss = 0.5 (x·w − 5)², so d loss / d w = (x·w − 5) x = x when x·w = 6.
// 2. The two-layer model x --w1--> h1 --w2--> h2 --> loss: a FlopCounter splits the work into
//    forward (2BDD + 2BDK), input gradients (h1.grad: 2BDK; x needs none, so it costs nothing)
//    and weight gradients (w2.grad: 2BDK, w1.grad: 2BDD) — backward ≈ 2× forward.
// 3. A small MLP trained with AdamW: the loss falls; FLOPs per step and MFU on this CPU.
#include <ein/ein.h>
#include <ein/flop_counter.h>
#include <ein/nn.h>
#include <ein/optim.h>

#include <cstdio>

namespace {

void print_vector(const char* name, const ein::Tensor& t) {
  std::printf("%s = [", name);
  for (double v : t.to_vector<double>())
    std::printf(" %g", v);
  std::printf(" ]\n");
}

}  // namespace

int main() {
  // 1. The lecture's first example.
  const ein::Tensor x = ein::from_data<float>({1, 2, 3}, {3});
  ein::Tensor w = ein::from_data<float>({1, 1, 1}, {3}).requires_grad_();
  const ein::Tensor pred = ein::einsum("i, i ->", x, w);
  const ein::Tensor loss = ein::map("p[] -> 0.5 * (p - 5) ** 2", {pred});
  loss.backward();
  print_vector("w.grad", w.grad());
  std::printf("x.grad defined: %s (x does not require grad)\n\n",
              x.grad().defined() ? "yes" : "no");

  // 2. Counting the FLOPs of forward and backward.
  const int64_t B = 1024, D = 256, K = 64;
  const ein::Tensor xs = ein::ones({B, D});
  ein::Tensor w1 = ein::randn({D, D}, ein::DType::f32, ein::cpu(), 1).requires_grad_();
  ein::Tensor w2 = ein::randn({D, K}, ein::DType::f32, ein::cpu(), 2).requires_grad_();
  ein::FlopCounter counter;
  const ein::Tensor h1 = ein::einsum("b d, d e -> b e", xs, w1);
  const ein::Tensor h2 = ein::einsum("b e, e k -> b k", h1, w2);
  ein::reduce(ein::map("h[b k] -> h ** 2", {h2}), "b k -> ", "mean").backward();
  auto mm = [&](ein::CostPhase p) { return static_cast<double>(counter.phase(p).matmul_flops); };
  std::printf("two-layer model, B=%ld D=%ld K=%ld (%s)\n", static_cast<long>(B),
              static_cast<long>(D), static_cast<long>(K), ein::kFlopConvention.data());
  std::printf("  forward matmul FLOPs      %12.0f   2BDD + 2BDK = %ld\n",
              mm(ein::CostPhase::forward), static_cast<long>(2 * B * D * D + 2 * B * D * K));
  std::printf("  input-gradient FLOPs      %12.0f   2BDK (h1.grad; no x.grad) = %ld\n",
              mm(ein::CostPhase::input_grad), static_cast<long>(2 * B * D * K));
  std::printf("  weight-gradient FLOPs     %12.0f   2BDK + 2BDD = %ld\n\n",
              mm(ein::CostPhase::weight_grad), static_cast<long>(2 * B * D * K + 2 * B * D * D));

  // 3. Training: Linear → GELU → Linear on a fixed batch, MSE loss, AdamW.
  const int64_t n = 256, d = 128;
  const ein::Tensor inputs = ein::randn({n, d}, ein::DType::f32, ein::cpu(), 3);
  const ein::Tensor targets = ein::map("x[n d] -> sin(x)", {inputs});
  ein::Tensor v1 =
      ein::map("w[d f] -> w * 0.088", {ein::randn({d, d}, ein::DType::f32, ein::cpu(), 4)})
          .requires_grad_();
  ein::Tensor c1 = ein::zeros({d}).requires_grad_();
  ein::Tensor v2 =
      ein::map("w[d f] -> w * 0.088", {ein::randn({d, d}, ein::DType::f32, ein::cpu(), 5)})
          .requires_grad_();
  ein::Tensor c2 = ein::zeros({d}).requires_grad_();
  ein::optim::AdamW opt({v1, c1, v2, c2}, {.lr = 3e-3, .weight_decay = 0});
  ein::FlopCounter training;
  for (int step = 0; step <= 200; ++step) {
    opt.zero_grad();
    const ein::Tensor h =
        ein::map("h[n f], c[f] -> gelu(h + c)", {ein::einsum("n d, d f -> n f", inputs, v1), c1});
    const ein::Tensor out =
        ein::map("o[n f], c[f] -> o + c", {ein::einsum("n d, d f -> n f", h, v2), c2});
    const ein::Tensor l = ein::nn::mse_loss(out, targets);
    l.backward();
    opt.step();
    if (step % 50 == 0) std::printf("step %3d  loss %.5f\n", step, l.item());
  }
  std::printf("%.2f GFLOP per step; %.1f GFLOP/s; MFU %.1f%% of this CPU's f32 peak\n",
              static_cast<double>(training.totals().flops) / 201 / 1e9,
              training.flops_per_second() / 1e9,
              100 * training.mfu(ein::this_cpu(), ein::DType::f32));
  return 0;
}
