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
// x @ W (in_out, ein's Linear). A gather of such a matrix's rows (an embedding: GPT's tied
// wte, LLaMA's tok_embeddings) becomes a quantized_gather of the rows' codes.
// quantize_window() does the same to the window's pass (a long prompt's prefill, and every
// token past the window) with the step's matrices, so a float matrix that only those nodes
// read is needed by neither and the decoder can let it go: what it holds is then the codes
// (sampled from a quantized checkpoint, they stand for the very values the float weights
// had).
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
/// matrices), and every gather of W's rows a quantized_gather. A product is rewritten when W's other dim is the last of the result and x's
/// other dims come before it in their own order (how `x @ weight` and `einsum(x, w, "b t d,
/// v d -> b t v")` trace); every other contraction stays as it was.
/// The step's inputs that nothing reads any more (a matrix read only from codes) are dropped.
DecodeStep quantize_step(DecodeStep step, QuantType type, const QuantizesMatrix& eligible);

/// `window` (the graph a step was derived from) with every product x @ W or x @ Wᵀ whose W is
/// window node `matrices[k].node`, found as quantize_step() finds them for any number of rows,
/// made a quantized_matmul reading that matrix's codes and scales: inputs n + 2k and n + 2k + 1
/// (n: the window's inputs). What only those products read is dropped and the inputs still read
/// are numbered anew; `old_inputs` receives, per input, that index (a window input's, or n +
/// 2k or n + 2k + 1).
Graph quantize_window(const Graph& window, const std::vector<QuantizedMatrix>& matrices,
                      std::vector<int>& old_inputs);

/// The window's pass of a decoder of `step` (derived from `window`, quantized or not): the
/// window with the rows its caches hold as outputs after its own, its products with
/// step.quantized's matrices read from their codes. `inputs` receives, per input, the window
/// input it is, or n + 2k (the codes of step.quantized[k]) or n + 2k + 1 (its scales).
Graph decoder_window(const Graph& window, const DecodeStep& step, std::vector<int>& inputs);

/// The pass that fills a decoder's caches and nothing else: decoder_window() without the
/// window's own outputs and the nodes only they read (the LM head, the last block's MLP, ...);
/// its outputs are the caches' rows, `inputs` as decoder_window()'s. A token past the window,
/// whose positions have all shifted, can run it over the first T - 1 tokens and a step for
/// the last instead of the whole window's pass (exec/decode.cpp chooses by their FLOPs).
Graph decoder_refill(const Graph& window, const DecodeStep& step, std::vector<int>& inputs);

/// Whether a token past the window is cheaper by decoder_refill() and a step than by the
/// window's pass: when the two cost at most kRefillShare of the pass's FLOPs, a step's FLOPs
/// weighed kStepSlowdown times (one row by every weight: matrix-vector products, bound by
/// reading the weights, where a pass multiplies T rows). `refill_flops`, `step_flops` and
/// `window_flops` as the runtime charges them.
bool refills_past_the_window(int64_t refill_flops, int64_t step_flops, int64_t window_flops);

/// The margin refills_past_the_window() asks for. A step runs slower than kStepSlowdown says
/// where the pass reaches a larger share of the peak: at T=256 L=6 H=8 D=512, a 14% saving by
/// that count ran 3% slower from f32 weights (BENCHMARKS.md, "A token past the window").
inline constexpr double kRefillShare = 0.85;

/// How much slower a decode step runs its FLOPs than a pass over the window. Measured on the
/// 2-core Zen 3 (BENCHMARKS.md, "Sampling with the key-value cache"): 9-10 GFLOP/s a step
/// against 67 and 176 GFLOP/s a window at 64 2 4 128 and 256 6 8 512; a GPU's ratio is
/// larger, so there a prompt goes in by prefill() sooner than needed, never later.
inline constexpr double kStepSlowdown = 16;

/// What a decoder of `step` still reads once it is made, its statics computed: per window
/// input, whether its window's pass (`inputs`, as decoder_window() gives them) or its step
/// reads it; per static node (DecodeStep::static_nodes), whether its step reads it. The rest,
/// a matrix read from codes and a slice of one, it lets go of.
struct DecoderReads {
  std::vector<char> inputs;
  std::vector<char> statics;
};
DecoderReads decoder_reads(const Graph& window, const DecodeStep& step,
                           const std::vector<int>& inputs);

/// The bytes of the weights a decoder of `step` holds (Decoder::weight_bytes()): the window
/// inputs it reads but the tokens, the statics it reads that are not views of one (those
/// keep their input's bytes), and the codes and scales of step.quantized.
int64_t decoder_weight_bytes(const Graph& window, const DecodeStep& step);

}  // namespace ein
