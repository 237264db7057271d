// The thread-local registry behind ein::FlopCounter: which counting scopes are alive on this
// thread, and the hooks the executors call (a node's cost, a kernel launch, a GEMM). When no
// scope is alive every hook is one thread-local load and a branch. It knows nothing of graphs
// or kernels: the compiler computes their costs and hands over plain numbers.
#pragma once

#include <string_view>

#include <ein/flop_counter.h>

namespace ein::detail {

/// Number of FlopCounter scopes alive on this thread.
extern thread_local constinit int t_active_counters;

/// Whether any counting scope is alive on this thread (the cheap check before counting).
inline bool counting() {
  return t_active_counters != 0;
}

/// Registers a scope (FlopCounter's constructor).
void push_counter(FlopCounter* counter);
/// Unregisters a scope (FlopCounter's destructor); scopes may end in any order.
void pop_counter(FlopCounter* counter);

/// Charges `cost` to every scope alive on this thread.
void count_cost(std::string_view origin, CostPhase phase, const CostTotals& cost);

/// Whether a graph node is being counted now (a CountingNode is alive on this thread): its
/// cost covers the kernels it launches, so they add only the launch.
bool in_counted_node();

/// The phase work is charged to when execute() is given none: the innermost CountingPhase
/// or CountingNode, else forward.
CostPhase current_phase();

/// Counts one kernel launch (a generated kernel or a BLAS call) in every scope alive on this
/// thread. Inside a counted node it is charged to that node's origin and phase and adds only
/// the launch; outside one (a kernel run directly, e.g. by a fused nn function or an
/// optimizer) it also charges `cost`, under `origin` and current_phase().
void count_launch(std::string_view origin, const CostTotals& cost);

/// count_launch() for one batched GEMM: 2·batch·m·n·k matmul FLOPs, A and B read and C
/// written once per batch entry (elements of `element_size` bytes), under origin "gemm".
void count_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, size_t element_size);

/// While alive, launches are charged to this origin and phase and count no work of their
/// own (the executor sets it around each node it runs while counting). Nests.
class CountingNode {
 public:
  /// Makes (origin, phase) the current node; `origin` must outlive the object.
  CountingNode(std::string_view origin, CostPhase phase);
  /// Restores the previous node.
  ~CountingNode();
  CountingNode(const CountingNode&) = delete;
  CountingNode& operator=(const CountingNode&) = delete;

 private:
  std::string_view saved_origin_;
  CostPhase saved_phase_;
};

/// While alive, work with no phase of its own is charged to `phase` (e.g. the autograd walk
/// sets a backward phase around the backward functions it runs). Nests.
class CountingPhase {
 public:
  /// Makes `phase` the current phase.
  explicit CountingPhase(CostPhase phase);
  /// Restores the previous phase.
  ~CountingPhase();
  CountingPhase(const CountingPhase&) = delete;
  CountingPhase& operator=(const CountingPhase&) = delete;

 private:
  CostPhase saved_;
};

}  // namespace ein::detail
