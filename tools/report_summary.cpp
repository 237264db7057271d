// `ein report`'s Summary (tools/report_summary.h): FLOPs under several conventions side by
// side, memory per device with data parallelism and each ZeRO stage, micro-batches,
// checkpointing, Korthikanti et al.'s cross-check and the time. Arithmetic only; no text but
// the conventions' sentences and the prose of the sampling and held-out sections.
#include "tools/report_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tools/cli_format.h"

namespace ein::report {

using cli::grouped;
using cli::si;

namespace {

/// The "Sampling" section's prose (Summary::sampling), for a script with fn logits.
Summary::Prose sampling_prose(const Report& r) {
  Summary::Prose p;
  const DecodeCost& d = r.decode;
  p.title = fmt::format("Sampling: a token with the key-value cache (ein sample; fn logits, T = {})",
                        d.context);
  if (d.why.empty()) {
    p.lines.push_back(fmt::format(
        "{} FLOPs a token ({} in contractions), {} of unfused reads and writes; fn logits over "
        "the window (--no-cache) costs {} FLOPs, {:.3g}x more. A token past the window, whose "
        "positions have all shifted, costs {} FLOPs: {}. The caches hold {}: {} tensors (keys "
        "and values of each attention) of {} rows, written one row a token; in bf16 (ein "
        "sample --cache-dtype bf16) {}, and a token {} of reads and writes.",
        grouped(static_cast<double>(d.flops)), grouped(static_cast<double>(d.matmul_flops)),
        si(static_cast<double>(d.bytes), "B"), grouped(static_cast<double>(d.window_flops)),
        d.flops > 0 ? static_cast<double>(d.window_flops) / static_cast<double>(d.flops) : 0.0,
        grouped(static_cast<double>(d.past_window_flops)),
        d.refills ? "the caches refilled from its first T - 1 tokens by a pass that computes no "
                    "logits, then a step"
                  : "the window's pass (a refill of the caches and a step would cost more)",
        si(static_cast<double>(d.cache_bytes), "B"), d.caches, d.context,
        si(static_cast<double>(d.bf16_cache_bytes), "B"),
        si(static_cast<double>(d.bf16_cache_step_bytes), "B")));
    if (d.matrices > 0)
      p.lines.push_back(fmt::format(
          "Its {} weight matrices take {} in f32; sampled from an ein quantize file the step "
          "and the window's pass read them from codes: {} in q8_0, {} in q4_0 (a decode step "
          "is bound by those reads). The weights held while sampling: {} from f32, {} from "
          "q8_0, {} from q4_0 (with the float weights no product reads).",
          d.matrices, si(static_cast<double>(d.matrix_bytes), "B"),
          si(static_cast<double>(d.q8_0_bytes), "B"), si(static_cast<double>(d.q4_0_bytes), "B"),
          si(static_cast<double>(d.f32_held_bytes), "B"),
          si(static_cast<double>(d.q8_0_held_bytes), "B"),
          si(static_cast<double>(d.q4_0_held_bytes), "B")));
  } else {
    p.lines.push_back(fmt::format(
        "no key-value cache: {}. Each token costs fn logits over the window: {} FLOPs.", d.why,
        grouped(static_cast<double>(d.window_flops))));
  }
  return p;
}

/// The held-out section's prose (Summary::held_out), for a train block with eval_data.
Summary::Prose held_out_prose(const Report& r) {
  Summary::Prose p;
  const HeldOutCost& e = r.held_out;
  p.title = "Held-out loss (the train block's eval_data; ein train)";
  if (e.why.empty()) {
    p.lines.push_back(fmt::format(
        "each evaluation scores {} batches ({} tokens) with fn loss's forward: {} FLOPs ({} a "
        "batch{}); {}, {} evaluation{} over the block's {} steps: {} FLOPs, {:.3g}% of the "
        "training's model FLOPs. ein train logs each one's eval_flops.",
        e.batches, grouped(static_cast<double>(e.tokens)), grouped(static_cast<double>(e.flops)),
        grouped(static_cast<double>(e.batches > 0 ? e.flops / e.batches : 0)),
        r.gpus > 1 ? " on all ranks" : "",
        e.every > 0 ? fmt::format("every {} steps and after the last", e.every)
                    : std::string("after the last step only"),
        e.evaluations, e.evaluations == 1 ? "" : "s", e.steps,
        si(static_cast<double>(e.flops) * static_cast<double>(e.evaluations)),
        100 * e.run_fraction));
  } else {
    p.lines.push_back(fmt::format("not priced: {}.", e.why));
  }
  return p;
}

}  // namespace

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
  if (r.decode.has_logits) s.sampling = sampling_prose(r);
  if (r.held_out.present) s.held_out = held_out_prose(r);
  return s;
}

std::string fits_text(bool fits) { return fits ? "fits" : "does NOT fit"; }

}  // namespace ein::report
