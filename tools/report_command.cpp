// `ein report` (tools/report_command.h): reads the flags, has tools/report.h account for the
// script, derives the summary (conventions side by side, what fits, time) and prints it in
// one of four formats. Every format prints the same derived numbers (one Summary).
#include "tools/report_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ein/diagnostic.h>
#include "ein/errors.h"
#include "tools/report.h"
#include "tools/script_command.h"

namespace ein::cli {
namespace {

using report::Report;
using report::Row;

struct ReportFlags {
  std::string file, fn = "train.loss", hw = "h100", math = "bf16", gpus = "1", mfu = "0.4";
  std::string tokens, optimizer, precision, format = "text", output;
  std::vector<std::string> sets;
  int depth = -1;
};

double parse_number(const std::string& text, const char* flag) {
  std::string body = text;
  double scale = 1;
  if (!body.empty()) {
    const char s = body.back();
    scale = s == 'k' || s == 'K' ? 1e3 : s == 'M' ? 1e6 : s == 'B' || s == 'G' ? 1e9 : s == 'T' ? 1e12 : 1;
    if (scale != 1) body.pop_back();
  }
  double v = 0;
  const char* end = body.data() + body.size();
  const auto [ptr, ec] = std::from_chars(body.data(), end, v);
  if (body.empty() || ec != std::errc() || ptr != end || !std::isfinite(v * scale) || !(v > 0))
    throw RuntimeError(fmt::format("{}: expected a positive number such as 300e9, 300B or 0.4, got '{}'",
                                   flag, text));
  return v * scale;
}

// ---- numbers as text ----

std::string grouped(double v) {
  const std::string digits = fmt::format("{:.0f}", std::fabs(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return (v < 0 ? "-" : "") + out;
}

/// 4 significant digits with an SI prefix: 1.244e8 -> "124.4 M".
std::string si(double v, const char* unit = "") {
  static constexpr const char* kPrefix[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
  int p = 0;
  double a = std::fabs(v);
  while (a >= 1000 && p < 8) {
    a /= 1000;
    v /= 1000;
    ++p;
  }
  const std::string sep = (*unit || p) ? " " : "";
  return fmt::format("{:.4g}{}{}{}", v, sep, kPrefix[p], unit);
}

std::string percent(double part, double whole) {
  return whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-";
}

std::string seconds_text(double s) {
  if (s >= 1) return fmt::format("{:.3g} s", s);
  if (s >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  return fmt::format("{:.3g} us", s * 1e6);
}

// ---- the summary every format prints ----

/// One FLOP convention: per token and per step.
struct Convention {
  std::string name, note;
  double per_token = 0, per_step = 0;
};

struct Summary {
  std::vector<std::string> conventions;  ///< the header's lines
  std::vector<Convention> flops;         ///< side by side
  double useful_step = 0;                ///< exact count with causal attention halved
  double per_device = 0, per_device_zero3 = 0;
  bool fits = false, fits_zero3 = false;
  double max_batch = 0, max_batch_zero3 = 0;  ///< per device
  /// Per device under each ZeRO stage 0 (plain data parallel) to 3.
  struct Zero {
    int stage = 0;
    double params = 0, grads = 0, optimizer = 0, activations = 0, total = 0;
    bool fits = false;
  };
  std::vector<Zero> zero;
  /// Per device at a micro-batch size, with the accumulation steps that keep the batch.
  struct MicroBatch {
    double micro = 0, accumulation = 0, activations = 0, total = 0;
    bool fits = false;
  };
  std::vector<MicroBatch> micro;
  // activation checkpointing of each module-list element (per device, plain data parallel)
  double checkpoint_activations = 0, checkpoint_total = 0, checkpoint_flops_ratio = 0;
  bool checkpoint_fits = false;
  /// Korthikanti et al.'s activation bytes for the attention shape found (16-bit, all layers);
  /// absent when no attention was identified.
  std::optional<napkin::ActivationMemory> korthikanti;
  // time (with --tokens)
  double total_flops = 0, seconds = 0, days = 0, gpu_hours = 0, days_6n = 0;
  double tokens_per_param = 0, chinchilla_tokens = 0;
};

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
      fmt::format("Recomputation (forward values replicated into the backward graph, {} FLOPs) is "
                  "excluded from model FLOPs.",
                  grouped(static_cast<double>(r.recompute_flops))),
      r.causal_flops > 0
          ? fmt::format("Causal attention: ein's graph computes the full masked score matrix, so "
                        "every count here is the full one; the attention score and value "
                        "contractions (two activations: q·kᵀ with a t x t result, and the one reading its "
                        "probabilities) take {} "
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
      fmt::format("Tokens per step: {} ({}).", grouped(tokens), r.tokens_note),
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
  const double activations = r.activation_peak / r.gpus;  // per device: the batch is split
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
    s.checkpoint_activations = (r.checkpoint_activations + r.temporaries) / r.gpus;
    s.checkpoint_total = r.state_bytes + s.checkpoint_activations;
    s.checkpoint_fits = s.checkpoint_total <= r.device_memory;
    s.checkpoint_flops_ratio = (step + static_cast<double>(r.checkpoint_recompute_flops)) / step;
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

// ---- text and markdown ----

std::string text_or_md(const Report& r, const Summary& s, bool md) {
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

  h(fmt::format("FLOPs per token and per step ({} tokens per step)", grouped(static_cast<double>(r.tokens_per_step))));
  if (md) out += "| convention | per token | per step | note |\n|---|---:|---:|---|\n";
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

  h(fmt::format("Memory ledger ({} precision: {} B/param; optimizer {}, from {})", r.precision,
                r.bytes_per_param, r.optimizer, r.optimizer_from));
  if (md) out += "| item | bytes |\n|---|---:|\n";
  for (const report::LedgerItem& item : r.ledger)
    out += md ? fmt::format("| {} | {} |\n", item.what, si(item.bytes, "B"))
              : fmt::format("  {:<48} {:>12}\n", item.what, si(item.bytes, "B"));
  out += md ? fmt::format("| **total** | **{}** |\n\n", si(r.total_bytes, "B"))
            : fmt::format("  {:<48} {:>12}\n", "total", si(r.total_bytes, "B"));
  line(fmt::format("activations: the liveness peak of the step executed node by node is {} ({} "
                   "saved for backward + {} temporaries), at {}",
                   si(r.activation_peak, "B"), si(r.activation_bytes, "B"), si(r.temporaries, "B"), r.peak_at));
  line(fmt::format("per device, data parallel over {} (state replicated, batch split): {} of {}: {}",
                   grouped(r.gpus), si(s.per_device, "B"), si(r.device_memory, "B"), fits_text(s.fits)));
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

  h("What if: micro-batches with gradient accumulation (per device, plain data parallel)");
  if (s.micro.empty()) line(fmt::format("the batch {} does not split evenly over {} devices.", r.batch, grouped(r.gpus)));
  if (md && !s.micro.empty()) out += "| micro-batch | accumulation steps | activations | total | fits |\n|---:|---:|---:|---:|---|\n";
  for (const Summary::MicroBatch& m : s.micro)
    out += md ? fmt::format("| {} | {} | {} | {} | {} |\n", grouped(m.micro), grouped(m.accumulation),
                            si(m.activations, "B"), si(m.total, "B"), fits_text(m.fits))
              : fmt::format("  micro-batch {:>6} x {:>5} steps  activations {:>10}  total {:>10}  {}\n",
                            grouped(m.micro), grouped(m.accumulation), si(m.activations, "B"), si(m.total, "B"),
                            fits_text(m.fits));

  h("What if: activation checkpointing");
  if (r.checkpoint_modules > 0)
    line(fmt::format("checkpointing each of the {} modules of {} (keep its inputs, recompute it in the "
                     "backward): activations {} per device instead of {}; total {}: {}; {:.3g}x the model "
                     "FLOPs per step ({} recomputed)",
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

// ---- JSON (keys documented in docs/report.md) ----

nlohmann::json to_json(const Report& r, const Summary& s) {
  using nlohmann::json;
  json j;
  j["file"] = r.file;
  j["fn"] = r.fn;
  j["conventions"] = s.conventions;
  j["hardware"] = {{"name", r.hw_name}, {"math", r.math}, {"peak_flops", r.peak},
                   {"memory_bandwidth", r.bandwidth}, {"memory_bytes", r.device_memory}, {"gpus", r.gpus}};
  j["params"] = {{"total", r.params_total},
                 {"trainable", r.params_trainable},
                 {"embedding", r.params_embedding},
                 {"non_embedding", r.params_total - r.params_embedding},
                 {"embedding_names", r.embedding_names},
                 {"tied", r.tied},
                 {"bytes", r.param_bytes}};
  j["step"] = {{"batch", r.batch}, {"tokens", r.tokens_per_step}};
  json conventions = json::array();
  for (const Convention& c : s.flops)
    conventions.push_back({{"name", c.name}, {"per_token", c.per_token}, {"per_step", c.per_step}, {"note", c.note}});
  const double tokens = static_cast<double>(r.tokens_per_step);
  j["flops"] = {{"forward", r.fwd_flops},
                {"forward_matmul", r.fwd_matmul_flops},
                {"backward", r.bwd_flops()},
                {"backward_input", r.bwd_input_flops},
                {"backward_weight", r.bwd_weight_flops},
                {"recompute", r.recompute_flops},
                {"per_step", r.step_flops()},
                {"per_token", static_cast<double>(r.step_flops()) / tokens},
                {"attention_full", r.causal_flops},
                {"causal_useful_per_step", s.useful_step},
                {"six_n_per_token", 6.0 * static_cast<double>(r.params_total)},
                {"six_n_non_embedding_per_token", 6.0 * static_cast<double>(r.params_total - r.params_embedding)},
                {"conventions", conventions}};
  if (r.layers > 0)
    j["flops"]["palm_per_token"] = napkin::palm_flops_per_token(
        static_cast<double>(r.params_total), static_cast<double>(r.layers), static_cast<double>(r.heads),
        static_cast<double>(r.head_dim), static_cast<double>(r.seq));
  j["attention"] = {{"layers", r.layers}, {"heads", r.heads}, {"head_dim", r.head_dim}, {"seq", r.seq}};
  j["memory"] = {{"params", r.bytes_of(napkin::StatePart::params)},
                 {"grads", r.bytes_of(napkin::StatePart::grads)},
                 {"optimizer", r.bytes_of(napkin::StatePart::optimizer)},
                 {"activations", r.activation_bytes},
                 {"temporaries", r.temporaries},
                 {"activation_peak", r.activation_peak},
                 {"peak_at", r.peak_at},
                 {"saved_total", r.saved_total},
                 {"total", r.total_bytes},
                 {"bytes_per_param", r.bytes_per_param},
                 {"optimizer_name", r.optimizer},
                 {"optimizer_states", r.optimizer_states},
                 {"optimizer_from", r.optimizer_from},
                 {"precision", r.precision},
                 {"per_device", s.per_device},
                 {"per_device_zero3", s.per_device_zero3},
                 {"fits", s.fits},
                 {"fits_zero3", s.fits_zero3},
                 {"max_batch_per_device", s.max_batch},
                 {"max_batch_per_device_zero3", s.max_batch_zero3}};
  json zero = json::array(), micro = json::array();
  for (const Summary::Zero& z : s.zero)
    zero.push_back({{"stage", z.stage}, {"params", z.params}, {"grads", z.grads}, {"optimizer", z.optimizer},
                    {"activations", z.activations}, {"total", z.total}, {"fits", z.fits}});
  for (const Summary::MicroBatch& m : s.micro)
    micro.push_back({{"micro_batch", m.micro}, {"accumulation", m.accumulation}, {"activations", m.activations},
                     {"total", m.total}, {"fits", m.fits}});
  j["memory"]["zero"] = zero;
  j["memory"]["micro_batches"] = micro;
  if (s.korthikanti)
    j["memory"]["korthikanti"] = {{"none", s.korthikanti->none}, {"selective", s.korthikanti->selective},
                                  {"full", s.korthikanti->full}};
  if (r.checkpoint_modules > 0)
    j["memory"]["checkpointing"] = {{"scope", r.checkpoint_scope},
                                    {"modules", r.checkpoint_modules},
                                    {"activations", s.checkpoint_activations},
                                    {"total", s.checkpoint_total},
                                    {"fits", s.checkpoint_fits},
                                    {"recompute_flops", r.checkpoint_recompute_flops},
                                    {"flops_ratio", s.checkpoint_flops_ratio}};
  json dims = json::object();
  for (const script::DimInfo& d : r.dims) dims[d.name] = d.value;
  j["dims"] = dims;
  j["structural_dims"] = r.structural_dims;
  if (r.tokens)
    j["time"] = {{"tokens", *r.tokens},        {"total_flops", s.total_flops}, {"seconds", s.seconds},
                 {"days", s.days},             {"days_6nd", s.days_6n},        {"gpu_hours", s.gpu_hours},
                 {"mfu", r.mfu},               {"tokens_per_param", s.tokens_per_param},
                 {"chinchilla_tokens", s.chinchilla_tokens}};
  json rows = json::array();
  for (const Row& row : r.rows)
    rows.push_back({{"scope", row.scope},
                    {"location", row.location},
                    {"text", row.text},
                    {"shape", row.shape},
                    {"symbolic_shape", row.symbolic_shape},
                    {"formula", row.formula},
                    {"formula_numeric", row.formula_numeric},
                    {"nodes", row.nodes},
                    {"forward_flops", row.fwd_flops},
                    {"forward_matmul_flops", row.fwd_matmul_flops},
                    {"backward_input_flops", row.bwd_input_flops},
                    {"backward_weight_flops", row.bwd_weight_flops},
                    {"bytes", row.bytes()},
                    {"intensity", row.bytes() ? static_cast<double>(row.flops()) / static_cast<double>(row.bytes()) : 0.0},
                    {"seconds", row.seconds},
                    {"bound", row.memory_bound ? "memory" : "compute"},
                    {"saved_bytes", row.saved_bytes},
                    {"attention_full_flops", row.causal_flops},
                    {"share", r.step_flops() ? static_cast<double>(row.flops()) / static_cast<double>(r.step_flops()) : 0.0}});
  j["rows"] = rows;
  j["uncounted"] = r.uncounted;
  return j;
}

// ---- HTML: one file, inline CSS and SVG, no scripts or external resources ----

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// Log-log roofline: x intensity (FLOP/B), y attained FLOP/s (flops / roofline time).
std::string roofline_svg(const Report& r) {
  constexpr double W = 640, H = 400, L = 60, B = 40;
  const double xmin = 1e-2, xmax = 1e4, ymin = r.peak * 1e-6, ymax = r.peak * 2;
  const auto x = [&](double v) { return L + (std::log10(v) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin)) * (W - L - 10); };
  const auto y = [&](double v) { return H - B - (std::log10(v) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin)) * (H - B - 10); };
  std::string s = fmt::format(R"(<svg id="roofline" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)", W, H, W, H);
  s += fmt::format(R"(<rect x="{}" y="10" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)", L, W - L - 10, H - B - 10);
  const double ridge = r.peak / r.bandwidth;
  s += fmt::format(R"(<polyline fill="none" stroke="#c33" stroke-width="2" points="{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}"/>)",
                   x(xmin), y(std::max(ymin, xmin * r.bandwidth)), x(ridge), y(r.peak), x(xmax), y(r.peak));
  s += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" fill="#c33">{} peak {} FLOP/s, {} B/s</text>)", x(ridge) + 4, y(r.peak) - 4, r.math, si(r.peak), si(r.bandwidth));
  for (double v = xmin; v <= xmax * 1.01; v *= 10)
    s += fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10" text-anchor="middle">{:g}</text>)", x(v), H - B + 14, v);
  for (double v = ymin; v <= ymax; v *= 100)
    s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10" text-anchor="end">{}</text>)", L - 4, y(v) + 3, si(v));
  s += fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">arithmetic intensity (FLOP/B), forward + backward</text>)", (W + L) / 2, H - 8);
  for (const Row& row : r.rows) {
    if (row.flops() == 0 || row.bytes() == 0 || row.seconds <= 0) continue;
    const double i = std::clamp(static_cast<double>(row.flops()) / static_cast<double>(row.bytes()), xmin, xmax);
    const double f = std::clamp(static_cast<double>(row.flops()) / row.seconds, ymin, ymax);
    s += fmt::format(R"(<circle class="point" cx="{:.1f}" cy="{:.1f}" r="3" fill="{}" fill-opacity="0.6"><title>{} {} ({})</title></circle>)",
                     x(i), y(f), row.memory_bound ? "#36c" : "#393", escape(row.scope), escape(row.text), escape(row.location));
  }
  return s + "</svg>";
}

/// The ledger as one stacked horizontal bar, with the device memory marked.
std::string memory_svg(const Report& r) {
  constexpr double W = 640, H = 120, L = 10;
  const double scale = (W - 2 * L) / std::max(r.total_bytes, r.device_memory);
  static constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948"};
  std::string s = fmt::format(R"(<svg id="memory" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)", W, H, W, H);
  double at = L;
  int k = 0;
  std::string legend;
  for (const report::LedgerItem& item : r.ledger) {
    const double w = item.bytes * scale;
    s += fmt::format(R"(<rect class="segment" x="{:.1f}" y="10" width="{:.1f}" height="40" fill="{}"><title>{}: {}</title></rect>)", at, w, kColors[k % 6], escape(item.what), si(item.bytes, "B"));
    legend += fmt::format(R"(<rect x="{}" y="{}" width="10" height="10" fill="{}"/><text x="{}" y="{}" font-size="11">{}: {}</text>)", L + (k % 2) * 320, 62 + (k / 2) * 16, kColors[k % 6], L + 14 + (k % 2) * 320, 71 + (k / 2) * 16, escape(item.what), si(item.bytes, "B"));
    at += w;
    ++k;
  }
  const double dev = L + r.device_memory * scale;
  s += fmt::format(R"(<line x1="{:.1f}" y1="4" x2="{:.1f}" y2="56" stroke="#000" stroke-dasharray="4 2"/><text x="{:.1f}" y="8" font-size="10" text-anchor="end">{} {}</text>)", dev, dev, dev - 2, r.hw_name, si(r.device_memory, "B"));
  return s + legend + "</svg>";
}

/// FLOP share per module (scopes cut to two components: "blocks.0", "wte").
std::string share_svg(const Report& r) {
  std::vector<std::pair<std::string, double>> modules;
  std::map<std::string, size_t> at;
  for (const Row& row : r.rows) {
    std::string m = row.scope.empty() ? "(top level)" : row.scope;
    const size_t first = m.find('.');
    if (first != std::string::npos) {
      const size_t second = m.find('.', first + 1);
      if (second != std::string::npos) m = m.substr(0, second);
    }
    auto [it, fresh] = at.emplace(m, modules.size());
    if (fresh) modules.push_back({m, 0});
    modules[it->second].second += static_cast<double>(row.flops());
  }
  constexpr double W = 640, L = 160, BAR = 16;
  const double H = 20 + BAR * static_cast<double>(modules.size());
  double top = 0;
  for (const auto& m : modules) top = std::max(top, m.second);
  std::string s = fmt::format(R"(<svg id="share" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)", W, H, W, H);
  const double step = static_cast<double>(r.step_flops());
  for (size_t i = 0; i < modules.size(); ++i) {
    const double yy = 10 + BAR * static_cast<double>(i);
    const double w = top > 0 ? modules[i].second / top * (W - L - 70) : 0;
    s += fmt::format(R"(<text x="{}" y="{:.1f}" font-size="11" text-anchor="end">{}</text><rect class="bar" x="{}" y="{:.1f}" width="{:.1f}" height="{}" fill="#4e79a7"/><text x="{:.1f}" y="{:.1f}" font-size="10">{}</text>)",
                     L - 4, yy + 11, escape(modules[i].first), L, yy + 2, w, BAR - 4, L + w + 4, yy + 11, percent(modules[i].second, step));
  }
  return s + "</svg>";
}

std::string to_html(const Report& r, const Summary& s) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ein report: " + escape(r.file) +
                  "</title><style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:"
                  "collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}td.n{text-align:right}"
                  "details{margin-left:1em}code{font-size:12px}</style></head><body>\n";
  h += fmt::format("<h1>ein report: {} (<code>{}</code>)</h1>\n<p>{} x {}</p>\n<h2>Conventions</h2><ul>", escape(r.file), escape(r.fn), grouped(r.gpus), escape(r.hw_name));
  for (const std::string& c : s.conventions) h += "<li>" + escape(c) + "</li>";
  h += "</ul>\n<h2>Model</h2>";
  h += fmt::format("<p>parameters: {} total, {} trainable, {} embedding, {} non-embedding. Tied: {}.</p>", grouped(static_cast<double>(r.params_total)),
                   grouped(static_cast<double>(r.params_trainable)), grouped(static_cast<double>(r.params_embedding)),
                   grouped(static_cast<double>(r.params_total - r.params_embedding)), r.tied.empty() ? std::string("none") : escape(fmt::format("{}", fmt::join(r.tied, "; "))));
  h += fmt::format("<h2>FLOPs ({} tokens per step)</h2><table><tr><th>convention</th><th>per token</th><th>per step</th><th>note</th></tr>", grouped(static_cast<double>(r.tokens_per_step)));
  for (const Convention& c : s.flops)
    h += fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>", escape(c.name), si(c.per_token), si(c.per_step), escape(c.note));
  h += "</table>\n<h2>Roofline</h2>" + roofline_svg(r) + "\n<h2>Memory ledger</h2>" + memory_svg(r);
  h += fmt::format("<p>{} precision ({} B/param); optimizer {} (from {}). Activations: liveness peak {} ({} saved for backward + {} temporaries), at {}. Per device (data parallel): {} of {}: <b>{}</b>. Largest batch per device: {}.</p>",
                   r.precision, r.bytes_per_param, escape(r.optimizer), escape(r.optimizer_from), si(r.activation_peak, "B"),
                   si(r.activation_bytes, "B"), si(r.temporaries, "B"), escape(r.peak_at), si(s.per_device, "B"),
                   si(r.device_memory, "B"), fits_text(s.fits), grouped(s.max_batch));
  h += "<h2>What if</h2><table><tr><th>ZeRO stage</th><th>params</th><th>grads</th><th>optimizer</th><th>activations</th><th>total per device</th><th></th></tr>";
  for (const Summary::Zero& z : s.zero)
    h += fmt::format("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>", z.stage,
                     si(z.params, "B"), si(z.grads, "B"), si(z.optimizer, "B"), si(z.activations, "B"), si(z.total, "B"), fits_text(z.fits));
  h += "</table><table><tr><th>micro-batch</th><th>accumulation steps</th><th>activations</th><th>total per device</th><th></th></tr>";
  for (const Summary::MicroBatch& m : s.micro)
    h += fmt::format("<tr><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>", grouped(m.micro),
                     grouped(m.accumulation), si(m.activations, "B"), si(m.total, "B"), fits_text(m.fits));
  h += "</table>";
  if (r.checkpoint_modules > 0)
    h += fmt::format("<p>Checkpointing each of the {} modules of {}: activations {} per device, total {}: <b>{}</b>, {:.3g}x the model FLOPs per step.</p>",
                     r.checkpoint_modules, escape(r.checkpoint_scope), si(s.checkpoint_activations, "B"), si(s.checkpoint_total, "B"),
                     fits_text(s.checkpoint_fits), s.checkpoint_flops_ratio);
  if (r.tokens)
    h += fmt::format("<h2>Time</h2><p>{} tokens: {:.4g} days on {} GPUs at MFU {} ({:.4g} by 6N·D), {:.4g} GPU-hours; {:.3g} tokens per parameter (Chinchilla about 20).</p>",
                     si(*r.tokens), s.days, grouped(r.gpus), r.mfu, s.days_6n, s.gpu_hours, s.tokens_per_param);
  h += "\n<h2>FLOP share per module</h2>" + share_svg(r);
  h += "\n<h2>Not counted</h2><ul>";
  if (r.uncounted.empty()) h += "<li>every node has a cost rule and is counted.</li>";
  for (const std::string& u : r.uncounted) h += "<li><b>WARNING</b>: " + escape(u) + "</li>";
  h += "</ul>\n<h2>Per expression</h2>\n";
  // Rows nest by module path: blocks > blocks.0 > blocks.0.attn, each a <details>.
  const double step = static_cast<double>(r.step_flops());
  const auto components = [](const std::string& scope) {
    std::vector<std::string> parts;
    for (size_t start = 0; !scope.empty() && start <= scope.size();) {
      const size_t end = std::min(scope.find('.', start), scope.size());
      parts.push_back(scope.substr(0, end));
      start = end + 1;
    }
    return parts;
  };
  std::vector<std::string> open;  // the <details> open now, outermost first
  bool table = false;
  std::string scope = "\x01";
  for (const Row& row : r.rows) {
    if (row.scope != scope) {
      if (table) h += "</table>\n";
      table = false;
      scope = row.scope;
      const std::vector<std::string> path = components(scope.empty() ? std::string("(top level)") : scope);
      size_t keep = 0;
      while (keep < open.size() && keep < path.size() && open[keep] == path[keep]) ++keep;
      for (size_t k = open.size(); k > keep; --k) h += "</details>\n";
      open.resize(keep);
      for (size_t k = keep; k < path.size(); ++k) {
        h += fmt::format("<details open><summary>{}</summary>\n", escape(path[k]));
        open.push_back(path[k]);
      }
      h += "<table><tr><th>location</th><th>expression</th><th>shape</th><th>fwd</th><th>bwd input</th><th>bwd weight</th><th>bytes</th><th>FLOP/B</th><th>bound</th><th>time</th><th>saved</th><th>share</th><th>contraction FLOPs</th></tr>";
      table = true;
    }
    h += fmt::format("<tr><td>{}</td><td><code>{}</code></td><td>{} = {}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{:.3g}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
                     escape(row.location), escape(row.text), escape(row.symbolic_shape), escape(row.shape), si(static_cast<double>(row.fwd_flops)), si(static_cast<double>(row.bwd_input_flops)),
                     si(static_cast<double>(row.bwd_weight_flops)), si(static_cast<double>(row.bytes()), "B"),
                     row.bytes() ? static_cast<double>(row.flops()) / static_cast<double>(row.bytes()) : 0.0, row.memory_bound ? "memory" : "compute",
                     seconds_text(row.seconds), si(static_cast<double>(row.saved_bytes), "B"), percent(static_cast<double>(row.flops()), step),
                     escape(row.formula));
  }
  if (table) h += "</table>\n";
  for (size_t k = 0; k < open.size(); ++k) h += "</details>\n";
  return h + "</body></html>\n";
}

int run_report(const ReportFlags& f) {
  try {
    if (f.format != "text" && f.format != "md" && f.format != "json" && f.format != "html")
      throw RuntimeError(fmt::format("--format {}: expected text, md, json or html", f.format));
    report::ReportOptions o;
    o.fn = f.fn;
    o.hw = &hardware(f.hw);  // unknown names throw, listing the known ones
    const std::optional<MathMode> math = parse_math_mode(f.math);
    if (!math) throw RuntimeError(fmt::format("--math {}: expected fp64, fp32, tf32, bf16, fp16 or fp8", f.math));
    o.math = *math;
    o.gpus = parse_number(f.gpus, "--gpus");
    if (o.gpus != std::floor(o.gpus)) throw RuntimeError(fmt::format("--gpus {}: must be a whole number", f.gpus));
    o.mfu = parse_number(f.mfu, "--mfu");
    if (o.mfu > 1) throw RuntimeError(fmt::format("--mfu {}: must be in (0, 1]", f.mfu));
    if (!f.tokens.empty()) o.tokens = parse_number(f.tokens, "--tokens");
    if (!f.optimizer.empty()) {
      o.optimizer = napkin::parse_optimizer(f.optimizer);
      if (!o.optimizer)
        throw RuntimeError(fmt::format("--optimizer {}: expected sgd, momentum, adagrad, lion, adam or adamw", f.optimizer));
    }
    if (!f.precision.empty()) {
      o.precision = napkin::parse_precision(f.precision);
      if (!o.precision)
        throw RuntimeError(fmt::format("--precision {}: expected fp32, mixed, mixed-bf16-grads or bf16", f.precision));
    }
    o.depth = f.depth;
    const Report r = report::make_report(f.file, parse_settings(f.sets), o);
    const Summary s = summarize(r);
    std::string out;
    if (f.format == "json") out = to_json(r, s).dump(2) + "\n";
    else if (f.format == "html") out = to_html(r, s);
    else out = text_or_md(r, s, f.format == "md");
    if (f.output.empty()) {
      std::cout << out;
    } else {
      std::ofstream file(f.output, std::ios::binary);
      file << out;
      if (!file) throw RuntimeError(fmt::format("-o {}: cannot write the file", f.output));
    }
    return 0;
  } catch (...) {
    return report_error();
  }
}

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Static accounting of a .ein script's training step: FLOPs, bytes, memory, time");
  cmd->add_option("file", f->file, "the .ein script")->required();
  cmd->add_option("--set", f->sets, "override a dim or let: NAME=VALUE, or several: B=8,T=1024 (repeatable)");
  cmd->add_option("--fn", f->fn, "the function traced (default train.loss)");
  cmd->add_option("--hw", f->hw, "device: a100, h100, h100-pcie, h200 (default h100)");
  cmd->add_option("--math", f->math, "the peak column: fp64 fp32 tf32 bf16 fp16 fp8 (default bf16)");
  cmd->add_option("--gpus", f->gpus, "data-parallel devices (default 1)");
  cmd->add_option("--mfu", f->mfu, "model FLOPs utilization for the time (default 0.4)");
  cmd->add_option("--tokens", f->tokens, "training tokens (300e9, 300B): the time section");
  cmd->add_option("--optimizer", f->optimizer, "count this optimizer's state instead of the script's: sgd momentum adagrad lion adam adamw");
  cmd->add_option("--precision", f->precision, "fp32 mixed mixed-bf16-grads bf16 (default from the train block)");
  cmd->add_option("--depth", f->depth, "merge modules below this depth (blocks.0.attn has depth 3)");
  cmd->add_option("--format", f->format, "text, md, json or html (default text)");
  cmd->add_option("-o,--output", f->output, "write to this file instead of stdout");
  cmd->callback([f, &exit_code] { exit_code = run_report(*f); });
}

}  // namespace ein::cli
