// ein::nn: values against float64 formulas, gradients against finite differences, and the
// kernel counts the issue asks for (one kernel forward, at most two backward).
#include <gtest/gtest.h>

#include <cmath>

#include <ein/errors.h>
#include <ein/module.h>
#include <ein/nn.h>
#include <ein/ops.h>

#include "api/autograd/gradcheck.h"
#include "exec/cpu_executor.h"
#include "support/temp_path.h"

namespace ein::testing {
namespace {

constexpr DType f64 = DType::f64;

Tensor normal(const Shape& shape, uint64_t seed) {
  return randn(shape, f64, cpu(), seed);
}

std::vector<double> softmax_ref(const std::vector<double>& x, int64_t n) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < n; ++c)
      m = std::max(m, x[r * n + c]);
    for (int64_t c = 0; c < n; ++c)
      s += std::exp(x[r * n + c] - m);
    for (int64_t c = 0; c < n; ++c)
      y[r * n + c] = std::exp(x[r * n + c] - m) / s;
  }
  return y;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
}

TEST(Nn, SoftmaxValuesAndGradient) {
  const Tensor x = normal({2, 3, 5}, 1);
  expect_close(nn::softmax(x).to_vector<double>(), softmax_ref(x.to_vector<double>(), 5), 1e-12,
               "softmax");
  gradcheck("softmax", [](const std::vector<Tensor>& in) { return nn::softmax(in[0]); }, {x});
  gradcheck("log_softmax", [](const std::vector<Tensor>& in) { return nn::log_softmax(in[0]); },
            {normal({4, 6}, 2).transpose(0, 1)});
}

TEST(Nn, LayerNormAndRmsNorm) {
  const Tensor x = normal({3, 4, 8}, 3), w = normal({8}, 4), b = normal({8}, 5);
  // Values: (x − mean) / sqrt(var + eps) · w + b per row.
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(),
                            bv = b.to_vector<double>();
  std::vector<double> want(xv.size());
  for (size_t r = 0; r < xv.size() / 8; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 8; ++c)
      mean += xv[r * 8 + c] / 8;
    for (int c = 0; c < 8; ++c)
      var += (xv[r * 8 + c] - mean) * (xv[r * 8 + c] - mean) / 8;
    for (int c = 0; c < 8; ++c)
      want[r * 8 + c] = (xv[r * 8 + c] - mean) / std::sqrt(var + 1e-5) * wv[c] + bv[c];
  }
  expect_close(nn::layer_norm(x, w, b).to_vector<double>(), want, 1e-10, "layer_norm");
  gradcheck("layer_norm",
            [](const std::vector<Tensor>& in) { return nn::layer_norm(in[0], in[1], in[2]); },
            {x, w, b});
  gradcheck("layer_norm without affine",
            [](const std::vector<Tensor>& in) { return nn::layer_norm(in[0], Tensor(), Tensor()); },
            {normal({5, 6}, 6)});
  gradcheck("rms_norm", [](const std::vector<Tensor>& in) { return nn::rms_norm(in[0], in[1]); },
            {x, w});
}

TEST(Nn, CrossEntropy) {
  const Tensor logits = normal({6, 5}, 7);
  const Tensor target = from_data<int64_t>({0, 4, 2, -100, 1, 3}, {6});
  const std::vector<double> lv = logits.to_vector<double>();
  double want = 0;
  const int64_t t[] = {0, 4, 2, -100, 1, 3};
  for (int r = 0; r < 6; ++r) {
    if (t[r] < 0) continue;
    double m = -INFINITY, s = 0;
    for (int c = 0; c < 5; ++c)
      m = std::max(m, lv[r * 5 + c]);
    for (int c = 0; c < 5; ++c)
      s += std::exp(lv[r * 5 + c] - m);
    want += (m + std::log(s) - lv[r * 5 + t[r]]) / 5;  // 5 rows are not ignored
  }
  EXPECT_NEAR(nn::cross_entropy(logits, target).item(), want, 1e-12);
  gradcheck("cross_entropy",
            [&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], target); },
            {logits});
  gradcheck("mse_loss", [](const std::vector<Tensor>& in) { return nn::mse_loss(in[0], in[1]); },
            {normal({3, 4}, 8), normal({3, 4}, 9)});
  EXPECT_TRUE(std::isnan(nn::cross_entropy(logits, full({6}, -100, DType::i64)).item()));
}

/// Kernels run by `f` (JIT kernels; BLAS calls are not kernels here).
template <class F>
int64_t launches(F&& f) {
  const int64_t before = executor_stats().launches;
  f();
  return executor_stats().launches - before;
}

TEST(Nn, OneKernelForwardAtMostTwoBackward) {
  const Tensor x = randn({64, 128}, DType::f32, cpu(), 10);
  Tensor w = ones({128}).requires_grad_(), b = zeros({128}).requires_grad_();
  Tensor xs = x.detach().requires_grad_();
  const Tensor target = from_data<int64_t>(std::vector<int64_t>(64, 3), {64});
  struct Case {
    const char* name;
    std::function<Tensor()> forward;
  };
  for (const Case& c : {Case{"softmax", [&] { return nn::softmax(xs); }},
                        Case{"layer_norm", [&] { return nn::layer_norm(xs, w, b); }},
                        Case{"rms_norm", [&] { return nn::rms_norm(xs, w); }},
                        Case{"cross_entropy", [&] { return nn::cross_entropy(xs, target); }}}) {
    c.forward();            // compile first
    zero_grad({w, b, xs});  // so no backward below accumulates into an existing grad
    Tensor y;
    EXPECT_EQ(launches([&] { y = c.forward(); }), 1) << c.name << " forward";
    const Tensor g = y.dim() == 0 ? Tensor() : ones(y.shape());
    if (y.dim() == 0) {
      y.backward();
      zero_grad({w, b, xs});
      EXPECT_LE(launches([&] { c.forward().backward(); }) - 1, 2) << c.name << " backward";
    } else {
      y.backward(g);
      zero_grad({w, b, xs});
      EXPECT_LE(launches([&] { c.forward().backward(g); }) - 1, 2) << c.name << " backward";
    }
  }
}

struct TinyLinear : nn::Module {
  Tensor weight, bias;
  TinyLinear(int64_t in, int64_t out)
      : weight(register_parameter("weight", randn({in, out}, DType::f32, cpu(), 7))),
        bias(register_parameter("bias", zeros({out}))) {}
};

struct TinyNet : nn::Module {
  TinyLinear first{3, 4}, second{4, 2};
  Tensor mask = register_buffer("mask", ones({2}));
  TinyNet() {
    register_module("layers.0", first);
    register_module("layers.1", second);
  }
};

// Module: qualified names in registration order, parameters are leaves that require grad,
// state_dict round trips through safetensors, and a state that does not fit is refused whole.
TEST(Module, NamesStateDictAndStrictLoading) {
  TinyNet net;
  std::vector<std::string> names;
  for (const auto& [name, t] : net.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                             "layers.1.bias", "mask"}));
  EXPECT_EQ(net.parameters().size(), 4u);
  EXPECT_TRUE(net.first.weight.requires_grad() && net.first.weight.is_leaf());
  const std::string path = ein::testing::temp_path("ein_module.safetensors").string();
  net.save(path);
  TinyNet other;
  other.first.weight.detach().fill_(0);
  other.load(path);
  EXPECT_EQ(other.first.weight.to_vector<float>(), net.first.weight.to_vector<float>());
  StateDict bad = net.state_dict();
  bad[1].second = zeros({5});     // layers.0.bias of the wrong shape
  bad.pop_back();                 // mask missing
  bad.emplace_back("extra", zeros({1}));
  try {
    other.load_state_dict(bad);
    ADD_FAILURE() << "no error";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'layers.0.bias' is f32 [4] here but f32 [5]"), std::string::npos) << what;
    EXPECT_NE(what.find("missing: 'mask'"), std::string::npos) << what;
    EXPECT_NE(what.find("unexpected: 'extra'"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace ein::testing
