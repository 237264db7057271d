// Fused linear + cross-entropy, recognised by its structure (the Liger / Cut Cross-Entropy
// idea): the pass that finds `logits = contract(h, w)` read only by `cross_entropy` (the
// logsumexp of each row minus the target's logit) and replaces the pair by one
// `linear_cross_entropy` node (graph.h's LinearCrossEntropyAttr) whose kernel never holds the
// (rows × vocabulary) logits or their gradient: it walks tiles of rows × classes with an online
// logsumexp, and its backward (`linear_cross_entropy_grad`, from the VJP rule) recomputes each
// tile and accumulates dh and dw from it. exec/cross_entropy.h runs both.
#pragma once

#include <string>
#include <vector>

#include "compiler/fuse/attention.h"  // AttentionMiss: the same shape of note
#include "compiler/graph/graph.h"

namespace ein {

/// What fuse_linear_cross_entropy() did.
struct CrossEntropyFusion {
  Graph graph;                        ///< the rewritten graph (the input's when nothing matched)
  std::vector<int> source;            ///< per node of `graph`: the node of the input it stands for
  int fused = 0;                      ///< heads replaced
  std::vector<AttentionMiss> misses;  ///< logsumexp rows over a contraction left unfused, and why
};

/// Fewer classes than this stay unfused: their logits are small, and the unfused kernels (one
/// GEMM, one fused row kernel) are faster than tiles recomputed in the backward.
inline constexpr int64_t kMinFusedClasses = 2048;

/// Replaces every match in `graph` with at least kMinFusedClasses classes. What matches, with the logits L = contract(h, w) summing
/// one axis d, w's other axis the classes (the last dim of L; w may be a view of a tied
/// embedding table), h's other axes the rows:
///  - lse = reduce[logsumexp] of L over the classes;
///  - picked = reduce[sum] over the classes of where(index == target, L, 0) (`pick`), the
///    target an integer tensor over the rows;
///  - rows = lse - picked (a map), read by anything;
///  - nothing else reads L, the pick or lse.
CrossEntropyFusion fuse_linear_cross_entropy(const Graph& graph);

}  // namespace ein
