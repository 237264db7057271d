// The fused linear + cross-entropy (exec/cross_entropy.h) on CUDA tensors: the logits exist one
// chunk of whole rows at a time in device memory (512 rows, or more where a sixth of dw's bytes
// holds more), made and consumed by cuBLASLt GEMMs (runtime/cuda/cublaslt.h, through the
// installed CudaExecution), with one hand-written kernel per chunk in between, compiled by
// NVRTC through the CUDA executor: one 256-thread block per row takes the row's max and sum of
// exp (warp shuffles, then shared memory), writes its loss and logsumexp, and turns the row's
// logits into their gradient (softmax − one-hot) · cotangent in place when asked. Computes in
// f32 (f64 for f64); the rows' results are the CPU kernels' to the last few ulps (libm, sums
// in another order).
#pragma once

#include <utility>

#include <ein/tensor.h>

#include "exec/cross_entropy.h"

namespace ein {

/// linear_cross_entropy_forward() with h and w on one CUDA device.
Tensor linear_cross_entropy_forward_cuda(const Tensor& h, const Tensor& w, const Tensor& targets,
                                         DType dtype);

/// linear_cross_entropy_with_grads() with h and w on one CUDA device.
CrossEntropyWithGrads linear_cross_entropy_with_grads_cuda(const Tensor& h, const Tensor& w,
                                                           const Tensor& targets, DType dtype);

/// linear_cross_entropy_backward() (the logits recomputed) with h and w on one CUDA device.
std::pair<Tensor, Tensor> linear_cross_entropy_backward_cuda(const Tensor& h, const Tensor& w,
                                                             const Tensor& targets,
                                                             const Tensor& out,
                                                             const Tensor& d_out, DType dtype);

/// x *= s in place: x a contiguous f32 or f64 tensor of its own on a CUDA device.
void scale_cuda(Tensor& x, double s);

}  // namespace ein
