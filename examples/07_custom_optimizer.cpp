// Example 7: the second half of the lecture in C++: initialisation, a custom optimizer written
// with the tensor operators, token data from a file, and mixed precision.
//
// Run: scripts/build.sh && build/bin/example_07_custom_optimizer
//
// 1. Parameters. x · w with w ~ N(0, 1) has outputs of std ≈ √input_dim; w / √input_dim
//    (init::fan_in_normal, the lecture's scaling) keeps them near 1.
// 2. The lecture's AdaGrad, written as PyTorch code is, with ein's operators:
//        g2 += square(g);   p -= lr * g / sqrt(g2 + 1e-5)
//    The operators are built lazily, so each line is one fused map kernel: a step runs as many
//    kernels as the same update written as map strings, and trains to bitwise the same losses.
// 3. Data. An int32 token file read by ein::TokenLoader: y is x shifted by one token.
// 4. Mixed precision. The forward in bf16 (inputs and weights cast; the gradients come back
//    to the f32 master weights through the casts) tracks the f32 run.
//
// Each part checks what it prints; the program exits 1 when a check fails (it is a ctest).
#include <ein/ein.h>
#include <ein/flop_counter.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using namespace ein;

int failures = 0;
void check(bool ok, const char* what) {
  std::printf("  %s %s\n", ok ? "ok:    " : "FAILED:", what);
  if (!ok) ++failures;
}

double rms(const Tensor& t) { return std::sqrt(mean(square(t)).item()); }

// ---- 1. Parameters -------------------------------------------------------------------------

void parameters() {
  std::printf("1. initialisation\n");
  const int64_t input_dim = 4096, output_dim = 32;
  const Tensor x = randn({64, input_dim}, DType::f32, cpu(), 1);
  const Tensor raw = randn({input_dim, output_dim}, DType::f32, cpu(), 2);
  const Tensor scaled = init::fan_in_normal({input_dim, output_dim}, {.seed = 2});
  const double big = rms(einsum("b d, d f -> b f", x, raw));
  const double unit = rms(einsum("b d, d f -> b f", x, scaled));
  std::printf("  std of x·w: %.1f with N(0, 1) weights (√%lld = %.0f), %.3f with N(0, 1/%lld)\n",
              big, static_cast<long long>(input_dim), std::sqrt(static_cast<double>(input_dim)),
              unit, static_cast<long long>(input_dim));
  check(std::fabs(big / std::sqrt(static_cast<double>(input_dim)) - 1) < 0.2, "N(0, 1): std ≈ √input_dim");
  check(std::fabs(unit - 1) < 0.2, "N(0, 1/input_dim): std ≈ 1");
}

// ---- 2. A custom optimizer -----------------------------------------------------------------

/// The lecture's AdaGrad: g2 accumulates squared gradients; p -= lr · g / √(g2 + 1e-5).
class AdaGrad {
 public:
  AdaGrad(std::vector<Tensor> params, double lr, bool operators)
      : params_(std::move(params)), g2_(params_.size()), lr_(lr), operators_(operators) {}

  void step() {
    NoGrad no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor g = params_[i].grad(), p = params_[i].detach();
      if (!g.defined()) continue;
      if (!g2_[i].defined()) g2_[i] = full(p.shape(), 0.0, p.dtype());
      if (operators_) {  // as the lecture's PyTorch: each line is one fused kernel, in place
        g2_[i] += square(g);
        p -= lr_ * g / sqrt(g2_[i] + 1e-5);
      } else {  // the same update as map strings
        g2_[i].copy_(map("s[...], g[...] -> s + square(g)", {g2_[i], g}));
        p.copy_(map("p[...], lr[], g[...], s[...], e[] -> p - lr * g / sqrt(s + e)",
                    {p, full({}, lr_), g, g2_[i], full({}, 1e-5)}));
      }
    }
  }
  void zero_grad() { ein::zero_grad(params_, true); }

 private:
  std::vector<Tensor> params_, g2_;
  double lr_;
  bool operators_;
};

/// The lecture's Cruncher with two layers: x (B, D) → (B, D) → (B, 1).
struct Cruncher : nn::Module {
  Tensor w0, w1;
  explicit Cruncher(int64_t d)
      : w0(register_parameter("w0", init::fan_in_normal({d, d}, {.seed = 3, .requires_grad = true}))),
        w1(register_parameter("w1", init::fan_in_normal({d, 1}, {.seed = 4, .requires_grad = true}))) {}
  /// The forward in `compute` (f32, or bf16 for mixed precision): casts are differentiable,
  /// so the gradients reach the f32 weights.
  Tensor operator()(const Tensor& x, DType compute = DType::f32) const {
    const Tensor h = einsum("b i, i o -> b o", cast(x, compute), cast(w0, compute));
    return cast(einsum("b i, i o -> b o", h, cast(w1, compute)), DType::f32);
  }
};

/// Step k's batch: random x and the lecture's linear target.
std::pair<Tensor, Tensor> batch(int64_t k, int64_t d) {
  const Tensor x = randn({32, d}, DType::f32, cpu(), 100 + static_cast<uint64_t>(k));
  const Tensor target = (arange(d, DType::f32) / static_cast<double>(d)).eval().reshape({d, 1});
  return {x, einsum("b d, d o -> b o", x, target)};
}

/// The losses of `steps` steps, and the kernels of the last optimizer step.
std::pair<std::vector<double>, int64_t> train(bool operators, DType compute, int steps) {
  const int64_t d = 64;
  Cruncher model(d);
  AdaGrad opt(model.parameters(), 0.01, operators);
  std::vector<double> losses;
  int64_t kernels = 0;
  for (int k = 0; k < steps; ++k) {
    const auto [x, y] = batch(k, d);
    const Tensor loss = nn::mse_loss(model(x, compute), y);
    losses.push_back(loss.item());
    opt.zero_grad();
    loss.backward();
    FlopCounter counter;
    opt.step();
    kernels = counter.totals().kernels;
  }
  return {losses, kernels};
}

void custom_optimizer() {
  std::printf("2. a custom optimizer (the lecture's AdaGrad)\n");
  const auto [ops, ops_kernels] = train(true, DType::f32, 30);
  const auto [maps, map_kernels] = train(false, DType::f32, 30);
  std::printf("  loss %.4f -> %.4f in 30 steps; an optimizer step runs %lld kernels with operators, "
              "%lld with map strings\n",
              ops.front(), ops.back(), static_cast<long long>(ops_kernels),
              static_cast<long long>(map_kernels));
  check(ops.back() < 0.5 * ops.front(), "the loss falls");
  check(ops == maps, "operators and map strings give bitwise the same losses");
  check(ops_kernels == map_kernels, "operators run as many kernels as map strings");
}

// ---- 3. Data -------------------------------------------------------------------------------

void data() {
  std::printf("3. data: an int32 token file\n");
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("ein_example_07_" + std::to_string(::getpid()) + ".i32");
  {
    std::ofstream out(path, std::ios::binary);
    for (int32_t t = 0; t < 1000; ++t)
      out.write(reinterpret_cast<const char*>(&t), sizeof t);
  }
  bool shifted = true;
  {
    TokenLoader loader(path.string(), {.batch_size = 2, .context = 8, .seed = 0, .vocab_size = 1000});
    const Batch b = loader.next_batch();
    const std::vector<int64_t> x = b.x.to_vector<int64_t>(), y = b.y.to_vector<int64_t>();
    for (size_t i = 0; i < x.size(); ++i)
      shifted = shifted && y[i] == x[i] + 1;
    std::printf("  x[0] = %lld %lld %lld ...  y[0] = %lld %lld %lld ...\n",
                static_cast<long long>(x[0]), static_cast<long long>(x[1]), static_cast<long long>(x[2]),
                static_cast<long long>(y[0]), static_cast<long long>(y[1]), static_cast<long long>(y[2]));
  }
  std::filesystem::remove(path);
  check(shifted, "y is x shifted by one token");
}

// ---- 4. Mixed precision --------------------------------------------------------------------

void mixed_precision() {
  std::printf("4. mixed precision: bf16 forward, f32 master weights\n");
  const auto [f32, unused0] = train(true, DType::f32, 30);
  const auto [bf16, unused1] = train(true, DType::bf16, 30);
  std::printf("  final loss: f32 %.5f, bf16 %.5f\n", f32.back(), bf16.back());
  check(bf16.back() < 0.5 * bf16.front(), "the bf16 loss falls");
  check(std::fabs(bf16.back() - f32.back()) < 0.1 * f32.back(), "bf16 tracks f32 within 10%");
}

}  // namespace

int main() {
  try {
    parameters();
    custom_optimizer();
    data();
    mixed_precision();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
