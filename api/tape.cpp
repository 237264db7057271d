// Recording compiled ops on the autograd tape. A recorded node keeps the forward graph, the
// inputs (detached: the tape must not keep autograd records alive through them) and which
// inputs need gradients; its apply() runs the cached, fused backward graph on the inputs and the
// output gradients.
#include "api/tape.h"

#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "exec/execute.h"
#include "compiler/fuse/fuse.h"
#include "compiler/graph/lower_patterns.h"
#include "compiler/pipeline.h"
#include "runtime/counters.h"

namespace ein {
namespace {

/// A forward graph's backward and the cost phase of each of its nodes.
/// A forward graph's backward, fused (compiler/fuse/fuse.h), and the cost phase of each node of
/// the fused graph (a kernel takes the phase of the work it holds).
struct CachedBackward {
  Backward backward;
  Graph fused;
  std::vector<CostPhase> phases;
};

/// The phase of each node of `fused` from the phases of the unfused backward's nodes: a copied
/// node keeps its own; a kernel is input-gradient work if it holds any, else weight-gradient
/// work if it holds any, else recompute; a result node takes its kernel's.
std::vector<CostPhase> fused_phases(const Graph& fused, const std::vector<int>& source,
                                    const std::vector<CostPhase>& unfused) {
  std::vector<CostPhase> out(fused.nodes.size(), CostPhase::forward);
  for (size_t i = 0; i < fused.nodes.size(); ++i) {
    const GraphNode& n = fused.nodes[i];
    if (source[i] >= 0) {
      out[i] = unfused[source[i]];
    } else if (const auto* f = std::get_if<FusedAttr>(&n.attr)) {
      bool input = false, weight = false;
      for (int m : f->members) {
        input = input || unfused[m] == CostPhase::input_grad;
        weight = weight || unfused[m] == CostPhase::weight_grad;
      }
      out[i] = input    ? CostPhase::input_grad
               : weight ? CostPhase::weight_grad
                        : CostPhase::recompute;
    } else if (n.op == GraphOp::result) {
      out[i] = out[n.inputs[0]];
    }
  }
  return out;
}

/// Backward graphs by (forward graph, needs-grad mask, which inputs are weights); entries hold
/// the forward graph so its address is never reused while cached.
std::shared_ptr<const CachedBackward> backward_of(const std::shared_ptr<const Graph>& graph,
                                                  const std::vector<bool>& needs_grad,
                                                  const std::vector<bool>& weights) {
  static std::mutex mutex;
  using Key = std::tuple<const Graph*, std::vector<bool>, std::vector<bool>>;
  static std::map<Key,
                  std::pair<std::shared_ptr<const Graph>, std::shared_ptr<const CachedBackward>>>
      cache;
  std::lock_guard lock(mutex);
  Key key{graph.get(), needs_grad, weights};
  if (auto it = cache.find(key); it != cache.end()) return it->second.second;
  auto entry = std::make_shared<CachedBackward>();
  CompiledGraph c = compile_graph(*graph, {.differentiate = needs_grad});
  entry->backward = std::move(*c.backward);
  entry->fused = std::move(c.fused);
  entry->phases = fused_phases(entry->fused, c.fused_source,
                               backward_phases(entry->backward, *graph, weights));
  std::shared_ptr<const CachedBackward> b = entry;
  cache.emplace(std::move(key), std::make_pair(graph, b));
  return b;
}

class GraphGradNode final : public GradNode {
 public:
  /// `weights` flags the inputs that are leaves (parameters): their gradients count as
  /// weight-gradient work, the others' as input-gradient work.
  GraphGradNode(std::shared_ptr<const Graph> graph, std::vector<Tensor> saved,
                std::vector<bool> needs_grad, std::vector<bool> weights)
      : graph_(std::move(graph)),
        saved_(std::move(saved)),
        needs_grad_(std::move(needs_grad)),
        weights_(std::move(weights)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    const auto cached = backward_of(graph_, needs_grad_, weights_);
    const Backward& backward = cached->backward;
    std::vector<Tensor> args = saved_;
    for (size_t k = 0; k < graph_->outputs.size(); ++k) {
      const GraphNode& out = graph_->nodes[graph_->outputs[k]];
      const Tensor& g = k < grad_outputs.size() ? grad_outputs[k] : Tensor();
      args.push_back(g.defined() ? g.detach()
                                 : zeros(out.shape, out.dtype, saved_.empty()
                                                                  ? cpu()
                                                                  : saved_.front().device()));
    }
    const std::vector<Tensor> grads = execute(cached->fused, args, cached->phases);
    std::vector<Tensor> per_input(saved_.size());
    for (size_t i = 0; i < backward.wrt.size(); ++i)
      per_input[backward.wrt[i]] = grads[i];
    return per_input;
  }

  Tensor accumulate(const Tensor& a, const Tensor& b) const override { return add_tensors(a, b); }

  std::string name() const override { return graph_->origin; }

 private:
  std::shared_ptr<const Graph> graph_;
  std::vector<Tensor> saved_;
  std::vector<bool> needs_grad_, weights_;
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
                                 const std::vector<Tensor>& inputs) {
  std::vector<Tensor> detached;
  std::vector<bool> needs_grad;
  bool any = false;
  for (const Tensor& x : inputs) {
    detached.push_back(x.detach());
    needs_grad.push_back(x.requires_grad() && kFloatDTypes.contains(x.dtype()));
    any = any || needs_grad.back();
  }
  std::vector<Tensor> outputs = execute(fused, detached);
  if (!any || !grad_enabled()) return outputs;
  std::vector<bool> weights;
  for (const Tensor& x : inputs)
    weights.push_back(x.requires_grad() && x.is_leaf());
  attach(std::make_shared<GraphGradNode>(graph, detached, needs_grad, std::move(weights)), inputs,
         outputs);
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
