// Attention, recognised by its structure: the pass that finds `contract → (scale, mask, bias)
// → softmax over the key axis → contract with v` in a Graph IR, whatever the axis order or the
// spelling of the scale and the mask, and replaces it by one `attention` node (graph.h's
// AttentionAttr) that never materialises the (query × key) matrix. It runs on the forward graph,
// before autodiff, so the backward gets the `attention_grad` node (FlashAttention-2's
// algorithm) from its VJP rule. exec/attention.h runs both.
#pragma once

#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace ein {

/// A contraction with a softmax-like operand that was left unfused: the contraction (a node of
/// the graph given) and the condition that failed.
struct AttentionMiss {
  int node = -1;
  std::string why;
};

/// What fuse_attention() did.
struct AttentionFusion {
  Graph graph;                       ///< the rewritten graph (the input's when nothing matched)
  std::vector<int> source;           ///< per node of `graph`: the node of the input it stands for
  int fused = 0;                     ///< attentions replaced
  std::vector<AttentionMiss> misses; ///< softmaxes over a contraction that did not match
};

/// Replaces every match in `graph`. What matches:
///  - scores = contract(q, k) with one query axis t (q only), one key axis s (k only), one summed
///    axis e (both) and any number of batch axes (both, kept), in any order;
///  - logits = scores through maps that multiply or divide by constants, add terms built only
///    from integer or boolean values and constants, and `where(cond, -inf, ·)` /
///    `where(cond, ·, -inf)` with any condition that does not read the scores (a causal
///    triu/tril mask, a padding mask): logits = scale · scores + bias, bias ∈ ℝ ∪ {-inf};
///  - p = exp(logits - max_s logits) / sum_s exp(logits - max_s logits), softmax over s only;
///  - y = contract(p, v) summing s, with v's other axes the batch axes and one value axis;
///  - nothing but this chain reads scores, logits or p.
/// The bias becomes a map over the dims its sources vary along, broadcast by a view: a causal
/// mask costs t·s values, not b·h·t·s. Bias terms that could carry a gradient (float tensors)
/// are left unfused, so the attention node never owes its bias a gradient.
AttentionFusion fuse_attention(const Graph& graph);

}  // namespace ein
