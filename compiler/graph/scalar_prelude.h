// A graph's scalar prelude: the 0-dim values it computes from some of its inputs alone. When a
// graph runs many times a step with those inputs the same every time (an optimizer's update,
// once per parameter, reads the step's learning rate and step number), the prelude's kernels
// need to run once a step, not once a call: AdamW's bias corrections, lr / (1 - β1^t) and
// sqrt(1 - β2^t), are a kernel of their own beside the update's (the fusion pass does not
// widen a 0-dim kernel onto the parameter's domain), which would otherwise launch once per
// parameter.
#pragma once

#include <optional>
#include <vector>

#include "compiler/graph/graph.h"

namespace ein {

/// A graph split in two (split_scalar_prelude).
struct ScalarPrelude {
  /// The nodes that depend only on the given inputs and hold one element at most; it takes
  /// the whole graph's inputs (reading the given ones) and returns the values `rest` reads.
  Graph prelude;
  /// The other nodes, taking the whole graph's inputs and then the prelude's outputs, in
  /// order; it returns what the graph returns.
  Graph rest;
};

/// Splits `g` (a fused graph) by its inputs `given` (indices of graph inputs): std::nullopt
/// when no kernel (a fused node) depends on them alone. execute(rest, inputs ++
/// execute(prelude, inputs)) equals execute(g, inputs).
std::optional<ScalarPrelude> split_scalar_prelude(const Graph& g, const std::vector<int>& given);

}  // namespace ein
