// Optimizers over parameters (leaf tensors that require grad), like torch.optim. Each step
// updates every parameter in place, inside a NoGrad scope; AdamW (and Adam) run ONE fused
// kernel per parameter (param, exp_avg and exp_avg_sq read and written in a single pass), with
// the step-dependent bias corrections passed at run time so no step compiles anything. SGD,
// Adagrad and RMSprop are map kernels whose hyper-parameters are 0-dim tensor inputs, for the
// same reason: a learning-rate schedule (ein/schedule.h) never compiles a new kernel.
//
//   ein::optim::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
//   for (...) { opt.zero_grad(); loss(batch).backward(); opt.step(); }
//
// state_dict() and load_state_dict() save and restore an optimizer exactly, as torch's do: the
// keys are "state.<i>.<name>" for parameter i's tensors and counters ("exp_avg", "step", ...)
// and "step" for a shared count; a state not yet created (before a parameter's first update)
// is absent. Loaded into a fresh optimizer over the same parameters, the next steps are
// bitwise those of the optimizer that was saved.
#pragma once

#include <cstdint>
#include <vector>

#include <ein/checkpoint.h>
#include <ein/tensor.h>

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

  /// The optimizer's state (see the top of this file); tensors are the live ones, not copies.
  StateDict state_dict() const;
  /// Restores a state_dict() of this optimizer type over parameters of the same shapes.
  /// RuntimeError naming an unknown key or a shape that does not fit.
  void load_state_dict(const StateDict& state);
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

  /// The optimizer's state (see the top of this file); tensors are the live ones, not copies.
  StateDict state_dict() const;
  /// Restores a state_dict() of this optimizer type over parameters of the same shapes.
  /// RuntimeError naming an unknown key or a shape that does not fit.
  void load_state_dict(const StateDict& state);
 private:
  std::vector<Tensor> params_, momentum_;
  SGDOptions options_;
};

/// torch.optim.Adam's hyper-parameters and defaults.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  ///< L2 penalty added to the gradient (coupled, unlike AdamW's)
};

/// Adam (Kingma & Ba 2015) as torch.optim.Adam without amsgrad: g ← g + λ p, then AdamW's
/// update with decoupled decay off (the same fused kernel). State per parameter: exp_avg,
/// exp_avg_sq and its own step count (a parameter without a gradient does not advance).
class Adam {
 public:
  /// Checks that every parameter is a leaf that requires grad.
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  /// One update of every parameter that has a gradient.
  void step();
  /// Clears the parameters' gradients (set_to_none: drop them; else fill with zeros).
  void zero_grad(bool set_to_none = true);
  /// The parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  /// Updates parameter i has had.
  int64_t steps(size_t i) const { return steps_[i]; }
  /// The first moment estimate of parameter i (undefined before its first step).
  const Tensor& exp_avg(size_t i) const { return exp_avg_[i]; }
  /// The second moment estimate of parameter i (undefined before its first step).
  const Tensor& exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }
  /// The hyper-parameters, writable between steps (a schedule sets lr here).
  AdamOptions& options() { return options_; }

  /// The optimizer's state (see the top of this file); tensors are the live ones, not copies.
  StateDict state_dict() const;
  /// Restores a state_dict() of this optimizer type over parameters of the same shapes.
  /// RuntimeError naming an unknown key or a shape that does not fit.
  void load_state_dict(const StateDict& state);
 private:
  std::vector<Tensor> params_, exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;
  AdamOptions options_;
};

/// torch.optim.Adagrad's hyper-parameters and defaults.
struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};

/// Adagrad (Duchi, Hazan & Singer 2011) as torch.optim.Adagrad: at the parameter's t-th step
/// g ← g + λ p;  clr = lr / (1 + (t − 1) · lr_decay);  s ← s + g²;  p ← p − clr · g / (√s + ε).
class Adagrad {
 public:
  /// Checks that every parameter is a leaf that requires grad.
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  /// One update of every parameter that has a gradient.
  void step();
  /// Clears the parameters' gradients (set_to_none: drop them; else fill with zeros).
  void zero_grad(bool set_to_none = true);
  /// The parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  /// The running sum of squared gradients of parameter i (undefined before its first step).
  const Tensor& sum(size_t i) const { return sum_[i]; }
  /// The hyper-parameters, writable between steps.
  AdagradOptions& options() { return options_; }

  /// The optimizer's state (see the top of this file); tensors are the live ones, not copies.
  StateDict state_dict() const;
  /// Restores a state_dict() of this optimizer type over parameters of the same shapes.
  /// RuntimeError naming an unknown key or a shape that does not fit.
  void load_state_dict(const StateDict& state);
 private:
  std::vector<Tensor> params_, sum_;
  std::vector<int64_t> steps_;
  AdagradOptions options_;
};

/// torch.optim.RMSprop's hyper-parameters and defaults.
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
};

/// RMSprop (Hinton, Coursera lecture 6e) as torch.optim.RMSprop:
/// g ← g + λ p;  v ← α v + (1 − α) g²;  centered: m ← α m + (1 − α) g, d = √(v − m²) + ε,
/// else d = √v + ε;  momentum μ > 0: b ← μ b + g / d, p ← p − lr · b;  else p ← p − lr · g / d.
class RMSprop {
 public:
  /// Checks that every parameter is a leaf that requires grad.
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  /// One update of every parameter that has a gradient.
  void step();
  /// Clears the parameters' gradients (set_to_none: drop them; else fill with zeros).
  void zero_grad(bool set_to_none = true);
  /// The parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  /// The running average of squared gradients of parameter i.
  const Tensor& square_avg(size_t i) const { return square_avg_[i]; }
  /// The hyper-parameters, writable between steps.
  RMSpropOptions& options() { return options_; }

  /// The optimizer's state (see the top of this file); tensors are the live ones, not copies.
  StateDict state_dict() const;
  /// Restores a state_dict() of this optimizer type over parameters of the same shapes.
  /// RuntimeError naming an unknown key or a shape that does not fit.
  void load_state_dict(const StateDict& state);
 private:
  std::vector<Tensor> params_, square_avg_, grad_avg_, momentum_;
  RMSpropOptions options_;
};

}  // namespace ein::optim
