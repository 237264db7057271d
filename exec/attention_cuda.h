// The fused attention on CUDA tensors (the contract of exec/attention.h): FlashAttention-2's
// algorithm as three hand-written CUDA C++ kernels, compiled by NVRTC through the CUDA executor
// (exec/cuda_executor.h), so the (t × s) logits never exist in device memory:
//  - forward: a block of B threads per B query rows of one batch index; each thread keeps its
//    row's running max and sum and its output accumulator, key/value tiles of B rows are
//    staged in shared memory; the result is packed [..., T, F + 1] with the logsumexp last;
//  - backward: delta_i = dO_i · O_i per row; dQ with one thread per query row over key tiles;
//    dK and dV with one thread per key row over query tiles (and, with grouped-query heads,
//    over the query heads of its group, so their sum needs no atomics). Both recompute the
//    probabilities from the logsumexp.
// Scalar FMA arithmetic in f32 (f64 for f64); q, k, v and the cotangent are converted to the
// compute type on the device first, the bias is read in place through its strides in its own
// dtype, or, when the batch rows share it and a row is "zeros, then -inf" (causal, padding),
// not at all: per-row key limits (ein_attention_limits) mask the keys and skip the tiles.
// The exception: bf16/f16 operands with head dims that are multiples of 16 up to 128 run on
// tensor cores, forward and backward (attention_cuda_mma.h).
// The scalar kernels' tiles fit 40 KB of static shared memory; dims too wide for that
// return false from cuda_attention_fits() and take the CPU path.
#pragma once

#include <cstdint>

#include <ein/tensor.h>

namespace ein {

/// Whether the CUDA kernels take head dims `e` (q, k) and `f` (v) in `compute` (f32 or f64).
bool cuda_attention_fits(int64_t e, int64_t f, DType compute);

/// Whether attention_forward_cuda() and attention_backward_cuda() run these operands on
/// tensor cores (attention_cuda_mma.h):
/// q, k and v all bf16 (sm_80+) or all f16 (sm_70+), head dims multiples of 16 up to 128, a
/// result dtype other than f64, EIN_CUDA_ATTENTION not "simt" (which keeps the scalar kernels),
/// and either the PTX or wgmma kernels (attention_cores: sm_80+ under EIN_CUDA_ATTENTION=ptx,
/// sm_90 under EIN_CUDA_ATTENTION=wgmma), which need no mma.h, or
/// NVRTC's headers holding mma.h for the WMMA ones (NvrtcInfo::mma_headers; when they do not,
/// the first call says so once on stderr).
bool cuda_attention_uses_tensor_cores(const Tensor& q, const Tensor& k, const Tensor& v,
                                      DType dtype);

/// Which kernels attention_forward_cuda() and attention_backward_cuda() run these operands on:
/// "wmma", "ptx" or "wgmma" (the tensor-core sets of attention_cuda_mma.h), or "simt" (the
/// scalar kernels above). What a benchmark prints, so that a GPU run says which set it timed.
const char* cuda_attention_kernel_set(const Tensor& q, const Tensor& k, const Tensor& v,
                                      DType dtype);

/// attention_forward() on CUDA tensors (same arguments and result).
Tensor attention_forward_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& bias, double scale, DType dtype, int64_t kv_repeat);

/// attention_backward() on CUDA tensors (same arguments and result).
Tensor attention_backward_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& bias, const Tensor& out, const Tensor& d_out,
                               double scale, DType dtype, int64_t kv_repeat);

}  // namespace ein
