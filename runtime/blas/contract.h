// Pairwise tensor contraction through one strided batched GEMM: axes are
// classified as batch / m / n / k, each operand's axis groups are folded into strided
// matrix dimensions when its layout allows (no copy), and copied into a GEMM layout when it
// does not. It contracts two operands; choosing the order for more is compiler/contraction_plan.
//
//   // scores: (b h q k) = q: (b h q d) · k: (b h k d), with axis ids b=0 h=1 q=2 k=3 d=4
//   ein::Tensor s = ein::contract(q, {0, 1, 2, 4}, k, {0, 1, 3, 4}, {0, 1, 2, 3});
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ein/tensor.h>

namespace ein {

/// out[batch..., m..., n...] = sum_k a[...] * b[...], where axes are integer ids: `a_axes` /
/// `b_axes` label a's and b's dimensions, `out_axes` the result's. Axes in a, b and out are
/// batch; in a and out: m; in b and out: n; in a and b only: contracted (k). An axis in only
/// one operand and not in out is summed first; an id repeated within one operand takes the
/// diagonal. Size-1 broadcasting is not done here: shared axes must have equal sizes.
///
/// a and b are tensors of one dtype on one device. On the CPU f32 and f64 run sgemm/dgemm
/// and f16/bf16 are converted to f32 (within the layout copy), computed in f32 and rounded
/// back once; on a CUDA device the GEMM is cuBLASLt's (runtime/cuda/execution.h), 16-bit
/// operands as they are with f32 accumulation. The result has a's dtype and dims in out_axes
/// order. It is contiguous whenever out_axes lists the batch axes, then the m axes, then the
/// n axes (or batch, n, m); otherwise it is a permuted, non-contiguous view of a (batch, m, n)
/// buffer. Throws ein::RuntimeError on a bad axis list, mismatched sizes, dtypes or devices.
///
/// `result` f32 for bf16 or f16 operands returns the f32 sums without rounding them to 16 bits
/// (oneDNN's bf16 matmul writes them so; elsewhere the f32 result of the f32 GEMM is kept, or
/// a 16-bit result widened). Any other `result` must be the operands' dtype.
Tensor contract(const Tensor& a, const std::vector<int>& a_axes, const Tensor& b,
                const std::vector<int>& b_axes, const std::vector<int>& out_axes,
                std::optional<DType> result = std::nullopt);

/// contract() written into `out` (its result's shape and dtype, any strides, e.g. a slot of a
/// larger tensor): the GEMM writes there directly when `out` folds into a (batch, m, n) matrix
/// batch BLAS can write (the concat of contractions, exec/execute.cpp); otherwise the result is
/// computed as contract() does and copied in. `out` must not overlap `a` or `b` (the GEMM
/// writes it while reading them). Throws as contract() does, and on an `out` of another shape,
/// dtype or device.
void contract_into(const Tensor& out, const Tensor& a, const std::vector<int>& a_axes,
                   const Tensor& b, const std::vector<int>& b_axes,
                   const std::vector<int>& out_axes);

/// What contract() has done since the process started, for tests and profiling.
struct ContractStats {
  int64_t operand_copies = 0;    ///< operands copied into a GEMM layout (or converted to f32)
  int64_t gemm_calls = 0;        ///< gemm_batched calls
  int64_t permuted_outputs = 0;  ///< results returned as non-contiguous views
  int64_t written_in_place = 0;  ///< contract_into() results the GEMM wrote into `out` itself
};

/// The counters so far (totals over all threads).
ContractStats contract_stats();

}  // namespace ein
