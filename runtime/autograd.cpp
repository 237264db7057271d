// The tape walk: backward() orders the recorded nodes reachable from the output so that each
// runs after every node that feeds it a gradient (Kahn's algorithm on consumer counts), sums
// the gradients arriving at each node output, and stores leaf (and retained) gradients.
#include <ein/autograd.h>

#include <unordered_map>

#include <ein/errors.h>
#include <fmt/format.h>

namespace ein {
namespace {

thread_local bool grad_mode = true;
thread_local Recompute recompute_mode = Recompute::automatic;
thread_local double budget_mode = 1;

/// A gradient we may keep as a tensor's grad(): one nobody else holds, else a copy (so later
/// in-place zeroing or optimizer steps never write through an alias).
Tensor owned(const Tensor& g) {
  const bool sole = g.storage().use_count() == 1 && g.is_contiguous() && g.offset() == 0 &&
                    g.nbytes() == static_cast<int64_t>(g.storage()->nbytes());
  return sole ? g : g.detach().clone();
}

void accumulate_into(AutogradMeta& meta, const Tensor& g, const GradNode& via) {
  meta.grad = meta.grad.defined() ? via.accumulate(meta.grad, g) : owned(g);
}

}  // namespace

bool grad_enabled() {
  return grad_mode;
}

NoGrad::NoGrad() : previous_(grad_mode) {
  grad_mode = false;
}
NoGrad::~NoGrad() {
  grad_mode = previous_;
}

EnableGrad::EnableGrad() : previous_(grad_mode) {
  grad_mode = true;
}
EnableGrad::~EnableGrad() {
  grad_mode = previous_;
}

Recompute recompute_policy() {
  return recompute_mode;
}

const char* recompute_name(Recompute policy) {
  switch (policy) {
    case Recompute::none:
      return "none";
    case Recompute::automatic:
      return "auto";
    case Recompute::blocks:
      return "blocks";
    case Recompute::full:
      return "full";
  }
  return "?";
}

std::optional<Recompute> parse_recompute(std::string_view name) {
  for (const Recompute p :
       {Recompute::none, Recompute::automatic, Recompute::blocks, Recompute::full})
    if (name == recompute_name(p)) return p;
  return std::nullopt;
}

double activation_budget() {
  return budget_mode;
}

RecomputeScope::RecomputeScope(Recompute policy, double activation_budget)
    : previous_(recompute_mode), previous_budget_(budget_mode) {
  if (!(activation_budget >= 0 && activation_budget <= 1))
    throw RuntimeError(
        fmt::format("activation budget {}: expected a fraction from 0 to 1", activation_budget));
  recompute_mode = policy;
  budget_mode = activation_budget;
}
RecomputeScope::~RecomputeScope() {
  recompute_mode = previous_;
  budget_mode = previous_budget_;
}

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  for (const Tensor& p : params) {
    const auto& meta = p.autograd();
    if (!meta || !meta->grad.defined()) continue;
    if (set_to_none)
      meta->grad = Tensor();
    else
      meta->grad.detach().fill_(0);
  }
}

bool Tensor::requires_grad() const {
  return autograd_ && autograd_->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  check_defined("requires_grad_");
  if (autograd_ && autograd_->grad_fn)
    throw RuntimeError(
        "requires_grad_: this tensor is the result of an op, so its requires_grad follows from "
        "its inputs; call it on leaves (or use detach().requires_grad_())");
  if (on && !kFloatDTypes.contains(dtype_))
    throw RuntimeError(
        "requires_grad_: only floating-point tensors can require gradients, this "
        "one is " +
        std::string(dtype_name(dtype_)));
  if (!autograd_) autograd_ = std::make_shared<AutogradMeta>();
  autograd_->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  return !autograd_ || !autograd_->grad_fn;
}

Tensor Tensor::grad() const {
  return autograd_ ? autograd_->grad : Tensor();
}

void Tensor::retain_grad() const {
  if (!requires_grad())
    throw RuntimeError("retain_grad: the tensor does not require grad, so it will get none");
  autograd_->retains_grad = true;
}

Tensor Tensor::detach() const {
  Tensor out = *this;
  out.autograd_.reset();
  return out;
}

void Tensor::check_no_grad(const char* op) const {
  if (autograd_ && autograd_->requires_grad && grad_mode)
    throw RuntimeError(std::string(op) +
                       " on a tensor that requires grad would drop its gradient: use the "
                       "differentiable ops (ein::rearrange, ein::map, ...), call detach() first, "
                       "or run it inside an ein::NoGrad scope");
}

void Tensor::backward() const {
  backward(Tensor());
}

void Tensor::backward(const Tensor& gradient) const {
  check_defined("backward");
  if (!requires_grad())
    throw RuntimeError(
        "backward: the tensor does not require grad (no input of the ops that "
        "made it requires grad, or it was made inside ein::NoGrad)");
  Tensor seed = gradient.detach();
  if (!seed.defined()) {
    if (numel() != 1)
      throw RuntimeError(
          "backward: the gradient can be omitted only for a tensor of one element "
          "(a loss); this one has shape " +
          shape_str(sizes_));
    seed = ones(sizes_, dtype_, device());
  } else if (seed.shape() != sizes_) {
    throw RuntimeError("backward: the gradient has shape " + shape_str(seed.shape()) +
                       " but the tensor has shape " + shape_str(sizes_));
  }
  NoGrad no_grad;  // the backward computation itself records nothing
  GradNode* root = autograd_->grad_fn.get();
  if (!root) {  // a leaf: its gradient is the seed (summed on the host: no op records this)
    Tensor& g = autograd_->grad;
    if (!g.defined()) {
      g = owned(seed);
      return;
    }
    std::vector<double> sum = g.to_vector<double>();
    const std::vector<double> more = seed.to_vector<double>();
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] += more[i];
    g = from_data(sum, sizes_).to(dtype_).to(device());
    return;
  }
  // Consumers per node, counted over the reachable graph; and per leaf with a
  // post_accumulate_hook, the edges that bring it gradients (the hook runs after the last).
  std::unordered_map<GradNode*, int> consumers{{root, 0}};
  std::unordered_map<AutogradMeta*, int> leaf_edges;
  std::vector<GradNode*> stack{root};
  while (!stack.empty()) {
    GradNode* n = stack.back();
    stack.pop_back();
    for (const auto& in : n->inputs)
      if (in && in->grad_fn) {
        auto [it, fresh] = consumers.try_emplace(in->grad_fn.get(), 0);
        ++it->second;
        if (fresh) stack.push_back(in->grad_fn.get());
      } else if (in && in->post_accumulate_hook) {
        ++leaf_edges[in.get()];
      }
  }
  const auto edge_done = [&](AutogradMeta& leaf) {
    const auto it = leaf_edges.find(&leaf);
    if (it != leaf_edges.end() && --it->second == 0) leaf.post_accumulate_hook();
  };
  std::unordered_map<GradNode*, std::vector<Tensor>> pending;
  pending[root].resize(root->outputs.size());
  pending[root][autograd_->output_nr] = seed;
  std::vector<GradNode*> ready{root};
  while (!ready.empty()) {
    GradNode* n = ready.back();
    ready.pop_back();
    std::vector<Tensor> grads_out = std::move(pending[n]);
    pending.erase(n);
    grads_out.resize(n->outputs.size());
    for (size_t k = 0; k < n->outputs.size(); ++k)
      if (auto meta = n->outputs[k].lock(); meta && meta->retains_grad && grads_out[k].defined())
        accumulate_into(*meta, grads_out[k], *n);
    // Leaves whose gradients the node handed over while it ran (apply_early).
    std::vector<bool> taken(n->inputs.size(), false);
    const std::vector<Tensor> grads_in =
        leaf_edges.empty() ? n->apply(grads_out)
                           : n->apply_early(grads_out, [&](size_t j, Tensor& g) {
                               if (j >= n->inputs.size() || taken[j] || !g.defined()) return false;
                               const auto& in = n->inputs[j];
                               if (!in || in->grad_fn) return false;
                               accumulate_into(*in, g, *n);
                               taken[j] = true;
                               edge_done(*in);
                               return true;
                             });
    for (size_t j = 0; j < n->inputs.size(); ++j) {
      const auto& in = n->inputs[j];
      if (!in || taken[j]) continue;
      if (j >= grads_in.size() || !grads_in[j].defined()) {
        if (in->grad_fn && --consumers[in->grad_fn.get()] == 0) ready.push_back(in->grad_fn.get());
        if (!in->grad_fn) edge_done(*in);
        continue;
      }
      if (!in->grad_fn) {
        accumulate_into(*in, grads_in[j], *n);
        edge_done(*in);
        continue;
      }
      GradNode* next = in->grad_fn.get();
      auto& slots = pending[next];
      slots.resize(next->outputs.size());
      Tensor& slot = slots[in->output_nr];
      slot = slot.defined() ? n->accumulate(slot, grads_in[j]) : grads_in[j];
      if (--consumers[next] == 0) ready.push_back(next);
    }
  }
}

}  // namespace ein
