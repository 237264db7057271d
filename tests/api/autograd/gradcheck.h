// Gradient checking against float64 central finite differences. The function under test takes
// tensors and returns one; the check draws a random cotangent c, computes the gradients of
// L = Σ c · f(inputs) through the tape (backward(c)), and compares each input's gradient with
// (L(x + h e_i) − L(x − h e_i)) / 2h for every element i, evaluated in float64 under NoGrad.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <ein/autograd.h>
#include <ein/tensor.h>

namespace ein::testing {

using Function = std::function<Tensor(const std::vector<Tensor>&)>;

/// Σ c · y in float64.
inline double weighted_sum(const Tensor& y, const std::vector<double>& c) {
  const std::vector<double> v = y.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i)
    s += c[i] * v[i];
  return s;
}

/// Checks f's gradients for the inputs flagged in `wrt` (all when empty). Inputs should be
/// float64 for tight tolerances; they may be any layout (strided, broadcast views).
inline void gradcheck(const std::string& what, const Function& f, const std::vector<Tensor>& inputs,
                      std::vector<bool> wrt = {}, double tol = 1e-6, uint64_t seed = 7) {
  if (wrt.empty()) wrt.assign(inputs.size(), true);
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i].detach();
    if (wrt[i]) x.requires_grad_();
    leaves.push_back(x);
  }
  const Tensor y = f(leaves);
  ASSERT_TRUE(y.requires_grad()) << what << ": the result does not require grad";
  const Tensor c = randn(y.shape(), y.dtype(), cpu(), seed);
  const std::vector<double> cv = c.to_vector<double>();
  y.backward(c);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!wrt[i]) {
      EXPECT_FALSE(leaves[i].grad().defined()) << what << ": input " << i << " got a gradient";
      continue;
    }
    const Tensor g = leaves[i].grad();
    ASSERT_TRUE(g.defined()) << what << ": input " << i << " has no gradient";
    ASSERT_EQ(g.shape(), inputs[i].shape()) << what << ": input " << i;
    const std::vector<double> analytic = g.to_vector<double>();
    std::vector<double> x = inputs[i].to_vector<double>();
    int reported = 0;
    double worst = 0;
    for (size_t e = 0; e < x.size(); ++e) {
      const double h = 1e-6 * std::max(1.0, std::abs(x[e]));
      auto loss_at = [&](double value) {
        std::vector<double> xp = x;
        xp[e] = value;
        std::vector<Tensor> args;
        for (size_t j = 0; j < inputs.size(); ++j)
          args.push_back(j == i ? from_data(xp, inputs[i].shape()).to(inputs[i].dtype())
                                : inputs[j].detach());
        NoGrad no_grad;
        return weighted_sum(f(args), cv);
      };
      const double numeric = (loss_at(x[e] + h) - loss_at(x[e] - h)) / (2 * h);
      const double err = std::abs(numeric - analytic[e]) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, err);
      if (err > tol && reported++ < 5)
        ADD_FAILURE() << fmt::format(
            "{}: d/d input{}[{}]: analytic {:.10g}, finite difference "
            "{:.10g}",
            what, i, e, analytic[e], numeric);
    }
    EXPECT_LE(worst, tol) << what << ": input " << i << " worst relative error";
  }
}

}  // namespace ein::testing
