// The save/recompute plans of `ein report` (tools/report.h): the traced step under each
// `ein train --recompute` policy, fused and planned as ein train runs it (api/tape.cpp), its
// activations' liveness peak with and without the gradients, and under ZeRO 2 and 3 each
// rank's peak as it drops the gradients other ranks own.
#pragma once

#include <vector>

#include "compiler/graph/graph.h"
#include "script/script.h"
#include "tools/report.h"

namespace ein::report {

/// Data parallel under ZeRO 2 and 3: what decides when a rank drops a gradient
/// (runtime/dist/gradient_sync.h).
struct ShardedGradients {
  std::vector<int> param_of_input;  ///< per forward input index: its trained parameter, or -1
  std::vector<int> owner;           ///< per trained parameter: the rank that owns it
  std::vector<int> bucket;          ///< per trained parameter: its gradient bucket
  int ranks = 0;
};

/// Builds the plans of every policy into `r.plans` (none, auto, auto within `budget` when the
/// chosen plan is auto with a budget below 1, blocks: the last is the activation-checkpointing
/// what-if), auto within each of kWhatIfBudgets into `r.budget_plans`, and sets the chosen one's
/// numbers: the activation peak, temporaries, totals, the step's peak and the per-rank ZeRO peaks
/// (which need `r.state_bytes`, `r.activation_bytes`, `r.owned_fraction` and the ledger made
/// first). `g` is the traced forward, `needs` its inputs that get gradients, `weights` those that
/// are parameters; `sharded` the data-parallel gradient ownership (nullptr: one device);
/// `casts_to_compute`: the step reads f32 weights through casts to bf16 or fp16.
void add_recompute_plans(Report& r, const Graph& g, const std::vector<bool>& needs,
                         const std::vector<bool>& weights, const script::TraceInfo& trace,
                         Recompute chosen, double budget, const ShardedGradients* sharded,
                         bool casts_to_compute);

}  // namespace ein::report
