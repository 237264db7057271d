// The activation memory of one training step from liveness: the forward graph and then its
// backward run node by node, unfused, in graph order; each node that makes memory (everything
// but inputs and the no-copy view/reshape/permute/slice) allocates its result when it runs, and
// the result is freed after its last reader. A forward value the backward reads as an input
// (saved for backward) lives until its last backward reader; a value the backward rebuilds
// (include/ein/autograd.h's Recompute) is allocated again where the backward graph rebuilds it. Graph inputs (parameters, the batch,
// cotangents) and the gradients the backward returns are not activations and are not counted:
// the memory ledger has lines of their own for those.
//
// Fusion only removes intermediates, so this is an upper bound on what a fused executor keeps
// live at once, and the saved set is exact (the tape keeps exactly those values).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compiler/autodiff/autodiff.h"
#include "compiler/graph/graph.h"

namespace ein {

/// Live activation bytes over one step.
struct StepMemory {
  int64_t peak = 0;          ///< the most bytes live at once
  bool peak_in_backward = false;
  int peak_node = -1;        ///< the node running at the peak (a forward id, or a backward id)
  int64_t at_boundary = 0;   ///< live when the forward ends: saved values and the outputs
  /// fused_step_memory() only: the peak when the gradients the backward returns count too,
  /// each from when it is made to the end of the step (they become the parameters' .grad):
  /// with the parameters and optimizer state, the allocator's peak in a training step.
  int64_t peak_with_gradients = 0;
  /// Per forward node: the bytes it allocates (0 for inputs and views), for callers that
  /// regroup the step (activation checkpointing what-ifs).
  std::vector<int64_t> forward_bytes;
};

/// The liveness of `forward` followed by `backward` (a Backward of it).
StepMemory step_memory(const Graph& forward, const Backward& backward);

/// The liveness of the step as the executor runs it (exec/execute.h): `forward` and `backward`
/// are fused graphs (fuse.h), `forward` returning the step's `outputs` outputs and then the
/// values the backward reads, `backward` reading those as its inputs `saved_base`, ... (the
/// tape's plan, api/tape.cpp). Every node allocates its results when it runs (a fused kernel
/// all its outputs, which its result nodes hand on) and frees each after its last reader.
/// What the kernels allocate inside (BLAS packing) is not seen.
/// `freed_after`, per backward output: the backward node after which that gradient is freed
/// (a rank's ZeRO 2 drop of a gradient another rank owns, runtime/dist/gradient_sync.h);
/// -1, or no entry: it lives to the end of the step.
StepMemory fused_step_memory(const Graph& forward, int outputs, const Graph& backward,
                             int saved_base, std::span<const int> freed_after = {});

}  // namespace ein
