// What the pattern-replacing passes (attention.h, cross_entropy.h) share: a graph rewritten
// with the replacement inserted where the matched chain ended, then compacted — nodes nothing
// reads dropped — with the check that the chain really died.
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

/// What replace_all() did.
struct Replacements {
  Graph graph;                                     ///< the rewritten graph
  std::vector<int> source;                         ///< per node: the input graph's node
  int replaced = 0;                                ///< rewrites done
  std::vector<std::pair<int, std::string>> misses; ///< candidates left (input node, why)
};

/// The driver of a pattern-replacing pass: tries `attempt` at every node `candidate` accepts,
/// each node of the input graph at most once; `attempt` returns the rewritten graph with its
/// source map (into the graph it was given) or nullopt with `why`. After a rewrite the scan
/// starts again on the new graph (node ids moved), keeping each node's origin.
Replacements replace_all(
    const Graph& graph, const std::function<bool(const Graph&, int)>& candidate,
    const std::function<std::optional<Graph>(const Graph&, int, std::vector<int>& source,
                                             std::string& why)>& attempt);

}  // namespace ein::detail
