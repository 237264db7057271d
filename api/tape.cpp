// Recording compiled ops on the autograd tape. Before a forward runs with inputs that need
// gradients, its backward is planned (cached per graph): the recompute policy
// (include/ein/autograd.h) picks the forward values the backward reads as saved inputs, and the
// forward runs with those as extra outputs. A recorded node keeps the inputs (detached: the tape
// must not keep autograd records alive through them) and the saved values; its apply() runs
// the fused backward graph on the inputs, the output gradients and the saved values.
#include "api/tape.h"

#include <iterator>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <utility>

#include <ein/errors.h>
#include <fmt/format.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "exec/execute.h"
#include "compiler/fuse/fuse.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/pipeline.h"
#include "runtime/counters.h"
#include "runtime/dist/gradient_sync.h"

namespace ein {
namespace {

/// A forward graph's backward plan: the backward fused (compiler/fuse/fuse.h), and the forward
/// fused once more with the values the backward reads (Backward::saved) as extra outputs; each
/// with the charges that make a FlopCounter count their unfused graphs (compiler/cost/
/// charges.h), the numbers ein report gives, under the phases of backward_phases().
struct CachedBackward {
  Backward backward;
  Graph fused;
  GraphCharges charges;
  Graph forward;  ///< the forward's outputs, then Backward::saved
  GraphCharges forward_charges;
};

/// Backward plans by (forward graph, needs-grad mask, which inputs are weights, recompute
/// policy, activation budget, whether ZeRO 3 fetches the parameters); entries hold the forward
/// graph so its address is never reused while cached.
std::shared_ptr<const CachedBackward> backward_of(const std::shared_ptr<const Graph>& graph,
                                                  const std::vector<bool>& needs_grad,
                                                  const std::vector<bool>& weights,
                                                  Recompute recompute, double budget,
                                                  const std::vector<int>& blocks) {
  static std::mutex mutex;
  using Key =
      std::tuple<const Graph*, std::vector<bool>, std::vector<bool>, Recompute, double, bool>;
  static std::map<Key,
                  std::pair<std::shared_ptr<const Graph>, std::shared_ptr<const CachedBackward>>>
      cache;
  // Without blocks, Recompute::blocks plans as automatic (and shares its cache entry); the
  // blocks are the graph's own (its tracer's), so the graph's address keys them too.
  if (recompute == Recompute::blocks && blocks.empty()) recompute = Recompute::automatic;
  if (recompute != Recompute::automatic) budget = 1;  // only auto's plan has a budget
  // ZeRO 3 (a FetchScope on this thread): the backward fetches a sharded parameter again
  // rather than every rank holding the whole model's bf16 casts through the step.
  const bool save_parameter_casts = !dist::fetching();
  std::lock_guard lock(mutex);
  Key key{graph.get(), needs_grad, weights, recompute, budget, save_parameter_casts};
  if (auto it = cache.find(key); it != cache.end()) return it->second.second;
  // Bounded: a program tracing graphs on the fly must not grow; plans in use stay alive
  // (their GradNodes hold them).
  if (cache.size() >= 4096) cache.clear();
  auto entry = std::make_shared<CachedBackward>();
  CompiledGraph c = compile_graph(*graph, {.differentiate = needs_grad,
                                           .recompute = recompute,
                                           .blocks = blocks,
                                           .save_parameter_casts = save_parameter_casts,
                                           .activation_budget = budget});
  entry->backward = std::move(*c.backward);
  entry->fused = std::move(c.fused);
  const Graph& forward = entry->backward.forward;  // the caller's, or with heads' gradients
  entry->charges = fused_charges(entry->fused, c.graph, c.fused_source,
                                 backward_phases(entry->backward, forward, weights));
  Graph with_saved = forward;
  with_saved.outputs.insert(with_saved.outputs.end(), entry->backward.saved.begin(),
                            entry->backward.saved.end());
  CompiledGraph f = compile_graph(std::move(with_saved), {});
  entry->forward = std::move(f.fused);
  entry->forward_charges = fused_charges(entry->forward, f.graph, f.fused_source);
  std::shared_ptr<const CachedBackward> b = entry;
  cache.emplace(std::move(key), std::make_pair(graph, b));
  return b;
}

class GraphGradNode final : public GradNode {
 public:
  /// `op_inputs` are the op's inputs (detached), `saved` the forward values its plan saves
  /// (Backward::saved, in order).
  GraphGradNode(std::shared_ptr<const Graph> graph, std::shared_ptr<const CachedBackward> plan,
                std::vector<Tensor> op_inputs, std::vector<Tensor> saved)
      : graph_(std::move(graph)),
        plan_(std::move(plan)),
        inputs_(std::move(op_inputs)),
        saved_(std::move(saved)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    return run(grad_outputs, nullptr);
  }

  /// The backward graph hands each input's gradient to `early` as soon as its last node ran
  /// (a parameter's gradient is final long before the graph ends), so data parallelism
  /// exchanges it while the rest of the backward runs.
  std::vector<Tensor> apply_early(const std::vector<Tensor>& grad_outputs,
                                  const EarlyGrad& early) override {
    return run(grad_outputs, &early);
  }

  Tensor accumulate(const Tensor& a, const Tensor& b) const override { return add_tensors(a, b); }

  std::string name() const override { return graph_->origin; }

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& grad_outputs, const EarlyGrad* early) {
    const Backward& backward = plan_->backward;
    // The saved values go to the backward graph, which frees each after its last reader (as
    // PyTorch frees saved tensors): a second backward through this node has nothing to read.
    if (released_)
      throw RuntimeError(
          "backward through a recorded op a second time: the forward values it saved were "
          "freed by the first backward (run the forward again)");
    std::vector<Tensor> args = inputs_;
    for (size_t k = 0; k < graph_->outputs.size(); ++k) {
      const GraphNode& out = graph_->nodes[graph_->outputs[k]];
      const Tensor& g = k < grad_outputs.size() ? grad_outputs[k] : Tensor();
      args.push_back(g.defined() ? g.detach()
                                 : zeros(out.shape, out.dtype, inputs_.empty()
                                                                  ? cpu()
                                                                  : inputs_.front().device()));
    }
    args.insert(args.end(), std::make_move_iterator(saved_.begin()),
                std::make_move_iterator(saved_.end()));
    released_ = !saved_.empty();
    saved_.clear();
    const std::vector<Tensor> grads =
        early ? execute(plan_->fused, std::move(args), plan_->charges,
                        [&](size_t i, Tensor& g) { return (*early)(backward.wrt[i], g); })
              : execute(plan_->fused, std::move(args), plan_->charges);
    std::vector<Tensor> per_input(inputs_.size());
    for (size_t i = 0; i < backward.wrt.size(); ++i)
      per_input[backward.wrt[i]] = grads[i];
    return per_input;
  }

  std::shared_ptr<const Graph> graph_;
  std::shared_ptr<const CachedBackward> plan_;
  std::vector<Tensor> inputs_, saved_;
  bool released_ = false;  ///< saved_ went to a backward
};

class FunctionGradNode final : public GradNode {
 public:
  FunctionGradNode(std::string name, BackwardFn backward)
      : name_(std::move(name)), backward_(std::move(backward)) {}
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    detail::CountingPhase phase(CostPhase::input_grad);  // weight parts say so themselves
    return backward_(grad_outputs);
  }
  Tensor accumulate(const Tensor& a, const Tensor& b) const override { return add_tensors(a, b); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  BackwardFn backward_;
};

/// Attaches `node` to the inputs that need gradients and to the float outputs.
void attach(const std::shared_ptr<GradNode>& node, const std::vector<Tensor>& inputs,
            std::vector<Tensor>& outputs) {
  for (const Tensor& x : inputs)
    node->inputs.push_back(x.requires_grad() && kFloatDTypes.contains(x.dtype()) ? x.autograd()
                                                                                 : nullptr);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].defined() || !kFloatDTypes.contains(outputs[k].dtype())) {
      node->outputs.emplace_back();
      continue;
    }
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = static_cast<int>(k);
    node->outputs.push_back(meta);
    outputs[k].set_autograd(std::move(meta));
  }
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad() && kFloatDTypes.contains(x.dtype())) return true;
  return false;
}

}  // namespace

std::vector<Tensor> run_recorded(const std::shared_ptr<const Graph>& graph,
                                 const std::vector<Tensor>& inputs) {
  return run_recorded(graph, *graph, inputs);
}

std::vector<Tensor> run_recorded(const std::shared_ptr<const Graph>& graph, const Graph& fused,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<int>& blocks, const GraphCharges* charges) {
  std::vector<Tensor> detached;
  std::vector<bool> needs_grad;
  bool any = false;
  for (const Tensor& x : inputs) {
    detached.push_back(x.detach());
    needs_grad.push_back(x.requires_grad() && kFloatDTypes.contains(x.dtype()));
    any = any || needs_grad.back();
  }
  if (!any || !grad_enabled())
    return charges ? execute(fused, std::move(detached), *charges)
                   : execute(fused, std::move(detached));
  std::vector<bool> weights;
  for (const Tensor& x : inputs)
    weights.push_back(x.requires_grad() && x.is_leaf());
  // The backward is planned before the forward runs: the plan says which forward values the
  // forward must hand over besides its outputs (the recompute policy's saved set).
  auto plan =
      backward_of(graph, needs_grad, weights, recompute_policy(), activation_budget(), blocks);
  std::vector<Tensor> outputs = execute(plan->forward, detached, plan->forward_charges);
  std::vector<Tensor> saved(outputs.begin() + static_cast<std::ptrdiff_t>(graph->outputs.size()),
                            outputs.end());
  outputs.resize(graph->outputs.size());
  attach(std::make_shared<GraphGradNode>(graph, std::move(plan), std::move(detached),
                                         std::move(saved)),
         inputs, outputs);
  return outputs;
}

std::vector<Tensor> record(std::string name, const std::vector<Tensor>& inputs,
                           std::vector<Tensor> outputs, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return outputs;
  attach(std::make_shared<FunctionGradNode>(std::move(name), std::move(backward)), inputs, outputs);
  return outputs;
}

Tensor add_tensors(const Tensor& a, const Tensor& b) {
  static const auto body = [] {
    auto k = std::make_shared<Kernel>();
    k->name = "accumulate";
    k->body = k->result = k->apply(ScalarOp::add, k->load(0), k->load(1));
    return std::shared_ptr<const Kernel>(std::move(k));
  }();
  std::vector<int> axes(a.shape().size());
  std::iota(axes.begin(), axes.end(), 0);
  const Graph g = lower_map(body, {axes, axes}, {{a.shape(), a.dtype()}, {b.shape(), b.dtype()}},
                            a.shape(), a.dtype(), "gradient accumulation");
  return execute(g, {a.detach(), b.detach()}).front();
}

}  // namespace ein
