// add_recompute_plans (tools/report_plans.h).
#include "tools/report_plans.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>

#include "compiler/cost/backward_cost.h"
#include "compiler/cost/step_memory.h"
#include "compiler/pipeline.h"

namespace ein::report {
namespace {

/// The module-list element a scope lies in: "blocks.3" for "blocks.3.attn" (the scope up to
/// its first numeric component), "" outside lists.
std::string list_element(const std::string& scope) {
  size_t start = 0;
  while (start < scope.size()) {
    size_t end = scope.find('.', start);
    if (end == std::string::npos) end = scope.size();
    const std::string part = scope.substr(start, end - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return scope.substr(0, end);
    start = end + 1;
  }
  return "";
}

/// Per backward output, for every rank: the backward node after which the rank drops that
/// gradient (another rank owns it), or -1 (kept). A bucket goes to the exchange when the
/// backward has finished its last gradient and every bucket before it has gone; a bucket
/// with a parameter the backward gives no gradient goes only after the backward.
class GradientDrops {
 public:
  GradientDrops(const Backward& b, const Graph& fused, const ShardedGradients& s) : b_(b), s_(s) {
    const std::vector<int> final_after = outputs_final_after(fused);
    outputs_ = std::min(final_after.size(), b.wrt.size());
    const int buckets = s.bucket.empty() ? 0 : *std::max_element(s.bucket.begin(), s.bucket.end()) + 1;
    done_.assign(static_cast<size_t>(buckets), -1);
    early_.assign(static_cast<size_t>(buckets), 1);
    std::vector<char> has(s.bucket.size(), 0);
    for (size_t k = 0; k < outputs_; ++k) {
      const int p = param_of(k);
      if (p < 0) continue;
      has[static_cast<size_t>(p)] = 1;
      const auto at = static_cast<size_t>(s.bucket[static_cast<size_t>(p)]);
      if (final_after[k] < 0) early_[at] = 0;
      done_[at] = std::max(done_[at], final_after[k]);
    }
    for (size_t p = 0; p < has.size(); ++p)
      if (!has[p]) early_[static_cast<size_t>(s.bucket[p])] = 0;
    for (size_t j = 1; j < done_.size(); ++j) {  // in bucket order
      early_[j] = early_[j] && early_[j - 1];
      done_[j] = std::max(done_[j], done_[j - 1]);
    }
  }

  std::vector<int> of(int rank) const {
    std::vector<int> drops(outputs_, -1);
    for (size_t k = 0; k < outputs_; ++k) {
      const int p = param_of(k);
      if (p < 0 || s_.owner[static_cast<size_t>(p)] == rank) continue;
      const auto at = static_cast<size_t>(s_.bucket[static_cast<size_t>(p)]);
      if (early_[at]) drops[k] = done_[at];
    }
    return drops;
  }

 private:
  int param_of(size_t k) const {
    const int input = b_.wrt[k];
    return input >= 0 && input < static_cast<int>(s_.param_of_input.size())
               ? s_.param_of_input[static_cast<size_t>(input)] : -1;
  }
  const Backward& b_;
  const ShardedGradients& s_;
  size_t outputs_ = 0;
  std::vector<int> done_;
  std::vector<char> early_;
};

/// A save/recompute plan of the step as ein train runs it (api/tape.cpp): the backward under
/// `policy`, fused, after the forward fused with the values the backward reads as extra
/// outputs; its liveness as the executor frees values (compiler/cost/step_memory.h). With
/// `sharded`, also each rank's peak under ZeRO 2 and 3. `budget`: automatic's activation budget.
RecomputePlan recompute_plan(const Graph& g, const std::vector<bool>& needs,
                             const std::vector<bool>& weights, const std::vector<int>& blocks,
                             Recompute policy, double budget,
                             const ShardedGradients* sharded = nullptr,
                             bool save_parameter_casts = true) {
  CompiledGraph c = compile_graph(g, {.differentiate = needs,
                                      .recompute = policy,
                                      .blocks = blocks,
                                      .save_parameter_casts = save_parameter_casts,
                                      .activation_budget = budget,
                                      .fuse = true});
  const Backward& b = *c.backward;
  const BackwardCost bc = backward_cost(b, b.forward, weights);
  Graph with_saved = b.forward;
  with_saved.outputs.insert(with_saved.outputs.end(), b.saved.begin(), b.saved.end());
  const Graph forward = compile_graph(std::move(with_saved), {}).fused;
  RecomputePlan plan;
  plan.policy = policy;
  plan.activation_budget = budget;
  plan.saved_activations = bc.saved_activations;
  plan.recompute_flops = bc.recompute.flops;
  plan.recompute_matmul_flops = bc.recompute.matmul_flops;
  plan.kernel_recompute_flops = bc.kernel_recompute.flops;
  plan.kernel_recompute_matmul_flops = bc.kernel_recompute.matmul_flops;
  const StepMemory m =
      fused_step_memory(forward, static_cast<int>(g.outputs.size()), c.fused, b.saved_base);
  plan.peak = m.peak;
  plan.peak_with_gradients = m.peak_with_gradients;
  if (sharded) {
    // Ranks that drop the same gradients have the same peak (with many ranks, most own one
    // parameter or none): one liveness sweep per distinct set, not per rank.
    const GradientDrops drops(b, c.fused, *sharded);
    std::map<std::vector<int>, int64_t> peak_of;
    for (int rank = 0; rank < sharded->ranks; ++rank) {
      const std::vector<int> d = drops.of(rank);
      auto it = peak_of.find(d);
      if (it == peak_of.end())
        it = peak_of.emplace(d, fused_step_memory(forward, static_cast<int>(g.outputs.size()),
                                                  c.fused, b.saved_base, d)
                                    .peak_with_gradients)
                 .first;
      plan.zero2_peak_with_gradients.push_back(it->second);
    }
  }
  return plan;
}

}  // namespace

void add_recompute_plans(Report& r, const Graph& g, const std::vector<bool>& needs,
                         const std::vector<bool>& weights, const script::TraceInfo& trace,
                         Recompute chosen, double budget, const ShardedGradients* sharded,
                         bool casts_to_compute) {
  // none, auto, auto within the budget (when below 1), blocks: the last is the checkpointing
  // what-if.
  std::vector<std::pair<Recompute, double>> policies{{Recompute::none, 1},
                                                     {Recompute::automatic, 1}};
  if (chosen == Recompute::automatic && budget < 1) policies.emplace_back(chosen, budget);
  policies.emplace_back(Recompute::blocks, 1);
  for (const auto& [policy, plan_budget] : policies) {
    const bool is_chosen =
        policy == chosen && (policy != Recompute::automatic || plan_budget == budget);
    RecomputePlan plan = recompute_plan(g, needs, weights, trace.blocks, policy, plan_budget,
                                        is_chosen ? sharded : nullptr);
    if (is_chosen) {
      r.chosen = static_cast<int>(r.plans.size());
      r.activation_peak = static_cast<double>(plan.peak);
      r.temporaries = r.activation_peak - r.activation_bytes;
      r.total_bytes = r.state_bytes + r.activation_peak;
      r.step_peak = r.state_bytes - r.bytes_of(napkin::StatePart::grads) +
                    static_cast<double>(plan.peak_with_gradients);
      for (LedgerItem& item : r.ledger)
        if (item.what == "temporaries at the liveness peak") item.bytes = r.temporaries;
      r.zero_rank_peak.clear();
      r.zero2_rank_peak.clear();
      r.zero3_rank_peak.clear();
      // ZeRO 3 casts a fetched parameter again in the backward instead of keeping the whole
      // model's bf16 copies through the step (api/tape.cpp): its plan without them.
      double zero3_casts = 0;
      if (casts_to_compute && sharded) {
        const RecomputePlan without =
            recompute_plan(g, needs, weights, trace.blocks, policy, plan_budget, sharded, false);
        zero3_casts = static_cast<double>(plan.peak_with_gradients - without.peak_with_gradients);
      }
      for (size_t rank = 0; rank < r.owned_fraction.size(); ++rank) {
        const double own = r.owned_fraction[rank];
        r.zero_rank_peak.push_back(r.step_peak - r.bytes_of(napkin::StatePart::optimizer) * (1 - own));
        const double dropped =
            rank < plan.zero2_peak_with_gradients.size()
                ? static_cast<double>(plan.peak_with_gradients - plan.zero2_peak_with_gradients[rank])
                : 0.0;
        r.zero2_rank_peak.push_back(r.zero_rank_peak.back() - dropped);
        r.zero3_rank_peak.push_back(r.zero2_rank_peak.back() -
                                    r.bytes_of(napkin::StatePart::params) * (1 - own) - zero3_casts);
      }
    }
    r.plans.push_back(plan);
  }
  std::vector<std::string> lists;  // the module lists, in order of first use
  std::set<std::string> elements;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (i >= static_cast<int>(trace.blocks.size()) || trace.blocks[i] < 0) continue;
    const std::string element = list_element(trace.sources[i].scope);
    const std::string list = element.substr(0, element.rfind('.'));
    if (std::find(lists.begin(), lists.end(), list) == lists.end()) lists.push_back(list);
    elements.insert(element);
  }
  r.checkpoint_scope = fmt::format("{}", fmt::join(lists, ", "));
  r.checkpoint_modules = static_cast<int>(elements.size());
  const RecomputePlan& blocks = r.plans.back();
  r.checkpoint_activations = static_cast<double>(blocks.peak);
  r.checkpoint_recompute_flops = blocks.recompute_flops;
  for (const double what_if : kWhatIfBudgets) {
    // The chosen plan when it is this one (--activation-budget 0.5), else built here.
    const auto same = std::find_if(r.plans.begin(), r.plans.end(), [&](const RecomputePlan& p) {
      return p.policy == Recompute::automatic && p.activation_budget == what_if;
    });
    r.budget_plans.push_back(same != r.plans.end() ? *same
                                                   : recompute_plan(g, needs, weights, trace.blocks,
                                                                    Recompute::automatic, what_if));
  }
}

}  // namespace ein::report
