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

/// The node running now (set by CountingNode), and the phase for work without one.
thread_local std::string_view t_origin;
thread_local CostPhase t_phase = CostPhase::forward;
thread_local int t_nodes = 0;

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

bool in_counted_node() {
  return t_nodes > 0;
}

CostPhase current_phase() {
  return t_phase;
}

void count_launch(std::string_view origin, const CostTotals& cost) {
  if (!counting()) return;
  CostTotals c;
  if (t_nodes == 0) c = cost;
  c.kernels = 1;
  count_cost(t_nodes > 0 ? t_origin : origin, t_phase, c);
}

void count_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, size_t element_size) {
  if (!counting()) return;
  const auto bytes = static_cast<int64_t>(element_size);
  CostTotals c;
  c.flops = c.matmul_flops = 2 * batch * m * n * k;
  c.bytes_read = batch * (m * k + k * n) * bytes;
  c.bytes_written = batch * m * n * bytes;
  count_launch("gemm", c);
}

CountingNode::CountingNode(std::string_view origin, CostPhase phase)
    : saved_origin_(t_origin), saved_phase_(t_phase) {
  t_origin = origin;
  t_phase = phase;
  ++t_nodes;
}

CountingNode::~CountingNode() {
  t_origin = saved_origin_;
  t_phase = saved_phase_;
  --t_nodes;
}

CountingPhase::CountingPhase(CostPhase phase) : saved_(t_phase) {
  t_phase = phase;
}

CountingPhase::~CountingPhase() {
  t_phase = saved_;
}

}  // namespace ein::detail
