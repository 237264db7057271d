// `ein report`'s Summary (tools/report_summary.h): FLOPs under several conventions side by
// side, memory per device with data parallelism and each ZeRO stage, micro-batches,
// checkpointing, Korthikanti et al.'s cross-check and the time. Arithmetic only; no text but
// the conventions' sentences.
#include "tools/report_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tools/cli_format.h"

namespace ein::report {

using cli::grouped;
using cli::si;

Summary summarize(const Report& r) {
  Summary s;
  const double tokens = static_cast<double>(r.tokens_per_step);
  const double n = static_cast<double>(r.params_total);
  const double step = static_cast<double>(r.step_flops());
  s.useful_step = step - static_cast<double>(r.causal_flops) / 2;
  s.conventions = {
      "FLOPs count 2 per multiply-add (MACs are half of them); bytes are decimal (1 GB = 1e9 B).",
      r.has_backward
          ? "Backward FLOPs are the graph autodiff builds for the float parameters (data needs no "
            "gradient), split into input-gradient and weight-gradient work; not an assumed 2x."
          : "No backward: autodiff refused the graph (" + r.backward_error + "); forward only.",
      fmt::format("Recomputation (forward values the backward rebuilds instead of saving: {} "
                  "FLOPs, of which the --recompute {} plan's {} and the fused kernels' own {}) "
                  "is excluded from model FLOPs.",
                  grouped(static_cast<double>(r.recompute_flops)),
                  r.plans.empty() ? "auto" : report::plan_name(r.plans[r.chosen]),
                  grouped(static_cast<double>(r.recompute_flops - r.kernel_recompute_flops)),
                  grouped(static_cast<double>(r.kernel_recompute_flops))),
      r.causal_flops > 0
          ? fmt::format("Causal attention: every count here is the full (dense) one, as the "
                        "unfused chain computes it; the fused attention kernel (docs/attention.md) "
                        "skips tiles its mask hides entirely, about half of them. The attention's "
                        "two products (q·kᵀ and the probabilities times v, fused or not) take {} "
                        "FLOPs per step, and counting only the useful (unmasked) half gives {} "
                        "FLOPs per step instead of {} (the 'causal useful-only' row).",
                        grouped(static_cast<double>(r.causal_flops)), grouped(s.useful_step),
                        grouped(step))
          : "Causal attention: no attention score/value contraction (two activations with a t x t "
            "tail) was found, so no useful-only figure is given; all counts are full.",
      fmt::format("Roofline: time = max(FLOPs / peak, bytes / bandwidth) on {} with the dense {} "
                  "peak {} FLOP/s and {} B/s; bytes count each tensor a node reads and writes once.",
                  r.hw_name, r.math, si(r.peak), si(r.bandwidth)),
      "Saved activations are the forward values the backward graph reads, at the traced dtypes, "
      "counted once per tensor that holds the memory.",
      fmt::format("{} per step: {} ({}).", r.unit == "token" ? "Tokens" : "Samples", grouped(tokens),
                  r.tokens_note),
  };
  const auto add = [&](std::string name, double per_step, std::string note) {
    s.flops.push_back({std::move(name), std::move(note), per_step / tokens, per_step});
  };
  add("exact graph (forward + backward)", step, "this report's count");
  if (r.causal_flops > 0)
    add("exact, causal useful-only", s.useful_step, "attention score/value work halved");
  add("exact forward only", static_cast<double>(r.fwd_flops), "");
  add("6N", 6 * n * tokens, "Kaplan et al. 2020");
  add("6N without embeddings", 6 * (n - static_cast<double>(r.params_embedding)) * tokens,
      "embedding: gather tables");
  if (r.layers > 0)
    add(fmt::format("PaLM 6N + 12·L·H·Q·T (L={} H={} Q={} T={})", r.layers, r.heads, r.head_dim, r.seq),
        napkin::palm_flops_per_token(n, static_cast<double>(r.layers), static_cast<double>(r.heads),
                                     static_cast<double>(r.head_dim), static_cast<double>(r.seq)) *
            tokens,
        "Chowdhery et al. 2022, App. B");
  // Memory per device: data parallel replicates the state and splits the batch; ZeRO-3 shards
  // the state too.
  const double act_per_sample = r.activation_peak / static_cast<double>(std::max<int64_t>(r.batch, 1));
  // Per device: the batch is split; a batch that does not split evenly leaves some device
  // ceil(B / N) samples (DistributedSampler pads to that), so every memory line uses that.
  const double batch = static_cast<double>(std::max<int64_t>(r.batch, 1));
  s.uneven = std::fmod(batch, r.gpus) != 0;
  const double activations = s.uneven ? act_per_sample * std::ceil(batch / r.gpus) : r.activation_peak / r.gpus;
  s.per_device = r.state_bytes + activations;
  s.per_device_zero3 = r.state_bytes / r.gpus + activations;
  s.fits = s.per_device <= r.device_memory;
  s.fits_zero3 = s.per_device_zero3 <= r.device_memory;
  if (act_per_sample > 0) {
    s.max_batch = std::max(0.0, std::floor((r.device_memory - r.state_bytes) / act_per_sample));
    s.max_batch_zero3 =
        std::max(0.0, std::floor((r.device_memory - r.state_bytes / r.gpus) / act_per_sample));
  }
  const napkin::ParamMemory pm = napkin::param_memory(r.optimizer_states, *napkin::parse_precision(r.precision));
  for (int stage = 0; stage <= 3; ++stage) {
    const napkin::ZeroMemory z = napkin::zero_memory(pm, n, r.gpus, stage);
    const double total = z.total + activations;
    s.zero.push_back({stage, z.params, z.grads, z.optimizer, activations, total, total <= r.device_memory});
  }
  const double per_device_batch = static_cast<double>(r.batch) / r.gpus;
  if (per_device_batch >= 1 && per_device_batch == std::floor(per_device_batch)) {
    // Powers of two that divide the per-device batch, and the batch itself.
    std::vector<double> sizes;
    for (double m = 1; m < per_device_batch; m *= 2)
      if (std::fmod(per_device_batch, m) == 0) sizes.push_back(m);
    sizes.push_back(per_device_batch);
    for (double m : sizes) {
      const double total = r.state_bytes + act_per_sample * m;
      s.micro.push_back({m, per_device_batch / m, act_per_sample * m, total, total <= r.device_memory});
    }
  }
  if (r.checkpoint_modules > 0) {
    s.checkpoint_activations = r.checkpoint_activations / r.gpus;
    s.checkpoint_total = r.state_bytes + s.checkpoint_activations;
    s.checkpoint_fits = s.checkpoint_total <= r.device_memory;
    s.checkpoint_flops_ratio = (step + static_cast<double>(r.checkpoint_recompute_flops)) / step;
  }
  for (const RecomputePlan& p : r.budget_plans) {
    Summary::Budget b{.budget = p.activation_budget,
                      .activations = static_cast<double>(p.peak) / r.gpus};
    b.total = r.state_bytes + b.activations;
    b.fits = b.total <= r.device_memory;
    b.flops_ratio = (step + static_cast<double>(p.recompute_flops)) / step;
    s.budgets.push_back(b);
  }
  if (r.layers > 0) {
    napkin::TransformerShape shape;
    shape.seq = static_cast<double>(r.seq);
    shape.batch = static_cast<double>(r.batch);
    shape.heads = static_cast<double>(r.heads);
    shape.hidden = static_cast<double>(r.heads * r.head_dim);
    napkin::ActivationMemory per_layer = napkin::activation_memory_per_layer(shape);
    const double layers = static_cast<double>(r.layers);
    s.korthikanti = napkin::ActivationMemory{per_layer.none * layers, per_layer.selective * layers,
                                             per_layer.full * layers};
  }
  if (r.tokens) {
    s.total_flops = step / tokens * *r.tokens;
    s.seconds = s.total_flops / (r.gpus * r.peak * r.mfu);
    s.days = s.seconds / napkin::kSecondsPerDay;
    s.gpu_hours = r.gpus * s.seconds / 3600;
    s.days_6n = napkin::estimate_time(n, *r.tokens, r.gpus, r.peak, r.mfu).days;
    s.tokens_per_param = *r.tokens / n;
    s.chinchilla_tokens = napkin::kChinchillaTokensPerParam * n;
  }
  return s;
}

std::string fits_text(bool fits) { return fits ? "fits" : "does NOT fit"; }

}  // namespace ein::report
