// Unfused Graph IR of the standard functions (softmax, norms, losses, the AdamW update), built
// only from primitive ops (input, reduce, map) so that autodiff, the cost model and the fusion
// pass see them as ordinary graphs. Formulas follow PyTorch's definitions, cited per builder.
// These graphs compute; they do not check user input beyond their shapes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/graph/graph.h"

namespace ein {

/// torch.softmax(x, -1): y = exp(x − m) / Σ_last exp(x − m), m = max over the last dim.
/// Input 0: x (… n). Output: y (… n).
Graph softmax_graph(const Shape& x, DType dtype = DType::f32);

/// torch.log_softmax(x, -1): y = x − m − log Σ_last exp(x − m). Input x (… n); output (… n).
Graph log_softmax_graph(const Shape& x, DType dtype = DType::f32);

/// torch.nn.functional.layer_norm over the last dim (biased variance):
/// y = (x − μ) · rsqrt(σ² + eps) · weight + bias. Inputs x (… n), weight (n), bias (n).
Graph layer_norm_graph(const Shape& x, DType dtype = DType::f32, double eps = 1e-5);

/// torch.nn.functional.rms_norm over the last dim: y = x · rsqrt(mean(x²) + eps) · weight
/// (eps 1e-6 as ein::nn::rms_norm and LLaMA). Inputs x (… n), weight (n).
Graph rms_norm_graph(const Shape& x, DType dtype = DType::f32, double eps = 1e-6);

/// torch.nn.functional.cross_entropy(logits, target) with mean reduction:
/// loss = mean_r (m_r + log Σ_c exp(x_rc − m_r) − x_r,target_r). Inputs logits (r c), target
/// (r) of i64 class indices; output a 0-dim loss. The logit at the target is a map comparing
/// the class index (Kernel IR's index leaf) with the target, summed over the classes.
Graph cross_entropy_graph(const Shape& logits, DType dtype = DType::f32);

/// torch.nn.functional.mse_loss(pred, target), mean reduction: mean((pred − target)²).
/// Inputs pred, target (same shape); output 0-dim.
Graph mse_loss_graph(const Shape& x, DType dtype = DType::f32);

/// One torch.optim.AdamW step (amsgrad and maximize off) of one parameter:
///   p' = p·(1 − lr·wd);  m' = β1·m + (1 − β1)·g;  v' = β2·v + (1 − β2)·g²;
///   p'' = p' − lr / (1 − β1^t) · m' / (sqrt(v') / sqrt(1 − β2^t) + eps).
/// Inputs param, grad, exp_avg, exp_avg_sq (same shape), then 0-dim lr, beta1, beta2, eps,
/// weight_decay, step (inputs, not constants, so that one kernel serves every step).
/// Outputs: the new param, exp_avg, exp_avg_sq.
Graph adamw_graph(const Shape& param, DType dtype = DType::f32);

/// A standard function by name, for tools (`ein emit softmax --shape 64,1024,512`).
struct StandardFunction {
  std::string_view name;         ///< e.g. "softmax", "layer_norm"
  std::string_view description;  ///< one line: inputs and formula
  Graph (*build)(const Shape& shape, DType dtype);
};

/// Every standard function, in documentation order.
const std::vector<StandardFunction>& standard_functions();

/// The standard function called `name`, or nullptr.
const StandardFunction* find_standard_function(std::string_view name);

}  // namespace ein
