// The fused linear + cross-entropy kernels behind graph.h's `linear_cross_entropy` and
// `linear_cross_entropy_grad` nodes (compiler/fuse/cross_entropy.h finds them), on the CPU: the
// (rows × classes) logits exist one tile at a time (a block of rows × a block of classes, sized
// for the cache), never whole, forward or backward. The forward keeps an online logsumexp per
// row; the backward recomputes each tile's logits, turns them into the logits' gradient
// (softmax − one-hot, times the row's cotangent) and accumulates dh and dw from the tile.
#pragma once

#include <utility>

#include <ein/tensor.h>

namespace ein {

/// [N, 2]: per row, logsumexp(h w) − (h w)[target] and the logsumexp. h [N, D], w [D, V] (any
/// strides with one of them 1; else copied), integer targets [N]; a target outside [0, V)
/// picks nothing (its row's loss is the logsumexp), as the unfused `pick` does. Computes in f64
/// when `dtype` is f64, else in f32; returns `dtype`.
Tensor linear_cross_entropy_forward(const Tensor& h, const Tensor& w, const Tensor& targets,
                                    DType dtype);

/// The forward's [N, 2] and, from the same logits, the gradients of the sum of the rows'
/// losses: dh [N, D] and dw [D, V] (graph.h's CrossEntropyAttr::unit_grads). The logits exist
/// one chunk of rows at a time (all classes of each row; at least 128 rows, as many as a
/// sixth of dw's elements or 2^21 logits hold): its logsumexps, then its softmax − one-hot in place, then dh of its
/// rows and its share of dw: three products of 2·N·D·V in all where forward + backward take
/// four.
struct CrossEntropyWithGrads {
  Tensor out, dh, dw;
};
CrossEntropyWithGrads linear_cross_entropy_with_grads(const Tensor& h, const Tensor& w,
                                                      const Tensor& targets, DType dtype);

/// dh [N, D] and dw [D, V], each in a buffer of its own, for the result `out` (the forward's)
/// and its cotangent `d_out` [N, 2] (column 0 the rows' losses'; column 1 ignored).
std::pair<Tensor, Tensor> linear_cross_entropy_backward(const Tensor& h, const Tensor& w,
                                                        const Tensor& targets, const Tensor& out,
                                                        const Tensor& d_out, DType dtype);

/// The same from the forward's unit gradients (linear_cross_entropy_with_grads' dh and dw):
/// when every row's cotangent is one value s, s·dh_unit and s·dw_unit, scaled in place (the
/// caller hands them over: autodiff makes them for this node alone); any other cotangent
/// recomputes the logits as linear_cross_entropy_backward does.
std::pair<Tensor, Tensor> linear_cross_entropy_backward(const Tensor& h, const Tensor& w,
                                                        const Tensor& targets, const Tensor& out,
                                                        const Tensor& d_out, Tensor dh_unit,
                                                        Tensor dw_unit, DType dtype);

}  // namespace ein
