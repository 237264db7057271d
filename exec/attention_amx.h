// The fused attention of bf16 operands on bf16 tile products (exec/amx_tiles.h: AMX tiles, or
// AVX512-BF16 dot products where there is no AMX), for a --precision bf16 step on CPUs that
// have them: FlashAttention-2's forward and backward as in attention.cpp (the same tiles,
// masks, online softmax and logsumexp), with every tile product in bf16. q, k
// and v are multiplied as they are; the probabilities, dS and the cotangent are rounded to
// bf16 for their products, as FlashAttention on GPUs and PyTorch's CPU flash attention round
// them; the softmax, the running statistics and every accumulator stay f32. Internal to exec/.
#pragma once

#include "exec/attention_operands.h"

namespace ein::attention_detail {

/// Whether these operands run here: q, k and v are bf16 and bf16_tiles().
bool amx_operands(const Operands<float>& o);

/// attention_forward's packed f32 result, of shape out_shape ([B..., T, F + 1]).
Tensor forward_amx(const Operands<float>& o, double scale, const Shape& out_shape);

/// attention_backward's packed f32 gradients (dq, dk, dv) for the forward result `out` and its
/// cotangent `d_out` (both [B..., T, F + 1], f32).
Tensor backward_amx(const Operands<float>& o, const Tensor& out, const Tensor& d_out,
                    double scale);

}  // namespace ein::attention_detail
