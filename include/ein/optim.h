// Optimizers over parameters (leaf tensors that require grad), like torch.optim. Each step
// updates every parameter in place, inside a NoGrad scope; AdamW runs ONE fused kernel per
// parameter (param, exp_avg and exp_avg_sq read and written in a single pass), with the
// step-dependent bias corrections passed at run time so no step compiles anything.
//
//   ein::optim::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
//   for (...) { opt.zero_grad(); loss(batch).backward(); opt.step(); }
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace ein::optim {

/// torch.optim.AdamW's hyper-parameters and defaults.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

/// AdamW (Loshchilov & Hutter; torch.optim.AdamW without amsgrad). State per parameter:
/// exp_avg and exp_avg_sq, allocated at the first step in the parameter's dtype.
class AdamW {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  /// One update of every parameter that has a gradient (others are skipped, like torch).
  void step();
  /// Clears the parameters' gradients (set_to_none: drop them; else fill with zeros).
  void zero_grad(bool set_to_none = true);
  /// Updates done so far.
  int64_t steps() const { return step_; }
  const std::vector<Tensor>& params() const { return params_; }
  /// The first and second moment estimates of parameter i (undefined before its first step).
  const Tensor& exp_avg(size_t i) const { return exp_avg_[i]; }
  const Tensor& exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }
  AdamWOptions& options() { return options_; }

 private:
  std::vector<Tensor> params_, exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

/// torch.optim.SGD's hyper-parameters (momentum 0: plain SGD).
struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0;
  double weight_decay = 0;
};

/// SGD with optional momentum and (coupled, L2) weight decay, as torch.optim.SGD:
/// g ← g + λ p;  b ← μ b + g (b = g at the first step);  p ← p − lr · b.
class SGD {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step();
  void zero_grad(bool set_to_none = true);
  const std::vector<Tensor>& params() const { return params_; }

 private:
  std::vector<Tensor> params_, momentum_;
  SGDOptions options_;
};

}  // namespace ein::optim
