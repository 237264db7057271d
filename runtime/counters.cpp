// The per-thread list of live FlopCounter scopes and the hooks that charge them.
#include "runtime/counters.h"

#include <algorithm>
#include <vector>

namespace ein::detail {
namespace {

/// The scopes alive on this thread, oldest first.
std::vector<FlopCounter*>& scopes() {
  thread_local std::vector<FlopCounter*> s;
  return s;
}

/// The node running now, for launches (set by CountingNode).
thread_local std::string_view t_origin;
thread_local CostPhase t_phase = CostPhase::forward;

}  // namespace

thread_local constinit int t_active_counters = 0;

void push_counter(FlopCounter* counter) {
  scopes().push_back(counter);
  t_active_counters = static_cast<int>(scopes().size());
}

void pop_counter(FlopCounter* counter) {
  auto& s = scopes();
  if (const auto it = std::find(s.rbegin(), s.rend(), counter); it != s.rend())
    s.erase(std::next(it).base());
  t_active_counters = static_cast<int>(s.size());
}

void count_cost(std::string_view origin, CostPhase phase, const CostTotals& cost) {
  for (FlopCounter* c : scopes())
    c->add(origin, phase, cost);
}

void count_kernel_launch() {
  if (!counting()) return;
  CostTotals one;
  one.kernels = 1;
  count_cost(t_origin, t_phase, one);
}

CountingNode::CountingNode(std::string_view origin, CostPhase phase)
    : saved_origin_(t_origin), saved_phase_(t_phase) {
  t_origin = origin;
  t_phase = phase;
}

CountingNode::~CountingNode() {
  t_origin = saved_origin_;
  t_phase = saved_phase_;
}

}  // namespace ein::detail
