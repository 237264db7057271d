// Internals of the fusion pass shared by its two files: affine index maps through layout nodes
// (fuse_access.cpp), the groups the pass forms (fuse.cpp) and the kernel built from a group
// (fuse_kernel.cpp). Not part of the compiler's interface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace ein::detail {

/// An affine index map: `to[t] = Σ_j m[t][j] · from[j] + o[t]`, integer coefficients.
struct Affine {
  std::vector<std::vector<int64_t>> m;  ///< [to dim][from dim]
  Shape o;                              ///< per to dim
  size_t cols = 0;                      ///< from dims (kept when there are no rows)

  /// The identity over `rank` dims.
  static Affine identity(size_t rank);
  /// this ∘ inner: first `inner`, then this.
  Affine after(const Affine& inner) const;
};

/// How layout node `n` reads its input: input index as a function of its output index, or
/// nullopt when that is not affine (a reshape that merges dims).
std::optional<Affine> layout_access(const GraphNode& n, const Shape& input_shape);

/// Whether the op only relabels memory (view, permute, reshape, slice).
bool is_layout(GraphOp op);

/// An operand as a fused kernel sees it: the node whose value is read (layout nodes walked
/// through) and that node's index as a function of the reader's index.
struct Operand {
  int source = -1;
  Affine access;
  std::vector<int> through;  ///< the layout nodes walked through
};

/// Operand `i` of compute node `n` of `g` (a map's operand relative to the map's output index,
/// a reduce's relative to its input index).
Operand resolve_operand(const Graph& g, int n, size_t i);

/// A fusion group: nodes of the unfused graph computed by one kernel over `domain`, whose last
/// `reduced` dims are the row. place[member][j]: the domain dim its dim j walks (-1: size 1);
/// a reduce's place describes its result (kept dims), in_place its input.
struct Group {
  Shape domain;
  int reduced = 0;
  std::vector<int> members;                       ///< unfused-graph ids, topological order
  std::vector<std::vector<int>> place, in_place;  ///< per member (in_place: reduces only)
  std::vector<int> folded;                        ///< layout nodes read through
  bool dead = false;                              ///< merged into another group
};

/// Whether member `m` of `grp` (a reduce) is a total: it combines a row value over every
/// parallel dim of a row kernel into one value (a mean of per-row losses), stored by a total
/// store after the kernel's rows, so no other member may read it.
bool is_total(const Graph& g, const Group& grp, size_t m);

/// The grouping fuse.cpp computes, per node of the unfused graph; emit_fused() turns it into
/// the fused graph.
struct Grouping {
  std::vector<bool> live;                      ///< an output reads it
  std::vector<int> group_of;                   ///< its group, -1: none
  std::vector<Group> groups;                   ///< dead ones were merged away
  std::vector<std::vector<Operand>> operands;  ///< resolved operands (filled on demand)
  std::vector<std::string> unfused;            ///< why it is left as is
  std::vector<std::string> split;              ///< why it did not join a producer's kernel
};

/// Steps 4-6 of fuse.cpp's algorithm (fuse_emit.cpp): kept layout nodes, stored members, and
/// the new graph in a topological order of the groups.
/// `source`, when given, receives per node of the result the unfused node it copies (-1 for
/// fused and result nodes).
Graph emit_fused(const Graph& g, Grouping& grouping, std::vector<int>* source = nullptr);

/// Step 0 (widen_contractions.cpp): bf16 or f16 contractions read only by a cast to f32
/// (through views and concats that nothing else reads) get dtype f32, as do those views and
/// concats, and the cast becomes a reshape to its own shape (a view), so that node ids stay. The GEMM then writes its f32 sums as they are,
/// without rounding them to 16 bits and widening them again: a --precision bf16 step's weight
/// gradients, which the optimizer takes in f32.
Graph widen_contractions(Graph g);

/// Step 7 (fold_stores.cpp): each concat whose pieces are all outputs of one kernel, read only
/// on their way to it, folded with the views after it into that kernel's stores (placed
/// FusedOutputs). `source` as emit_fused's, updated.
Graph fold_concats_into_stores(Graph g, std::vector<int>* source);

/// Step 8 (place_contractions.cpp): ConcatAttr::placed of each concat, the contractions read
/// only by it (through layout nodes the executor can invert) that write into its slots.
void place_contractions(Graph& g);

/// What fuse.cpp hands the kernel builder: per member whether another kernel, an unfused node
/// or an output reads it (then it is stored), in member order.
struct GroupKernel {
  FusedAttr attr;
  std::vector<int> sources;  ///< per FusedAttr::reads input: the unfused-graph node read
  std::vector<int> stored;   ///< per output: the member stored
};

/// The kernel of `group` (members read each other inline, other values through reads), with
/// a store for each member flagged in `store` (indexed like group.members).
GroupKernel build_group_kernel(const Graph& g, const Group& group, const std::vector<bool>& store);

}  // namespace ein::detail
