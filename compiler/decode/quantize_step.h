// A decode step read from quantized weights. The step of a causal model (decode_step.h) runs
// one row through the model: every product with a weight matrix is a matrix-vector product,
// bound by reading the matrix, so reading it from q8_0 or q4_0 codes (8.5 or 4.5 bits a weight
// instead of 32) is what makes a token cheaper. This pass finds those products in the step
// graph, x @ W with W one of the step's whole inputs (a parameter, or a slice or cast of one
// computed once: GPT's thirds of qkv, LLaMA's bf16 copies), and makes each a quantized_matmul
// node reading W's codes and scales, which become inputs of the step; the runtime
// (exec/decode.h) quantizes each such W once, as `ein quantize` stores it: blocks of 32 along
// its last axis, so a product summing over that axis reads it as x @ Wᵀ
// (WeightLayout::out_in, an embedding used as the LM head) and one summing over the first as
// x @ W (in_out, ein's Linear). The window's pass (prefill, or past the window) keeps the
// float weights: sampled from a quantized checkpoint they are its codes' values, the same.
// Only f32 matrices are read from codes: under mixed precision the step reads bf16 copies of
// the weights, and codes made from those would not be the checkpoint's (a q4_0 block's scale
// comes from its largest value, which the copy rounds).
#pragma once

#include <functional>

#include <ein/quant_type.h>

#include "compiler/decode/decode_step.h"

namespace ein {

/// Whether the matrix that is window node `node`'s value (of this dtype and shape) is read
/// from codes: the caller's rule (exec/decode.h: `ein quantize`'s, and the values must be
/// their codes' own).
using QuantizesMatrix = std::function<bool(int node, DType dtype, const Shape& shape)>;

/// `step` (derived) with every product x @ W or x @ Wᵀ of its graph, W a whole f32 input of
/// two dims that `eligible` accepts, made a quantized_matmul of `type` reading W's codes and
/// scales (new step inputs of kinds codes and scales; DecodeStep::quantized lists the
/// matrices). A product is rewritten when W's other dim is the last of the result and x's
/// other dims come before it in their own order (how `x @ weight` and `einsum(x, w, "b t d,
/// v d -> b t v")` trace); every other contraction stays as it was.
DecodeStep quantize_step(DecodeStep step, QuantType type, const QuantizesMatrix& eligible);

}  // namespace ein
