// The text `ein emit --stage fused` prints: each kernel of a fused graph with the nodes of the
// unfused graph it holds, and each node left as is with the reason. It reads graphs only.
#pragma once

#include <string>

#include "compiler/graph/graph.h"

namespace ein {

/// The listing of `fused` (= fuse(unfused)): a summary line, one block per kernel (its domain
/// and row, stages and stores, the unfused nodes it holds, why some nodes start a new kernel),
/// then the nodes left unfused with their reasons.
std::string fusion_report(const Graph& unfused, const Graph& fused);

/// The number of fused kernels in a graph (fused nodes).
int count_kernels(const Graph& graph);

}  // namespace ein
