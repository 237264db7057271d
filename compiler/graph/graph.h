// Graph IR: tensor-level SSA. Every node has an op from compiler/graph/ops.def, its inputs (earlier
// nodes), its result's shape and dtype, op attributes and the source text it came from.
// Patterns lower into it (lower_patterns.h); execute.h runs it on tensors. It holds no
// tensors and no loop nests: Kernel IR is one level down.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <ein/dtype.h>
#include <ein/shape.h>
#include <ein/source.h>

#include "compiler/kernel/kernel_ir.h"
#include <ein/patterns.h>
#include <ein/quant_type.h>

namespace ein {

/// A Graph IR operation (see compiler/graph/ops.def).
enum class GraphOp : uint8_t {
#define EIN_GRAPH_OP(name, spelling, arity) name,
#include "compiler/graph/ops.def"
#undef EIN_GRAPH_OP
};

/// How dumps spell the op.
std::string_view graph_op_name(GraphOp op);
/// The number of inputs the op takes; -1 for any number.
int graph_op_arity(GraphOp op);

/// input: which argument of the graph.
struct InputAttr {
  int index = 0;
};
/// view: the input's dims split into elementary axes (`split[d]`: the sizes dim d splits into,
/// outermost first); output dim j walks the elementary axes `dims[j]` at once (one axis: a
/// permute; several: a diagonal; none: a new broadcast axis of stride 0). Elementary axes no
/// output dim names must have size 1.
struct ViewAttr {
  std::vector<Shape> split;
  std::vector<std::vector<int>> dims;
};
/// The view's index map: `weights[d][j]` is how far input dim d moves for one step of output
/// dim j (the sum, over the elementary axes output dim j walks that lie in dim d, of the
/// product of the split sizes after each); in indices of the input dim, not bytes.
std::vector<Shape> view_weights(const ViewAttr& a);
/// The strides (in elements) of a view's output, given its input's strides, one per input dim:
/// the one place a ViewAttr becomes strides (execution, cost and fusion all ask here).
Shape view_output_strides(const ViewAttr& a, const Shape& input_strides);
/// reduce: the input dims flagged in `reduced` are combined; the kept dims stay in input
/// order, stored in `out_order` layout (so a permute to that order is free).
struct ReduceAttr {
  Reduction reduction = Reduction::sum;
  std::optional<int64_t> ddof;
  std::vector<bool> reduced;
  std::vector<int> out_order;
};
/// permute: output dim i is input dim order[i].
struct PermuteAttr {
  std::vector<int64_t> order;
};
/// contract: a (labelled a_axes) times b (labelled b_axes), summed over shared axes not in
/// out_axes; the result is labelled out_axes. Its dtype is the operands', or f32 for bf16 or
/// f16 operands: the f32 sums, not rounded to 16 bits (the fusion pass's widen_contractions
/// makes these where a cast to f32 was the only reader).
struct ContractAttr {
  std::vector<int> a_axes, b_axes, out_axes;
};
/// map: a scalar DAG (Kernel IR nodes and body; loads read inputs in order) over the output's
/// dims; input i's dim d is output dim axes[i][d] (size 1 broadcasts).
struct MapAttr {
  std::shared_ptr<const Kernel> body;
  std::vector<std::vector<int>> axes;
};
/// concat: inputs side by side along output dim `dim`; input i contributes its dims
/// [dim, dim + spans[i]) flattened into that one dim (pack's `*`), the other dims match.
struct ConcatAttr {
  int64_t dim = 0;
  std::vector<int64_t> spans;
  /// Per input (empty: none), set by the fusion pass (place_contractions.cpp): the
  /// contraction that writes straight into this input's slot, through the layout nodes
  /// between them, instead of into a buffer of its own that the concat copies; -1 for an
  /// input the concat copies. The executor falls back to the copy when the slot, taken back
  /// through those nodes, is no layout the contraction can write.
  std::vector<int> placed = {};
};
/// slice: every `step`-th index of [start, stop) along `dim` (Python's start:stop:step, step
/// >= 1): ceil((stop - start) / step) of them.
struct SliceAttr {
  int64_t dim = 0, start = 0, stop = 0, step = 1;
};

/// How a fused kernel reads one input buffer: the input's index is an affine function of the
/// kernel's domain index, `index[t] = Σ_d matrix[t][d] · i_d + offset[t]` (so the buffer's
/// stride along domain dim d is Σ_t stride_t · matrix[t][d], in elements). Views, permutes,
/// slices, splits and broadcasts between the input and the kernel fold into this.
struct FusedRead {
  int input = 0;                             ///< which input of the fused node
  std::vector<std::vector<int64_t>> matrix;  ///< [input dim][domain dim]
  Shape offset;                              ///< per input dim
};
/// One output buffer of a fused kernel (the output buffer of the same position). Unplaced (no
/// `strides`): a fresh contiguous tensor of `shape`, the node's result of this position; its
/// dim j walks domain dim `dims[j]` (-1: a size-1 dim). Placed (compiler/fuse/fold_stores.cpp:
/// a concat and the views after it folded into the stores): the store writes element
/// `Σ_d strides[d] · i_d + offset` of a contiguous tensor, this output's own (`into` = -1:
/// `shape` is that tensor's, the node's result of this position) or output `into`'s (this
/// position has no result; `shape` is the stored value's). The placed outputs of one tensor
/// write disjoint elements that cover it.
struct FusedOutput {
  Shape shape;
  DType dtype = DType::f32;
  std::vector<int> dims;
  Shape strides;       ///< placed: per domain dim, in elements of the tensor written
  int64_t offset = 0;  ///< placed: of the element domain index 0 writes
  int into = -1;       ///< placed into output `into`'s tensor; -1: a tensor of its own

  bool placed() const { return !strides.empty(); }
};
/// fused: one Kernel IR kernel holding several nodes of the unfused graph (compiler/fuse/fuse.h).
/// The kernel's domain is fixed; its buffers' strides are filled per call from `reads` (its
/// input buffers in order) and `outputs` (its output buffers in order). The node's shape and
/// dtype are outputs[0]'s; `result` nodes give the others.
struct FusedAttr {
  std::shared_ptr<const Kernel> kernel;
  std::vector<FusedRead> reads;
  std::vector<FusedOutput> outputs;
  std::vector<int> members;  ///< ids, in the unfused graph, of the nodes it holds
  std::vector<int> stored;   ///< per output: the id, in the unfused graph, of the node it is
};
/// attention (compiler/fuse/attention.h): inputs q [B..., T, E], k [B..., S, E], v [B..., S, F]
/// and, when `bias`, a bias [B..., T, S] (a broadcasting view where it repeats; -inf masks);
/// the result [B..., T, F + 1] holds o = softmax(scale · q kᵀ + bias) v in its first F columns
/// and each row's logsumexp of the logits (what the backward reads) in the last. A row whose
/// logits are all -inf gives o = 0 and lse = -inf. attention_grad: inputs q, k, v[, bias], the
/// attention's result and its cotangent (the lse column's is ignored); the result, one dim,
/// holds dq, dk and dv flattened one after another (q's, k's and v's sizes).
struct AttentionAttr {
  double scale = 1;
  bool bias = false;
  /// Grouped-query heads: k and v have 1/kv_repeat of q's heads (the last batch dim), query
  /// head h reading k/v head h / kv_repeat.
  int64_t kv_repeat = 1;
};
/// linear_cross_entropy (compiler/fuse/cross_entropy.h): inputs h [N, D], w [D, V] (any
/// strides) and integer targets [N]; the result [N, 2] holds each row's cross-entropy
/// logsumexp(h w) - (h w)[target] and its logsumexp (what the backward reads), the (N × V)
/// logits never stored. linear_cross_entropy_grad: inputs h, w, targets, that result and its
/// cotangent (the lse column's ignored); two results, each in a buffer of its own (so a
/// weight's gradient is kept without a copy): dh [N, D] is the node's, dw [D, V] is `result`
/// 1 of it.
/// A linear_cross_entropy with CrossEntropyAttr::unit_grads (set by autodiff when the head
/// is differentiated) also computes, from the same logits, the gradients of the sum of its
/// rows' losses: dh [N, D] is its `result` 1, dw [D, V] its `result` 2 (the Liger way: three
/// products of 2·N·D·V for forward and backward instead of four). Its grad node then reads
/// those two as inputs 5 and 6 and, when the rows' cotangent is one value s, returns s times
/// them in their own buffers; any other cotangent recomputes the logits as without them.
struct CrossEntropyAttr {
  bool unit_grads = false;
};
/// quantized_matmul (compiler/decode/quantize_step.h): inputs x [..., k] and a q8_0 or q4_0
/// matrix's codes and scales (include/ein/quantize.h's QuantizedTensor, blocks along the
/// matrix's last axis); the result [..., n] is x @ w (in_out: w [k, n]) or x @ wᵀ (out_in:
/// w [n, k]), each product of x with the exact dequantized weight summed in f32
/// (ein::quantized_matmul). Inference only: it has no gradient.
struct QuantMatmulAttr {
  QuantType type = QuantType::q8_0;
  WeightLayout layout = WeightLayout::in_out;
  Shape weight;  ///< the matrix the codes stand for
};
/// quantized_gather (compiler/decode/quantize_step.h): inputs a q8_0 or q4_0 table's codes and
/// scales (blocks along its rows) and integer indices; the result (indices' shape, then the
/// table's row) holds the rows the indices pick, each value code · scale, in f32: gather(table,
/// indices) of the dequantized table, reading only those rows' codes. Inference only.
struct QuantGatherAttr {
  QuantType type = QuantType::q8_0;
  Shape table;  ///< the table the codes stand for: [rows, width]
};
/// write_row (compiler/decode/decode_step.h): inputs a cache [..., T, ...], a row of its shape
/// but size 1 along `dim`, and an i64 [1] index p in [0, T); the result is the cache with the
/// row written at p along `dim` (a float row rounded to a float cache's dtype: a bf16 cache
/// of f32 keys), written in place: the cache's tensor is the result's (the
/// decode step's key and value caches, which nothing else reads). The index may live on the
/// CPU beside a device's cache (the decoder's does, so a step waits on no copy back). Inference
/// only.
struct WriteRowAttr {
  int64_t dim = 0;
};
/// result: output `index` of the fused node that is its input.
struct ResultAttr {
  int index = 0;
};

/// One node. `shape`/`dtype` describe its result.
struct GraphNode {
  GraphOp op = GraphOp::input;
  std::vector<int> inputs;
  Shape shape;
  DType dtype = DType::f32;
  std::variant<std::monostate, InputAttr, ViewAttr, ReduceAttr, PermuteAttr, ContractAttr, MapAttr,
               ConcatAttr, SliceAttr, FusedAttr, ResultAttr, AttentionAttr, CrossEntropyAttr,
               QuantMatmulAttr, QuantGatherAttr, WriteRowAttr>
      attr;
  std::string note;  ///< set by fuse() on a node it left unfused: why (empty elsewhere)
  /// Where a node that can fail on its data (a gather's indices) came from in a `.ein` script,
  /// so the run-time error points there (null elsewhere); copied with the node.
  SourcePtr source;
  SourceRange range;
};

/// A graph: nodes in topological order and the nodes it returns.
struct Graph {
  std::vector<GraphNode> nodes;
  std::vector<int> outputs;
  std::string origin;  ///< the pattern or expression it came from

  /// Appends a node; returns its id.
  int add(GraphNode node);
};

/// A contraction node's FLOPs: 2 × the product of the sizes of all distinct axes of both
/// operands (one multiply and one add per point of the joint index space).
int64_t contract_flops(const Graph& graph, const GraphNode& contract);

/// A node's attribute as dump() writes it (`[mean dims 1]`; a map's only counts its ops).
std::string attributes(const GraphNode& node);

/// One line per node: `%3 = reduce[mean] %2 : f32[8, 64]`.
std::string dump(const Graph& graph);

/// Per output of `graph` (in order), the node after which its value is final when the graph
/// runs in node order: the later of the node that makes it and the last node that reads it.
/// -1 for a node listed as an output twice. The executor hands outputs over there
/// (exec/execute.h's OutputReady); `ein report`'s ZeRO 2 memory frees gradients there.
std::vector<int> outputs_final_after(const Graph& graph);

/// Where the input of layout node `n` (a permute, a reshape, or a view that moves whole dims:
/// no dim split into several, no broadcast of a dim larger than 1, no diagonal) must lie, as
/// strides for its shape `in`, so that `n` makes a result at `out_strides` (elements); nullopt
/// for any other node, or a reshape whose result at those strides is no view of its input.
/// How a contraction writes straight into a slot of a concat read through such nodes
/// (ConcatAttr::placed): the fusion pass checks with it, the executor places with it.
std::optional<Shape> strides_before_layout(const GraphNode& n, const Shape& in,
                                           const Shape& out_strides);

/// The node whose value node `node` of `graph` is, element for element: through views that
/// neither reorder, split, broadcast nor drop anything (a Linear's `weight` as `x @ weight`
/// traces it); `node` itself when it is no such view.
int identity_source(const Graph& graph, int node);

/// Per node of `graph`: whether one of its outputs depends on it (is it, or reads it).
std::vector<char> read_by_outputs(const Graph& graph);

/// Removes the nodes of `graph` (before fusion) that no output depends on, and numbers its
/// inputs anew over those still read, keeping their order; returns, per input now, the index
/// it had.
std::vector<int> drop_unread(Graph& graph);

/// Checks arities, input order and attribute kinds; throws std::logic_error (a lowering bug).
void verify(const Graph& graph);

}  // namespace ein
