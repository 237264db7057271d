// `ein report --format text|md` (tools/report_summary.h): the Summary and the per-expression
// rows as aligned plain text or as markdown tables. Both share one walk so that they never
// disagree on what is printed.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <string>

#include "tools/cli_format.h"
#include "tools/report_summary.h"

namespace ein::report {

using cli::grouped;
using cli::percent;
using cli::seconds_text;
using cli::si;

std::string render_text(const Report& r, const Summary& s, bool md) {
  std::string out;
  const auto h = [&](const std::string& title) {
    out += md ? fmt::format("\n## {}\n\n", title) : fmt::format("\n{}\n", title);
  };
  const auto line = [&](const std::string& text) { out += (md ? "- " : "  ") + text + "\n"; };
  out += md ? fmt::format("# ein report: {} (`{}`)\n", r.file, r.fn)
            : fmt::format("ein report: {} ({}), {} x {} ({} GB each)\n", r.file, r.fn, grouped(r.gpus),
                          r.hw_name, si(r.device_memory / 1e9));
  if (md)
    out += fmt::format("\nHardware: {} x {} ({} GB each).\n", grouped(r.gpus), r.hw_name,
                       si(r.device_memory / 1e9));
  h("Conventions");
  for (const std::string& c : s.conventions) line(c);

  h("Model");
  const double n = static_cast<double>(r.params_total);
  line(fmt::format("parameters: {} total, {} trainable ({} bytes as stored)", grouped(n),
                   grouped(static_cast<double>(r.params_trainable)), grouped(static_cast<double>(r.param_bytes))));
  line(fmt::format("embedding: {} ({}); non-embedding: {}", grouped(static_cast<double>(r.params_embedding)),
                   r.embedding_names.empty() ? std::string("none") : fmt::format("{}", fmt::join(r.embedding_names, ", ")),
                   grouped(n - static_cast<double>(r.params_embedding))));
  line(r.tied.empty() ? std::string("tied weights: none")
                      : fmt::format("tied weights (counted once): {}", fmt::join(r.tied, "; ")));
  line(fmt::format("graph: {} forward nodes, {} backward nodes", r.forward_nodes, r.backward_nodes));

  h(fmt::format("FLOPs per {} and per step ({} {}s per step)", r.unit,
                grouped(static_cast<double>(r.tokens_per_step)), r.unit));
  if (md) out += fmt::format("| convention | per {} | per step | note |\n|---|---:|---:|---|\n", r.unit);
  for (const Convention& c : s.flops)
    out += md ? fmt::format("| {} | {} | {} | {} |\n", c.name, si(c.per_token), si(c.per_step), c.note)
              : fmt::format("  {:<44} {:>12} {:>12}  {}\n", c.name, si(c.per_token), si(c.per_step), c.note);
  if (r.layers == 0) line("PaLM's 6N + 12·L·H·Q·T omitted: no attention score contraction identified.");
  line(fmt::format("forward {} FLOPs ({} in contractions); backward {} (input gradients {}, weight "
                   "gradients {}); backward/forward = {:.3f}",
                   grouped(static_cast<double>(r.fwd_flops)), grouped(static_cast<double>(r.fwd_matmul_flops)),
                   grouped(static_cast<double>(r.bwd_flops())), grouped(static_cast<double>(r.bwd_input_flops)),
                   grouped(static_cast<double>(r.bwd_weight_flops)),
                   r.fwd_flops ? static_cast<double>(r.bwd_flops()) / static_cast<double>(r.fwd_flops) : 0.0));

  h(r.compute == "fp32"
        ? fmt::format("Memory ledger ({} precision: {} B/param; optimizer {}, from {})", r.precision,
                      r.bytes_per_param, r.optimizer, r.optimizer_from)
        : fmt::format("Memory ledger ({} compute, as ein train --precision {}: {} weights, gradients "
                      "and state, {} B/param; the {} weight copies are saved activations; optimizer "
                      "{}, from {})",
                      r.compute, r.compute, r.precision, r.bytes_per_param, r.compute, r.optimizer,
                      r.optimizer_from));
  if (md) out += "| item | bytes |\n|---|---:|\n";
  for (const report::LedgerItem& item : r.ledger)
    out += md ? fmt::format("| {} | {} |\n", item.what, si(item.bytes, "B"))
              : fmt::format("  {:<48} {:>12}\n", item.what, si(item.bytes, "B"));
  out += md ? fmt::format("| **total** | **{}** |\n\n", si(r.total_bytes, "B"))
            : fmt::format("  {:<48} {:>12}\n", "total", si(r.total_bytes, "B"));
  line(fmt::format("activations: the liveness peak of the step as it runs (fused kernels, each "
                   "value freed after its last reader) is {} ({} saved for backward + {} "
                   "temporaries), near {}",
                   si(r.activation_peak, "B"), si(r.activation_bytes, "B"), si(r.temporaries, "B"), r.peak_at));
  line(fmt::format("a training step's allocator peak (ein train's peak_memory: parameters, optimizer "
                   "state, and the activations with the gradients made so far at their joint "
                   "peak): {}",
                   si(r.step_peak, "B")));
  line(fmt::format("per device, data parallel over {} (state replicated, batch split{}): {} of {}: {}",
                   grouped(r.gpus),
                   s.uneven ? fmt::format("; the batch {} does not split evenly, so a device holds "
                                          "ceil({} / {}) = {}, as DistributedSampler pads",
                                          r.batch, r.batch, grouped(r.gpus),
                                          std::ceil(static_cast<double>(r.batch) / r.gpus))
                            : "",
                   si(s.per_device, "B"), si(r.device_memory, "B"), fits_text(s.fits)));
  line(fmt::format("largest batch per device (activations scale with batch): {}; with ZeRO-3: {}",
                   grouped(s.max_batch), grouped(s.max_batch_zero3)));

  h(fmt::format("What if: ZeRO stages (per device, {} device{})", grouped(r.gpus), r.gpus == 1 ? "" : "s"));
  if (md) out += "| stage | params | grads | optimizer | activations | total | fits |\n|---|---:|---:|---:|---:|---:|---|\n";
  for (const Summary::Zero& z : s.zero)
    out += md ? fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", z.stage, si(z.params, "B"), si(z.grads, "B"),
                            si(z.optimizer, "B"), si(z.activations, "B"), si(z.total, "B"), fits_text(z.fits))
              : fmt::format("  ZeRO-{}  params {:>10}  grads {:>10}  optimizer {:>10}  activations {:>10}  total {:>10}  {}\n",
                            z.stage, si(z.params, "B"), si(z.grads, "B"), si(z.optimizer, "B"),
                            si(z.activations, "B"), si(z.total, "B"), fits_text(z.fits));
  line("stage 0 is plain data parallel; 1 shards the optimizer state (with any fp32 master), 2 also "
       "the gradients, 3 also the parameters (Rajbhandari et al. 2020).");
  if (!r.comm_bytes.empty()) {
    const auto [lo, hi] = std::minmax_element(r.comm_bytes.begin(), r.comm_bytes.end());
    line(fmt::format("communication (mpirun -np {} ein train, ZeRO 0, 1 or 2; ZeRO 3 adds the parameter fetches): each step every rank sends "
                     "{} to {} (rank 0: {} bytes): the gradient exchange and the gather; see docs/distributed.md.",
                     grouped(r.gpus), si(static_cast<double>(*lo), "B"), si(static_cast<double>(*hi), "B"),
                     r.comm_bytes.front()));
    if (!r.zero_rank_peak.empty())
      line(fmt::format("per rank of that run, with B per rank (a global batch of {} x B): peak {} at ZeRO 0; "
                       "rank 0 {} at ZeRO 1 (its share of the optimizer state); {} at ZeRO 2 (the "
                       "others' gradients dropped as the backward hands their {} MiB bucket to the "
                       "exchange); {} at ZeRO 3 (its share of the parameters too: the others are "
                       "fetched as the nodes that read them run).",
                       grouped(r.gpus), si(r.step_peak, "B"), si(r.zero_rank_peak.front(), "B"),
                       si(r.zero2_rank_peak.front(), "B"), r.bucket_mb, si(r.zero3_rank_peak.front(), "B")));
    if (!r.zero3_comm_bytes.empty())
      line(fmt::format("at ZeRO 3 rank 0 sends {} bytes per step: the gradient exchange, then its own "
                       "parameters to the other ranks once for the forward and again for those the "
                       "backward reads.",
                       r.zero3_comm_bytes.front()));
  }

  h("What if: micro-batches with gradient accumulation (per device, plain data parallel)");
  if (s.micro.empty()) line(fmt::format("the batch {} does not split evenly over {} devices.", r.batch, grouped(r.gpus)));
  if (md && !s.micro.empty()) out += "| micro-batch | accumulation steps | activations | total | fits |\n|---:|---:|---:|---:|---|\n";
  for (const Summary::MicroBatch& m : s.micro)
    out += md ? fmt::format("| {} | {} | {} | {} | {} |\n", grouped(m.micro), grouped(m.accumulation),
                            si(m.activations, "B"), si(m.total, "B"), fits_text(m.fits))
              : fmt::format("  micro-batch {:>6} x {:>5} steps  activations {:>10}  total {:>10}  {}\n",
                            grouped(m.micro), grouped(m.accumulation), si(m.activations, "B"), si(m.total, "B"),
                            fits_text(m.fits));

  h("What if: save or recompute (ein train --recompute; * marks the plan above)");
  if (md && !r.plans.empty())
    out += "| plan | saved for backward | recomputed by the plan (FLOPs) | of which contractions | liveness peak |\n"
           "|---|---:|---:|---:|---:|\n";
  for (size_t k = 0; k < r.plans.size(); ++k) {
    const report::RecomputePlan& p = r.plans[k];
    const std::string name =
        fmt::format("{}{}", report::plan_name(p), static_cast<int>(k) == r.chosen ? " *" : "");
    // The plan's own: what fused kernels rebuild inside their backward is the same in every
    // plan and gets its line below.
    const double plan_flops = static_cast<double>(p.recompute_flops - p.kernel_recompute_flops);
    const double plan_matmul =
        static_cast<double>(p.recompute_matmul_flops - p.kernel_recompute_matmul_flops);
    out += md ? fmt::format("| {} | {} | {} | {} | {} |\n", name,
                            si(static_cast<double>(p.saved_activations), "B"), si(plan_flops),
                            si(plan_matmul), si(static_cast<double>(p.peak), "B"))
              : fmt::format(
                    "  {:<10} saved {:>10}  recomputed {:>10} FLOPs ({:>10} in contractions)  "
                    "liveness peak {:>10}\n",
                    name, si(static_cast<double>(p.saved_activations), "B"), si(plan_flops),
                    si(plan_matmul), si(static_cast<double>(p.peak), "B"));
  }
  if (!r.plans.empty() && r.plans[r.chosen].kernel_recompute_flops > 0) {
    const report::RecomputePlan& p = r.plans[r.chosen];
    line(fmt::format("recomputed: forward work the plan repeats in the backward. Besides, in every "
                     "plan, the fused attention's (and cross-entropy's) backward kernels rebuild "
                     "their logits tile by tile instead of reading them saved, as FlashAttention "
                     "does: {} FLOPs ({} in contractions), counted as recomputation too.",
                     si(static_cast<double>(p.kernel_recompute_flops)),
                     si(static_cast<double>(p.kernel_recompute_matmul_flops))));
  }
  line("none saves every forward value a gradient reads; auto (the default) rebuilds elementwise "
       "values from saved ones when that saves nothing new; blocks checkpoints each module of a "
       "list (its values other code reads are saved, the rest recomputed in its backward).");
  if (!r.plans.empty() && r.plans[r.chosen].activation_budget < 1)
    line(
        fmt::format("{} is auto within --activation-budget {:g}: the forward saves at most "
                    "that fraction of auto's bytes, the backward recomputing contractions (a "
                    "matmul's output, a bias or residual added to it) for the rest, the fewest "
                    "FLOPs per byte first.",
                    report::plan_name(r.plans[r.chosen]), r.plans[r.chosen].activation_budget));
  if (r.checkpoint_modules > 0)
    line(fmt::format("checkpointing each of the {} modules of {} (--recompute blocks): activations {} per "
                     "device instead of {}; total {}: {}; {:.3g}x the model FLOPs per step ({} "
                     "recomputed)",
                     r.checkpoint_modules, r.checkpoint_scope, si(s.checkpoint_activations, "B"),
                     si(r.activation_peak / r.gpus, "B"), si(s.checkpoint_total, "B"), fits_text(s.checkpoint_fits),
                     s.checkpoint_flops_ratio, si(static_cast<double>(r.checkpoint_recompute_flops))));
  else
    line("the model has no list of modules (blocks.0, blocks.1, ...) to checkpoint.");
  if (s.korthikanti)
    line(fmt::format("cross-check, Korthikanti et al. 2022 for L={} s={} b={} h={} a={} (16-bit "
                     "activations, layers only): {} without recomputation, {} selective, {} full; "
                     "this graph's saved activations at its traced dtypes: {}",
                     r.layers, r.seq, r.batch, r.heads * r.head_dim, r.heads, si(s.korthikanti->none, "B"),
                     si(s.korthikanti->selective, "B"), si(s.korthikanti->full, "B"), si(r.activation_bytes, "B")));

  if (!r.budget_plans.empty()) {
    h("What if: an activation budget (ein train --activation-budget F, with --recompute auto)");
    if (md)
      out +=
          "| budget | saved for backward | recomputed by the plan (FLOPs) | of which contractions "
          "| activations per device | total | | FLOPs per step |\n"
          "|---|---:|---:|---:|---:|---:|---|---:|\n";
    for (size_t k = 0; k < r.budget_plans.size(); ++k) {
      const report::RecomputePlan& p = r.budget_plans[k];
      const Summary::Budget& b = s.budgets[k];
      const double plan_flops = static_cast<double>(p.recompute_flops - p.kernel_recompute_flops);
      const double plan_matmul =
          static_cast<double>(p.recompute_matmul_flops - p.kernel_recompute_matmul_flops);
      const std::string saved = si(static_cast<double>(p.saved_activations), "B");
      out += md ? fmt::format("| {:g} | {} | {} | {} | {} | {} | {} | {:.3g}x |\n", b.budget, saved,
                              si(plan_flops), si(plan_matmul), si(b.activations, "B"),
                              si(b.total, "B"), fits_text(b.fits), b.flops_ratio)
                : fmt::format(
                      "  budget {:<5g} saved {:>10}  recomputed {:>10} FLOPs ({:>10} in "
                      "contractions)  activations {:>10}  total {:>10}  {}  {:.3g}x "
                      "FLOPs\n",
                      b.budget, saved, si(plan_flops), si(plan_matmul), si(b.activations, "B"),
                      si(b.total, "B"), fits_text(b.fits), b.flops_ratio);
    }
    line(
        "the forward saves at most that fraction of auto's bytes; the backward recomputes "
        "contractions for the rest (a matmul's output, a bias or residual added to it), the "
        "fewest FLOPs per byte first, and none from another's rebuild. Activations are the "
        "step's liveness peak, which also holds what the backward rebuilds while it reads it; "
        "FLOPs per step count all recomputation against the model FLOPs.");
  }

  h(
      fmt::format("What if: inference weights (one {}: the weights alone; decode at batch 1 reads "
                  "each once)",
                  r.hw_name));
  if (md)
    out +=
        "| format | weights | smaller by | fits | decode, batch 1, at most | as stored "
        "|\n|---|---:|---:|---|---:|---|\n";
  for (const InferenceWeights& w : r.inference) {
    const double bytes = static_cast<double>(w.bytes);
    const std::string ratio = fmt::format("{:.3g}x", w.smaller_by);
    const std::string decode = si(w.decode_bound) + " tok/s";
    const std::string fits = fits_text(w.fits);
    const std::string how =
        w.quantized_tensors + w.kept_tensors == 0
            ? fmt::format("every float parameter in {:g} byte{}", w.bits_per_weight / 8,
                          w.bits_per_weight == 8 ? "" : "s")
            : fmt::format(
                  "ein quantize --type {}: {} tensors ({} weights) in blocks, {} kept as stored "
                  "({})",
                  w.format, w.quantized_tensors, grouped(static_cast<double>(w.quantized_params)),
                  w.kept_tensors, si(static_cast<double>(w.kept_bytes), "B"));
    out += md ? fmt::format("| {} | {} | {} | {} | {} | {} |\n", w.format, si(bytes, "B"), ratio,
                            fits, decode, how)
              : fmt::format("  {:<5} {:>10}  {:>6}  {:<12} decode <= {:>14}  {}\n", w.format,
                            si(bytes, "B"), ratio, fits, decode, how);
  }
  line(
      fmt::format("smaller than the {} the parameters take as stored; decode at batch 1 is "
                  "memory-bound: {} / the weights' bytes, the KV cache's reads excluded. "
                  "docs/quantization.md has what q8_0 and q4_0 cost in loss.",
                  si(static_cast<double>(r.param_bytes), "B"), si(r.bandwidth, "B/s")));

  for (const std::optional<Summary::Prose>* prose : {&s.sampling, &s.held_out})
    if (*prose) {
      h((*prose)->title);
      for (const std::string& l : (*prose)->lines) line(l);
    }

  h("Time");
  if (r.tokens) {
    line(fmt::format("{} tokens: {} FLOPs (exact graph count), {} GPUs at {} dense {} FLOP/s, MFU {}",
                     si(*r.tokens), si(s.total_flops), grouped(r.gpus), r.math, si(r.peak), r.mfu));
    line(fmt::format("{:.4g} days ({:.4g} days by 6N·D), {:.4g} GPU-hours", s.days, s.days_6n, s.gpu_hours));
    line(fmt::format("Chinchilla: {:.3g} tokens per parameter (compute-optimal about 20: {} tokens)",
                     s.tokens_per_param, si(s.chinchilla_tokens)));
  } else {
    line("give --tokens T for days, GPU-hours and the Chinchilla check.");
  }

  h("Not counted");
  if (r.uncounted.empty()) line("every node has a cost rule and is counted.");
  for (const std::string& u : r.uncounted) line("WARNING: " + u);

  h("Per expression (grouped by module, then source location)");
  const double step = static_cast<double>(r.step_flops());
  std::string scope = "\x01";
  if (md)
    out += "| location | expression | shape | fwd FLOPs | bwd input | bwd weight | bytes | FLOP/B | "
           "bound | time | saved | share | contraction FLOPs |\n|---|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|\n";
  for (const Row& row : r.rows) {
    if (row.scope != scope) {
      scope = row.scope;
      const std::string name = scope.empty() ? "(top level)" : scope;
      out += md ? fmt::format("| **{}** | | | | | | | | | | | | |\n", name) : fmt::format("\n  [{}]\n", name);
    }
    const double intensity = row.bytes() ? static_cast<double>(row.flops()) / static_cast<double>(row.bytes()) : 0;
    std::string text = row.text;
    if (row.causal_flops) text += " [attention: full count]";
    if (md) {
      std::string escaped;
      for (char c : text) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
      out += fmt::format("| {} | `{}` | {} = {} | {} | {} | {} | {} | {:.3g} | {} | {} | {} | {} | {} |\n",
                         row.location, escaped, row.symbolic_shape, row.shape, si(static_cast<double>(row.fwd_flops)),
                         si(static_cast<double>(row.bwd_input_flops)), si(static_cast<double>(row.bwd_weight_flops)),
                         si(static_cast<double>(row.bytes()), "B"), intensity,
                         row.memory_bound ? "memory" : "compute", seconds_text(row.seconds),
                         si(static_cast<double>(row.saved_bytes), "B"), percent(static_cast<double>(row.flops()), step),
                         row.formula);
    } else {
      out += fmt::format("    {}  {}\n      {:<22} fwd {:>10}  bwd in {:>10} w {:>10}  {:>10}  {:>7.3g} FLOP/B "
                         "{:<7} {:>9}  saved {:>10}  {:>6}\n",
                         row.location, text, row.shape, si(static_cast<double>(row.fwd_flops)),
                         si(static_cast<double>(row.bwd_input_flops)), si(static_cast<double>(row.bwd_weight_flops)),
                         si(static_cast<double>(row.bytes()), "B"), intensity,
                         row.memory_bound ? "memory" : "compute", seconds_text(row.seconds),
                         si(static_cast<double>(row.saved_bytes), "B"), percent(static_cast<double>(row.flops()), step));
      out += fmt::format("      shape {}", row.symbolic_shape);
      if (!row.formula.empty()) out += fmt::format("; contraction FLOPs {} = {}", row.formula, row.formula_numeric);
      out += "\n";
    }
  }
  return out;
}

}  // namespace ein::report
