// What the pattern-replacing passes (attention.h, cross_entropy.h) share: a graph rewritten
// with each replacement inserted where its matched chain ended, then compacted — nodes nothing
// reads dropped — with the check that every replaced chain really died.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/graph/graph.h"

namespace ein::detail {

/// `out` without the nodes no output reads (graph inputs always kept: their indices are the
/// graph's signature); `src` maps each node of `out` to the node it stands for in the graph
/// before the rewrite and becomes `source` for the result. Nullopt, with `why`, when one of
/// `must_die` (nodes of `out`) is still read: the replaced chain has another reader.
std::optional<Graph> compact(Graph out, const std::vector<int>& src,
                             const std::vector<int>& must_die, std::vector<int>& source,
                             std::string& why);

/// Appends a node to the graph being built, recording the input-graph node it stands for;
/// returns its index.
using AddNode = std::function<int(GraphNode node, int from)>;

/// One match of a pattern-replacing pass, found on the pass's input graph.
struct Site {
  int at = -1;                ///< the node whose value the replacement computes
  std::vector<int> interior;  ///< the matched chain's nodes: nothing else may read them
  /// Appends the replacement to `out` and returns the node that stands for `at`. `id` maps
  /// every input-graph node before `at` to its node in `out`.
  std::function<int(const std::vector<int>& id, const AddNode& add, const Graph& out)> emit;
};

/// What replace_all() did.
struct Replacements {
  Graph graph;                                     ///< the rewritten graph
  std::vector<int> source;                         ///< per node: the input graph's node
  int replaced = 0;                                ///< rewrites done
  std::vector<std::pair<int, std::string>> misses; ///< candidates left (input node, why)
};

/// The driver of a pattern-replacing pass: `match` is tried at every node `candidate`
/// accepts, all on the input graph, and returns the site or nullopt with `why`. Every site
/// is then replaced in one copy of the graph, which is compacted once: a pass costs a few
/// copies of the graph, not one per match (a 256-layer model's 256 attentions had made
/// tracing quadratic in depth). A site stays unfused (a miss, with the reason) when a node of
/// its chain is read outside the chain (by another node, another site's chain, or the caller
/// as an output), or when it overlaps an earlier site. Should a chain still be read once the
/// sites are in place, that site is dropped and the rest are placed again.
Replacements replace_all(
    const Graph& graph, const std::function<bool(const Graph&, int)>& candidate,
    const std::function<std::optional<Site>(const Graph&, int, std::string& why)>& match);

}  // namespace ein::detail
