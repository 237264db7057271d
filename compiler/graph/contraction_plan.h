// Contraction-order planning for multi-operand einsums, like opt_einsum's contract_path: picks
// the order of pairwise contractions that minimises FLOPs (exhaustively, by dynamic
// programming, or greedily). It plans on axis ids and sizes only; it neither checks operand
// shapes against each other (sema does) nor runs anything (runtime/blas does).
//
// FLOP conventions. Two counts are reported for the same path:
//  * ein's (`flops`, `ContractionStep::flops`): what the arithmetic costs, the way the lecture
//    notes count a matmul (2·m·n·k):
//      - a pairwise step that sums an axis: 2·prod(sizes of all its axes), one multiply and one
//        add per multiply-add;
//      - a pairwise step that sums nothing (outer, Hadamard, batched broadcast): prod(sizes),
//        one multiply per result element;
//      - summing lone axes out of one operand (and the single-operand einsum `ij->i`):
//        prod(sizes of the operand's distinct axes), one add per element read; a pure
//        diagonal or transpose of a single operand costs 0 (it is a view or a copy).
//  * opt_einsum's (`opt_einsum_flops`, `naive_opt_einsum_flops`), opt_einsum.helpers.flop_count:
//      prod(sizes of all distinct indices in the contraction) · (max(1, n_terms − 1) + (1 if
//      any index is summed else 0)),
//    so a pairwise step counts exactly as ours does, and a one-operand reduction counts 2 per
//    element (ours: 1). The naive count is opt_einsum's one-shot einsum over all operands,
//    whose "summed" flag is opt_einsum's: some index occurs in more than one operand set or is
//    absent from the output. Both counts are kept so that tests compare with opt_einsum
//    figure for figure while the cost model reports what the machine does.
// Since pairwise steps cost the same in both conventions, every strategy minimises that sum.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ein {

/// How plan_contraction searches for the pairwise order.
enum class PathStrategy : uint8_t {
  automatic,            ///< optimal for ≤ 4 operands, dynamic_programming ≤ 16, greedy beyond
  optimal,              ///< exhaustive depth-first search with branch-and-bound on cost
  dynamic_programming,  ///< over operand subsets (Pfeifer, Haegeman, Verstraete 2014)
  greedy,               ///< cheapest-looking pair first, as opt_einsum's 'greedy'
};

/// One pairwise contraction: operands `lhs` and `rhs` (positions in the current operand list,
/// opt_einsum's convention: both are removed and the result is appended at the end).
struct ContractionStep {
  int lhs = 0;                   ///< position of the first operand, lhs < rhs
  int rhs = 0;                   ///< position of the second operand
  std::vector<int> result_axes;  ///< the result's axes: batch, then lhs-only, then rhs-only;
                                 ///< the last step's are the output's, in output order
  std::vector<int> summed_axes;  ///< axes of lhs or rhs that no later operand nor the output has
  int64_t flops = 0;             ///< ein convention: 2 per multiply-add (see the file comment)
};

/// A contraction order with its cost in both FLOP conventions.
struct ContractionPlan {
  std::vector<ContractionStep> steps;  ///< pairwise contractions, in execution order
  /// The steps as opt_einsum's path: (lhs, rhs) per step; (0,) for one operand is not listed.
  std::vector<std::pair<int, int>> path() const;
  int64_t flops = 0;                  ///< total, 2 per multiply-add (ein's convention)
  double opt_einsum_flops = 0;        ///< the same path counted as opt_einsum's flop_count
  double naive_opt_einsum_flops = 0;  ///< one-shot contraction, opt_einsum's count
  int64_t largest_intermediate = 0;   ///< elements of the largest step or reduction result
  PathStrategy strategy_used = PathStrategy::optimal;  ///< what `automatic` resolved to
};

/// Plans the contraction of `operands` (each a list of axis ids; a repeated id is a diagonal)
/// into `output` (distinct axis ids, each present in some operand). `axis_sizes[id]` is the
/// size of axis `id`. Axes found in one operand only and not in the output are summed within
/// that operand first (counted in `flops`, with no step). Throws std::invalid_argument on no
/// operands, an axis id without a size, a negative size, or an output axis that is repeated
/// or in no operand.
ContractionPlan plan_contraction(const std::vector<std::vector<int>>& operands,
                                 const std::vector<int>& output,
                                 const std::vector<int64_t>& axis_sizes,
                                 PathStrategy strategy = PathStrategy::automatic);

}  // namespace ein
