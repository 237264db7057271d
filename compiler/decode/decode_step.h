// The decode step of a causal model, derived from its window graph: a key-value cache that no
// one writes by hand. `fn logits(x: i64[1 T])` traces to a graph over a window of T tokens;
// every row of its output depends only on the rows at or before it, because the one op that
// mixes rows is a causally masked attention. The step graph computes one new row from one new
// token: every op that works row by row (embeddings, norms, projections, MLPs, RoPE) runs on
// that row alone, what does not depend on the tokens (positions, masks, rotary tables) is
// computed once and read at the new row, and each attention's keys and values come from a
// cache of the window's T rows into which the step writes its own row first (write_row, in
// place: a token writes one row of each cache, not T). What the cache
// changes is the cost of a token: a forward pass over one row plus an attention over T keys,
// not a forward pass over T rows (nanoGPT's sample.py recomputes the window every token).
//
// What cannot be derived is said, naming the node: a reduction, contraction, concat or slice
// along the sequence, an attention whose keys do not come from the sequence, any op other than
// those that trace from scripts. Whether a mask really is causal is a property of its values,
// which the caller checks on the computed statics (DecodeStep::causal).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ein/quant_type.h>

#include "compiler/graph/graph.h"

namespace ein {

/// Where one input of the step graph comes from, per step.
struct StepInput {
  enum class Kind : uint8_t {
    token,     ///< the new token: the window's token input with its time dim of size 1
    whole,     ///< window node `node`'s value (an input of the window graph, or a static node)
    row,       ///< window node `node`'s value at the new position of its dim `dim` (size 1)
    cache,     ///< cache `index`'s value after the previous step (zeros before the first)
    position,  ///< the new position, an i64 [1] on the CPU (where write_row puts the row)
    codes,     ///< the codes of quantized matrix `index` (DecodeStep::quantized)
    scales,    ///< its scales
  };
  Kind kind = Kind::token;
  int node = -1;   ///< whole, row; token: the window's input node of the tokens
  int dim = -1;    ///< row
  int index = -1;  ///< cache; codes and scales: the quantized matrix
};

/// One key or value cache: T rows of an attention's keys or values.
struct CacheSlot {
  Shape shape;               ///< the window's keys or values: [B..., T, E]
  DType dtype = DType::f32;
  int window_node = -1;      ///< the window graph's node whose rows it caches
};

/// A weight matrix the step reads from quantized codes (quantize_step.h): window node `node`'s
/// value, quantized as `type` in blocks along its last axis.
struct QuantizedMatrix {
  int node = -1;
  QuantType type = QuantType::q8_0;
  Shape shape;  ///< the matrix's (two dims)
};

/// An attention bias (a static node of the window graph) that must mask every key after its
/// query (-inf) for the step to compute what the window computes: dims `query` and `key`.
struct CausalCheck {
  int node = -1;
  int query = -1, key = -1;
};

/// The step graph and what feeds it.
struct DecodeStep {
  /// Empty when derived; else why not: a phrase ("reduces along the sequence") whose subject
  /// is the window's node `why_node` (-1: the function).
  std::string why;
  int why_node = -1;

  int64_t length = 0;      ///< T: the window's length, the caches' rows
  Graph step;              ///< outputs: the window's output at the new row, then each cache's next value
  std::vector<StepInput> inputs;  ///< per step-graph input, in InputAttr order
  std::vector<CacheSlot> caches;
  int output_time_dim = -1;  ///< the time dim of the step's first output (size 1)
  /// The window's nodes that do not depend on the tokens and that the step reads (not
  /// inputs): computed once, by `statics` (inputs: window inputs `statics_inputs[i]`;
  /// outputs: window nodes `static_nodes`, in order).
  Graph statics;
  std::vector<int> statics_inputs;
  std::vector<int> static_nodes;
  std::vector<CausalCheck> causal;
  std::vector<QuantizedMatrix> quantized;  ///< empty unless quantize_step() found any

  bool derived() const { return why.empty(); }
};

/// `step` with its key and value caches held in `dtype` instead of the window's own (bf16:
/// half the bytes of f32, and half what a step's attention reads at a long position): a step
/// rounds its new row to `dtype` as it writes it (write_row), the window's pass rounds the rows
/// it fills (decoder_window, quantize_step.h), and the attention reads the cache as it is (the
/// CPU's reads bf16 rows in place: exec/attention_query.h). Caches of `dtype` already: as is.
DecodeStep with_cache_dtype(DecodeStep step, DType dtype);

/// Derives the decode step of `window`, whose input `token_input` (InputAttr index) holds the
/// tokens with the sequence along `time_dim`, and whose one output is per row. On failure the
/// result says why (DecodeStep::why) and holds nothing else.
DecodeStep derive_decode_step(const Graph& window, int token_input, int time_dim);

}  // namespace ein
