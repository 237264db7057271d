// The runtime of a decode step (compiler/decode/decode_step.h): ein::Decoder over a window
// graph and the step derived from it. What does not depend on the tokens (the causal mask,
// positions, rotary tables) is computed once, on the device of the window's inputs; each step
// runs the fused step graph on one row, writing its keys and values into the caches in place;
// prefill() runs the fused window graph once, its caches' rows as outputs too, and window()
// (a token past the window) either the same without them or, where it costs fewer FLOPs, a
// pass that only refills the caches from the first T - 1 tokens and a step. With quantized
// weights every pass reads the step's codes (compiler/decode/quantize_step.h; given as a
// file's own codes, DecoderOptions::codes, they are taken as they are), and the decoder lets
// go of the float matrices no pass reads any more: with the model gone, it holds the codes.
// Every run is charged to a FlopCounter as the unfused graphs' work (compiler/cost/
// charges.h), the numbers `ein report` gives. `.ein` scripts reach it through
// script::Program::decoder().
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ein/quantize.h>
#include <ein/tensor.h>
#include <ein/trainer.h>

#include "compiler/decode/decode_step.h"

namespace ein {

/// The Decoder of `window` (its tokens are input `token_input`, the sequence along dim 1) by
/// its derived `step`, fed `feeds` (one tensor per window input, in InputAttr order; the
/// tokens' any). Null, with `why` saying why, when an attention's mask (DecodeStep::causal)
/// lets a query see a later key, or when options.weights asks for quantized weights on a
/// device other than the CPU. With options.weights, the step's products with weight matrices
/// read their codes (compiler/decode/quantize_step.h), quantized here: each matrix `ein
/// quantize` would quantize whose values are already its codes' own (dequantize(quantize(w))
/// == w: a quantized checkpoint's, or parameters rounded by round_parameters_to_codes()), so
/// the step computes with the window's numbers; the others stay float. `given` holds codes by
/// window input (DecoderOptions::codes): a matrix among them takes them as they are, and its
/// feed may be undefined; a pass that reads one as floats reads its dequantized values. With
/// options.cache (bf16, or f32 for a bf16 model) the caches are held in that dtype
/// (with_cache_dtype(): rows rounded as they are written); null with `why` off the CPU.
std::unique_ptr<Decoder> make_graph_decoder(std::shared_ptr<const Graph> window, int token_input,
                                            DecodeStep step, std::vector<Tensor> feeds,
                                            std::string& why, const DecoderOptions& options = {},
                                            std::map<int, QuantizedTensor> given = {});

}  // namespace ein
