// Eager reverse-mode autograd, like PyTorch's: a tensor that requires grad carries
// AutogradMeta; every compiled op run on such tensors records a GradNode (the tape) whose
// apply() computes its inputs' gradients; Tensor::backward() walks the recorded nodes in
// reverse topological order, sums gradients per tensor and stores them on the leaves (and on
// non-leaves that asked with retain_grad()). The runtime owns the tape and the walk; the
// nodes themselves (which run backward graphs) are made by the compiler (api/tape.h).
//
//   Tensor w = ein::ones({3}).requires_grad_();
//   Tensor loss = ...;           // ops on w record nodes
//   loss.backward();             // w.grad() now holds d loss / d w
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ein/tensor.h>

namespace ein {

class GradNode;

/// What autograd keeps per tensor (shared by every handle to that tensor).
struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;          ///< a non-leaf that keeps its gradient (retain_grad())
  Tensor grad;                        ///< the accumulated gradient (undefined until backward)
  std::shared_ptr<GradNode> grad_fn;  ///< the node that made it; null for a leaf
  int output_nr = 0;                  ///< which output of grad_fn it is
  /// A leaf's hook (torch's register_post_accumulate_grad_hook): runs once per backward,
  /// right after that backward added its last contribution to `grad`, so the gradient is
  /// final while the backward goes on with other tensors. Data parallelism starts exchanging
  /// a parameter's gradient here (runtime/dist/gradient_sync.h).
  std::function<void()> post_accumulate_hook;
};

/// One recorded op on the tape.
class GradNode {
 public:
  virtual ~GradNode() = default;
  /// The gradients of the op's inputs (one per entry of `inputs`; undefined: none) from the
  /// gradients of its outputs (one per output; undefined: zero).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  /// How a node hands input `input`'s gradient to the walk before apply returns: true when
  /// the walk took it (the input is a leaf: `grad` was added to its gradient, possibly by
  /// moving from it), false when the node must return it from apply as usual.
  using EarlyGrad = std::function<bool(size_t input, Tensor& grad)>;
  /// apply(), for a node that finishes some input gradients long before others (a whole
  /// backward graph finishes its parameters' gradients one by one): each finished gradient
  /// may go to `early` at once, so the leaf's post_accumulate_hook runs while the node's
  /// remaining work does. The walk calls this only when some leaf has a hook.
  virtual std::vector<Tensor> apply_early(const std::vector<Tensor>& grad_outputs,
                                          const EarlyGrad& early) {
    (void)early;
    return apply(grad_outputs);
  }
  /// a + b for two gradients of one tensor (a fresh tensor).
  virtual Tensor accumulate(const Tensor& a, const Tensor& b) const = 0;
  /// What the op was, for error messages ("einsum 'b d, d f -> b f'").
  virtual std::string name() const = 0;

  /// Per op input: its autograd record, or null when it needs no gradient.
  std::vector<std::shared_ptr<AutogradMeta>> inputs;
  /// Per op output: its record (weak: outputs own their node, not the reverse).
  std::vector<std::weak_ptr<AutogradMeta>> outputs;
};

/// Whether ops record nodes now (true unless a NoGrad scope is active on this thread).
bool grad_enabled();

/// A scope in which ops record nothing (torch.no_grad()): optimizer updates, evaluation.
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

/// A scope in which ops record again inside a NoGrad one (torch.enable_grad()).
class EnableGrad {
 public:
  EnableGrad();
  ~EnableGrad();
  EnableGrad(const EnableGrad&) = delete;
  EnableGrad& operator=(const EnableGrad&) = delete;

 private:
  bool previous_;
};

/// What a recorded op keeps for its backward (`ein train --recompute`). Views and constants are
/// always rebuilt (they cost nothing) and an op's inputs are always kept; contractions and
/// reductions are recomputed only under `blocks` (inside a block) and `full`.
enum class Recompute : uint8_t {
  none,       ///< every other forward value a gradient rule reads is saved by the forward
  automatic,  ///< as none, but elementwise maps and casts computable from values kept anyway
              ///< (through at most 8 more maps) are recomputed in the backward: fewer saved
              ///< bytes, no extra saved value; a parameter's cast to the compute dtype stays
              ///< saved (default)
  blocks,     ///< activation checkpointing: each module of a list (a GPT's `blocks`) saves
              ///< only the values it hands on and is recomputed in its backward; elsewhere auto
  full,       ///< only the inputs are kept; the backward recomputes the forward values it reads
};

/// The policy ops recorded now use on this thread (Recompute::automatic unless a
/// RecomputeScope is active).
Recompute recompute_policy();

/// "none", "auto", "blocks" or "full".
const char* recompute_name(Recompute policy);

/// The policy recompute_name() spells `name`; nullopt for another word.
std::optional<Recompute> parse_recompute(std::string_view name);

/// Under Recompute::automatic, the fraction of the plan's saved bytes a recorded op's forward
/// may save on this thread (`ein train --activation-budget`; 1 unless a RecomputeScope sets
/// it): below 1, the backward recomputes contractions (a matmul's output, the bias or residual
/// added to it) instead of saving their results, the fewest FLOPs per saved byte first, until
/// the rest fits, as torch.compile's activation_memory_budget does.
double activation_budget();

/// A scope in which ops record with another policy (and activation budget, in [0, 1]).
class RecomputeScope {
 public:
  explicit RecomputeScope(Recompute policy, double activation_budget = 1);
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  Recompute previous_;
  double previous_budget_;
};

/// Clears the gradients of `params`: set_to_none drops them (the default, like PyTorch 2),
/// otherwise they are filled with zeros in place.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none = true);

}  // namespace ein
