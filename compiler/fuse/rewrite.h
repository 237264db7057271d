// What the pattern-replacing passes (attention.h, cross_entropy.h) share: a graph rewritten
// with the replacement inserted where the matched chain ended, then compacted — nodes nothing
// reads dropped — with the check that the chain really died.
#pragma once

#include <optional>
#include <string>
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

}  // namespace ein::detail
