// Fused row and optimizer kernels on CPU tensors, each ONE Kernel IR kernel: softmax,
// log-softmax, LayerNorm, RMSNorm and cross-entropy over the last dim (forward, and the row part
// of their backward), and the AdamW update of one parameter in place. They are building blocks
// for the autograd rules and the fusion pass, not public API. Inputs may have any strides
// (broadcast weights included) and dtype f64, f32, f16 or bf16; arithmetic is in f32 (f64 when an
// input is f64) and outputs are fresh contiguous tensors in the input's dtype unless stated.
// Sizes, eps and hyper-parameters are run-time kernel params: one compiled kernel per dtype and
// stride pattern serves every shape, step and learning rate.
#pragma once

#include <cstdint>

#include <ein/tensor.h>

namespace ein {

/// softmax(x) over the last dim: exp(x − max) / Σ exp(x − max) (torch.softmax(x, -1)).
Tensor softmax_rows(const Tensor& x);

/// log_softmax(x) over the last dim: x − max − log Σ exp(x − max) (torch.log_softmax(x, -1)).
Tensor log_softmax_rows(const Tensor& x);

/// The input gradient of y = softmax_rows(x) given dL/dy = `grad`: y · (grad − Σ grad · y).
Tensor softmax_rows_backward(const Tensor& y, const Tensor& grad);

/// LayerNorm's outputs: y, and per row the mean and 1/sqrt(var + eps) kept for the backward
/// (f32, or f64 for f64 input; shape = x's without the last dim).
struct LayerNormResult {
  Tensor y, mean, rstd;
};

/// LayerNorm over the last dim (torch.nn.functional.layer_norm, biased variance):
/// y = (x − mean) · rstd · weight + bias; `weight`/`bias` (n) may be undefined (1 and 0).
LayerNormResult layer_norm_rows(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                double eps = 1e-5);

/// The row part of LayerNorm's backward (PyTorch's layer_norm_backward): with x̂ = (x − mean) ·
/// rstd and ĝ = grad · weight, dx = rstd · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂)). `weight` may be
/// undefined. (dweight = Σ_rows grad · x̂ and dbias = Σ_rows grad are column reductions.)
Tensor layer_norm_rows_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                const Tensor& mean, const Tensor& rstd);

/// LayerNorm's parameter gradients.
struct NormWeightGrads {
  Tensor dweight, dbias;  ///< (n) each, in the input's dtype
};

/// The column part of LayerNorm's backward: dweight = Σ_rows grad · x̂, dbias = Σ_rows grad,
/// x̂ = (x − mean) · rstd. One kernel with two stages and two outputs, the rows reduced and
/// the last dim parallel (vectorized across it when x is contiguous).
NormWeightGrads layer_norm_weight_grads(const Tensor& grad, const Tensor& x, const Tensor& mean,
                                        const Tensor& rstd);

/// RMSNorm's outputs: y and per row rstd = 1/sqrt(mean(x²) + eps) (f32, or f64 for f64 input).
struct RmsNormResult {
  Tensor y, rstd;
};

/// RMSNorm over the last dim (torch.nn.RMSNorm): y = x · rstd · weight; `weight` may be
/// undefined.
RmsNormResult rms_norm_rows(const Tensor& x, const Tensor& weight, double eps = 1e-6);

/// The row part of RMSNorm's backward: with x̂ = x · rstd and ĝ = grad · weight,
/// dx = rstd · (ĝ − x̂ · mean(ĝ · x̂)). `weight` may be undefined.
Tensor rms_norm_rows_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                              const Tensor& rstd);

/// The column part of RMSNorm's backward: dweight = Σ_rows grad · x · rstd (one kernel).
Tensor rms_norm_weight_grad(const Tensor& grad, const Tensor& x, const Tensor& rstd);

/// Cross-entropy per row from logits (torch.nn.functional.cross_entropy, reduction='none'):
/// loss = logsumexp(logits) − logits[target], and 0 where target == ignore_index. `target`
/// holds integer class indices (any integer dtype), shape = logits' without the last dim. The
/// loss has the logits' dtype.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100);

/// The logits' gradient of cross_entropy_rows given dL/dloss per row (`grad`, broadcastable
/// to the rows, e.g. a stride-0 view of 1/N): (softmax(logits) − onehot(target)) · grad, 0 in
/// ignored rows.
Tensor cross_entropy_rows_backward(const Tensor& logits, const Tensor& target, const Tensor& grad,
                                   int64_t ignore_index = -100);

/// Σ x² over x's last dim, one value per row (shape: x's without the last dim), in ONE pass
/// over x with no temporary: squares and sums in f32 (f64 for an f64 x), each row's total
/// stored as f64 (gradient norms: optim::grad_norm). A 0-dim x is one row of one. With
/// `into` (f64, of that shape, on x's device; any strides) the totals are stored there, and
/// it is returned: the parts of many gradients share one tensor, summed by one reduction.
Tensor row_sum_of_squares(const Tensor& x, const Tensor& into = Tensor());

/// x ← x · factor in place, in ONE pass, computed in f32 (f64 for an f64 x) and rounded to
/// x's dtype (gradient clipping and loss-scale unscaling, as torch's mul_). x must not be a
/// broadcast view.
void scale_in_place(const Tensor& x, double factor);

/// AdamW's hyper-parameters (torch.optim.AdamW's defaults).
struct AdamWConfig {
  double lr = 1e-3;            ///< learning rate γ
  double beta1 = 0.9;          ///< β1, the first moment's decay
  double beta2 = 0.999;        ///< β2, the second moment's decay
  double eps = 1e-8;           ///< ε added to the denominator
  double weight_decay = 1e-2;  ///< λ, decoupled weight decay
};

/// One AdamW step (Loshchilov & Hutter 2019; torch.optim.AdamW's single-tensor algorithm) on
/// one parameter, in place and in ONE pass over memory, with `step` ≥ 1 counting this step:
///   param ← param · (1 − γλ);  m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²;
///   param ← param − γ / (1 − β1^t) · m / (sqrt(v) / sqrt(1 − β2^t) + ε).
/// The step-dependent factors are computed here in double and passed as run-time params, so
/// no step compiles a new kernel. All four tensors have the same shape; any strides.
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWConfig& config, int64_t step);

}  // namespace ein
