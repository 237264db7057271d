// The optimizers of include/ein/optim.h. AdamW's and Adam's update is exec/fused_ops.h's
// one-pass kernel; SGD's, Adagrad's and RMSprop's are map kernels per parameter whose results
// are copied into the parameter and its state.
#include <ein/optim.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include <ein/errors.h>
#include <ein/ops.h>
#include <fmt/format.h>

#include "exec/fused_ops.h"
#include <ein/autograd.h>

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

/// A 0-dim tensor holding a hyper-parameter in the type `like`'s kernels compute in (f64 for
/// f64, else f32: a bf16 parameter's step still sees lr = 3e-4, not its bf16 rounding).
Tensor hyper(double value, const Tensor& like) {
  return full({}, value, like.dtype() == DType::f64 ? DType::f64 : DType::f32, like.device());
}

/// g + λ p (coupled L2 weight decay), flat; g itself when λ = 0.
Tensor with_l2(const Tensor& g, const Tensor& p, double weight_decay) {
  if (weight_decay == 0) return g;
  return map("g[n], p[n], wd[] -> g + wd * p", {g, p, hyper(weight_decay, p)});
}

/// The named state of one optimizer: per-parameter tensors and counters, and a shared count
/// (const for saving, mutable for loading).
template <class Tensors, class Counters, class Step>
struct SlotsOf {
  std::vector<std::pair<std::string, Tensors*>> tensors;
  std::vector<std::pair<std::string, Counters*>> counters;
  Step* step = nullptr;
};
using ConstSlots = SlotsOf<const std::vector<Tensor>, const std::vector<int64_t>, const int64_t>;
using Slots = SlotsOf<std::vector<Tensor>, std::vector<int64_t>, int64_t>;

StateDict save_state(const ConstSlots& s) {
  StateDict out;
  if (s.step) out.emplace_back("step", full({}, static_cast<double>(*s.step), DType::i64));
  size_t n = 0;
  for (const auto& [name, v] : s.tensors) n = std::max(n, v->size());
  for (const auto& [name, v] : s.counters) n = std::max(n, v->size());
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [name, v] : s.counters)
      if ((*v)[i] != 0)
        out.emplace_back(fmt::format("state.{}.{}", i, name), full({}, static_cast<double>((*v)[i]), DType::i64));
    for (const auto& [name, v] : s.tensors)
      if ((*v)[i].defined()) out.emplace_back(fmt::format("state.{}.{}", i, name), (*v)[i]);
  }
  return out;
}

void load_state(const Slots& s, const StateDict& state, const std::vector<Tensor>& params,
                const char* who) {
  // Check everything first, so a bad dict leaves the optimizer as it was.
  struct Item {
    const Tensor* value;
    std::vector<Tensor>* tensors = nullptr;
    std::vector<int64_t>* counters = nullptr;
    size_t index = 0;
  };
  std::vector<Item> items;
  std::optional<int64_t> step;
  for (const auto& [key, t] : state) {
    if (!t.defined()) throw RuntimeError(fmt::format("{}::load_state_dict: '{}' is undefined", who, key));
    if (key == "step" && s.step && t.numel() == 1) {
      step = static_cast<int64_t>(t.item());
      continue;
    }
    size_t i = 0;
    char name[64] = {};
    int used = 0;
    if (std::sscanf(key.c_str(), "state.%zu.%63[a-z_]%n", &i, name, &used) != 2 ||
        used != static_cast<int>(key.size()) || i >= params.size())
      throw RuntimeError(fmt::format("{}::load_state_dict: unexpected key '{}' (this optimizer has "
                                     "{} parameters)",
                                     who, key, params.size()));
    Item item{&t, nullptr, nullptr, i};
    for (const auto& [slot, v] : s.tensors)
      if (slot == name) item.tensors = v;
    for (const auto& [slot, v] : s.counters)
      if (slot == name) item.counters = v;
    if (!item.tensors && !item.counters)
      throw RuntimeError(fmt::format("{}::load_state_dict: '{}' is no state of {}", who, key, who));
    if (item.tensors && (t.numel() != params[i].numel() || t.dtype() != params[i].dtype()))
      throw RuntimeError(fmt::format("{}::load_state_dict: '{}' is {} {} but parameter {} is {} {}",
                                     who, key, dtype_name(t.dtype()), shape_str(t.shape()), i,
                                     dtype_name(params[i].dtype()), shape_str(params[i].shape())));
    if (item.counters && t.numel() != 1)
      throw RuntimeError(fmt::format("{}::load_state_dict: '{}' must hold one number", who, key));
    items.push_back(item);
  }
  for (const auto& [name, v] : s.tensors)
    std::fill(v->begin(), v->end(), Tensor());
  for (const auto& [name, v] : s.counters)
    std::fill(v->begin(), v->end(), 0);
  if (s.step) *s.step = step.value_or(0);
  for (const Item& item : items) {
    if (item.counters) (*item.counters)[item.index] = static_cast<int64_t>(item.value->item());
    else (*item.tensors)[item.index] = item.value->to(params[item.index].device()).clone();
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
      exp_avg_[i] = zeros(params_[i].shape(), params_[i].dtype(), params_[i].device());
      exp_avg_sq_[i] = zeros(params_[i].shape(), params_[i].dtype(), params_[i].device());
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
    const Device d = param.device();
    const Tensor lr = full({}, options_.lr, t, d), mu = full({}, options_.momentum, t, d),
                 wd = full({}, options_.weight_decay, t, d);
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

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : params_(std::move(params)), options_(options) {
  check_params(params_, "Adam");
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  steps_.assign(params_.size(), 0);
}

void Adam::step() {
  NoGrad no_grad;
  // torch.optim.Adam = AdamW's update without decoupled decay, on the L2-decayed gradient.
  const AdamWConfig config{options_.lr, options_.beta1, options_.beta2, options_.eps, 0.0};
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g0 = params_[i].grad();
    if (!g0.defined()) continue;
    const Tensor param = params_[i].detach();
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros(param.shape(), param.dtype(), param.device());
      exp_avg_sq_[i] = zeros(param.shape(), param.dtype(), param.device());
    }
    Tensor g = g0;
    if (options_.weight_decay != 0)
      g = with_l2(g0.reshape({-1}), param.reshape({-1}), options_.weight_decay)
              .view(param.shape())
              .to(param.dtype());
    adamw_update(param, g, exp_avg_[i], exp_avg_sq_[i], config, ++steps_[i]);
  }
}

void Adam::zero_grad(bool set_to_none) {
  ein::zero_grad(params_, set_to_none);
}

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : params_(std::move(params)), options_(options) {
  check_params(params_, "Adagrad");
  sum_.resize(params_.size());
  steps_.assign(params_.size(), 0);
}

void Adagrad::step() {
  NoGrad no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g0 = params_[i].grad();
    if (!g0.defined()) continue;
    const Tensor param = params_[i].detach();
    if (!sum_[i].defined())
      sum_[i] =
          full(param.shape(), options_.initial_accumulator_value, param.dtype(), param.device());
    const int64_t t = ++steps_[i];
    const Tensor p = param.reshape({-1}), s = sum_[i].view({-1});
    const Tensor g = with_l2(g0.reshape({-1}), p, options_.weight_decay);
    // torch: clr = lr / (1 + (step - 1) * lr_decay); state_sum += g²; p -= clr · g / (√s + ε).
    const double clr = options_.lr / (1 + static_cast<double>(t - 1) * options_.lr_decay);
    s.copy_(map("s[n], g[n] -> s + g * g", {s, g}));
    param.copy_(map("p[n], g[n], s[n], clr[], eps[] -> p - clr * g / (sqrt(s) + eps)",
                    {p, g, s, hyper(clr, param), hyper(options_.eps, param)})
                    .view(param.shape()));
  }
}

void Adagrad::zero_grad(bool set_to_none) {
  ein::zero_grad(params_, set_to_none);
}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : params_(std::move(params)), options_(options) {
  check_params(params_, "RMSprop");
  square_avg_.resize(params_.size());
  grad_avg_.resize(params_.size());
  momentum_.resize(params_.size());
}

void RMSprop::step() {
  NoGrad no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g0 = params_[i].grad();
    if (!g0.defined()) continue;
    const Tensor param = params_[i].detach();
    // State appears when first needed (centered or momentum may be switched on later).
    const auto state = [&] { return zeros({param.numel()}, param.dtype(), param.device()); };
    if (!square_avg_[i].defined()) square_avg_[i] = state().view(param.shape());
    if (options_.centered && !grad_avg_[i].defined()) grad_avg_[i] = state();
    if (options_.momentum > 0 && !momentum_[i].defined()) momentum_[i] = state();
    const Tensor p = param.reshape({-1}), v = square_avg_[i].view({-1});
    const Tensor g = with_l2(g0.reshape({-1}), p, options_.weight_decay);
    const Tensor alpha = hyper(options_.alpha, param), eps = hyper(options_.eps, param),
                 lr = hyper(options_.lr, param);
    v.copy_(map("v[n], g[n], a[] -> a * v + (1 - a) * g * g", {v, g, alpha}));
    // d = √v + ε, or √(v − m²) + ε when centered (torch: addcmul(m, m, value=-1).sqrt().add(ε)).
    if (!options_.centered && options_.momentum <= 0) {  // the common case: one kernel
      param.copy_(
          map("p[n], g[n], v[n], lr[], eps[] -> p - lr * g / (sqrt(v) + eps)", {p, g, v, lr, eps})
              .view(param.shape()));
      continue;
    }
    Tensor update;  // g / d
    if (options_.centered) {
      const Tensor& m = grad_avg_[i];
      m.copy_(map("m[n], g[n], a[] -> a * m + (1 - a) * g", {m, g, alpha}));
      update = map("g[n], v[n], m[n], eps[] -> g / (sqrt(v - m * m) + eps)", {g, v, m, eps});
    } else {
      update = map("g[n], v[n], eps[] -> g / (sqrt(v) + eps)", {g, v, eps});
    }
    if (options_.momentum > 0) {
      const Tensor& b = momentum_[i];
      b.copy_(map("b[n], u[n], mu[] -> mu * b + u", {b, update, hyper(options_.momentum, param)}));
      update = b;
    }
    param.copy_(map("p[n], u[n], lr[] -> p - lr * u", {p, update, lr}).view(param.shape()));
  }
}

void RMSprop::zero_grad(bool set_to_none) {
  ein::zero_grad(params_, set_to_none);
}

}  // namespace ein::optim

namespace ein::optim {

StateDict AdamW::state_dict() const {
  return save_state(ConstSlots{{{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}}, {}, &step_});
}
void AdamW::load_state_dict(const StateDict& state) {
  load_state(Slots{{{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}}, {}, &step_}, state, params_, "AdamW");
}

StateDict SGD::state_dict() const {
  return save_state(ConstSlots{{{"momentum_buffer", &momentum_}}, {}, nullptr});
}
void SGD::load_state_dict(const StateDict& state) {
  load_state(Slots{{{"momentum_buffer", &momentum_}}, {}, nullptr}, state, params_, "SGD");
}

StateDict Adam::state_dict() const {
  return save_state(ConstSlots{{{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}},
                     {{"step", &steps_}}, nullptr});
}
void Adam::load_state_dict(const StateDict& state) {
  load_state(Slots{{{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}}, {{"step", &steps_}}, nullptr},
             state, params_, "Adam");
}

StateDict Adagrad::state_dict() const {
  return save_state(ConstSlots{{{"sum", &sum_}}, {{"step", &steps_}}, nullptr});
}
void Adagrad::load_state_dict(const StateDict& state) {
  load_state(Slots{{{"sum", &sum_}}, {{"step", &steps_}}, nullptr}, state, params_, "Adagrad");
}

StateDict RMSprop::state_dict() const {
  return save_state(ConstSlots{{{"square_avg", &square_avg_}, {"grad_avg", &grad_avg_},
                      {"momentum_buffer", &momentum_}},
                     {},
                     nullptr});
}
void RMSprop::load_state_dict(const StateDict& state) {
  load_state(Slots{{{"square_avg", &square_avg_}, {"grad_avg", &grad_avg_}, {"momentum_buffer", &momentum_}},
              {},
              nullptr},
             state, params_, "RMSprop");
}

}  // namespace ein::optim
