// The optimizers of include/ein/optim.h. AdamW's update is compiler/fused_ops.h's one-pass
// kernel; SGD's is one map kernel per parameter, copied into the parameter.
#include <ein/optim.h>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "compiler/fused_ops.h"
#include "runtime/autograd.h"

namespace ein::optim {
namespace {

void check_params(const std::vector<Tensor>& params, const char* who) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      throw RuntimeError(fmt::format("{}: parameter {} is undefined", who, i));
    if (!params[i].requires_grad() || !params[i].is_leaf())
      throw RuntimeError(
          fmt::format("{}: parameter {} (shape {}) is not a leaf that requires "
                      "grad; call requires_grad_() on it",
                      who, i, shape_str(params[i].shape())));
  }
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  check_params(params_, "AdamW");
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
}

void AdamW::step() {
  NoGrad no_grad;
  ++step_;
  const AdamWConfig config{options_.lr, options_.beta1, options_.beta2, options_.eps,
                           options_.weight_decay};
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros(params_[i].shape(), params_[i].dtype());
      exp_avg_sq_[i] = zeros(params_[i].shape(), params_[i].dtype());
    }
    adamw_update(params_[i].detach(), g, exp_avg_[i], exp_avg_sq_[i], config, step_);
  }
}

void AdamW::zero_grad(bool set_to_none) {
  ein::zero_grad(params_, set_to_none);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : params_(std::move(params)), options_(options) {
  check_params(params_, "SGD");
  momentum_.resize(params_.size());
}

void SGD::step() {
  NoGrad no_grad;
  // Hyper-parameters enter as 0-dim tensors, not literals, so a learning-rate schedule never
  // compiles a new kernel.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g0 = params_[i].grad();
    if (!g0.defined()) continue;
    const Tensor param = params_[i].detach();
    const DType t = param.dtype();
    const Tensor lr = full({}, options_.lr, t), mu = full({}, options_.momentum, t),
                 wd = full({}, options_.weight_decay, t);
    const Tensor p = param.reshape({-1});
    Tensor g = g0.reshape({-1});
    if (options_.weight_decay != 0) g = map("g[n], p[n], wd[] -> g + wd * p", {g, p, wd});
    if (options_.momentum != 0) {
      if (!momentum_[i].defined())
        momentum_[i] = g.clone();
      else
        momentum_[i].copy_(map("b[n], g[n], mu[] -> mu * b + g", {momentum_[i], g, mu}));
      g = momentum_[i];
    }
    param.copy_(map("p[n], g[n], lr[] -> p - lr * g", {p, g, lr}).view(param.shape()));
  }
}

void SGD::zero_grad(bool set_to_none) {
  ein::zero_grad(params_, set_to_none);
}

}  // namespace ein::optim
