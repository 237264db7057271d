// The fusion pass: turns a Graph IR into one whose compute nodes are fused kernels. Elementwise
// chains inline into one scalar DAG; maps feed reductions' bodies; reductions over the same
// trailing row of one domain become the stages of one row kernel whose maps over the domain
// (or over the rows) are its stores; views, permutes, slices, splits and broadcasts fold into
// the kernels' strides. It does not plan contractions (they stay BLAS calls) or pick layouts.
#pragma once

#include <vector>

#include "compiler/graph/graph.h"

namespace ein {

/// The graph with its map and reduce nodes grouped into `fused` nodes (graph.h's FusedAttr,
/// one Kernel IR kernel each; `result` nodes give a multi-output kernel's other results).
/// Guarantees:
///  - the same outputs as `graph`, in order, shapes and dtypes, and the same values up to float
///    rounding (values stay in the kernel's compute type between fused nodes instead of being
///    rounded to each node's dtype; reductions may combine in another order);
///  - every live map, reduce and widening float cast node is a member of exactly one fused
///    node (FusedAttr::members, by its id in `graph`) or is copied as is with GraphNode::note
///    saying why; contract, concat and other casts are copied with a note, except a concat whose
///    pieces are all outputs of one kernel: it folds, with the views after it, into that
///    kernel's stores (placed outputs, graph.h's FusedOutput), and a contraction that only a
///    concat reads writes into its slot (ConcatAttr::placed); a view, permute, slice
///    or splitting reshape folds into the reads of every kernel that reads through it (and is
///    listed among its members), and is copied only where an unfused node or an output needs
///    it; nodes nothing reads are dropped;
///  - the result verifies (graph.h's verify) and runs with execute().
/// `source`, when given, receives per node of the result the node of `graph` it copies, or -1
/// for fused and result nodes (FusedAttr::members lists what those hold); the autograd tape
/// maps each node's cost phase through it.
/// Algorithm (greedy, one walk in topological order) in fuse.cpp.
Graph fuse(const Graph& graph, std::vector<int>* source = nullptr);

}  // namespace ein
