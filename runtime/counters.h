// The thread-local registry behind ein::FlopCounter: which counting scopes are alive on this
// thread, and the hooks the executors call (a node's cost, a kernel launch). When no scope is
// alive every hook is one thread-local load and a branch. It knows nothing of graphs: the
// compiler computes a node's cost and hands over plain numbers.
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

/// Counts one kernel launch (a generated kernel or a BLAS call) in every scope alive on this
/// thread, under the origin and phase of the node running now (see CountingNode).
void count_kernel_launch();

/// While alive, launches are charged to this origin and phase (the executor sets it around
/// each node it runs while counting). Nests: the previous node is restored on destruction.
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

}  // namespace ein::detail
