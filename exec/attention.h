// The fused attention kernels behind graph.h's `attention` and `attention_grad` nodes
// (compiler/fuse/attention.h finds them): FlashAttention-2's algorithm on the CPU. The forward
// walks key blocks per query block with an online softmax (running max and sum), so only a
// (query block × key block) tile of logits exists at a time, and keeps each row's logsumexp;
// the backward recomputes the probabilities tile by tile from it. Tile products run on the
// calling thread (exec/tile_gemm.h); work is split over batch × query blocks (forward)
// and batch (backward) on oneTBB. Tiles whose bias is -inf everywhere (above a causal
// diagonal) are skipped. Operands on a CUDA device run the CUDA kernels of attention_cuda.h
// (the host path only for head dims too wide for their shared memory).
#pragma once

#include <ein/tensor.h>

namespace ein {

/// [B..., T, F + 1]: o = softmax(scale · q kᵀ + bias) v in the first F columns, each row's
/// logsumexp in the last (o = 0 and -inf for a row whose logits are all -inf). q [B..., T, E],
/// k [B..., S, E], v [B..., S, F], bias [B..., T, S] or undefined (any strides: broadcast views
/// are read in place). Computes in f64 when `dtype` is f64, else in f32; returns `dtype`.
/// kv_repeat > 1: grouped-query heads, k and v with q's last batch dim divided by it (query
/// head h reads k/v head h / kv_repeat).
Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                         double scale, DType dtype, int64_t kv_repeat = 1);

/// One dim: dq, dk and dv flattened one after another (q's, k's and v's element counts), for
/// the attention whose packed result (attention_forward's) is `out` and whose cotangent is
/// `d_out` (the lse column's ignored). With kv_repeat > 1, dk and dv sum over each group.
Tensor attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                          const Tensor& out, const Tensor& d_out, double scale, DType dtype,
                          int64_t kv_repeat = 1);

}  // namespace ein
