// The derived numbers of `ein report` (one Summary from a report::Report) and the renderers
// that print them: text or markdown (report_text.cpp), JSON (report_json.cpp) and one HTML
// page with inline SVG (report_html.cpp). Every format prints the same Summary; none computes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/report.h"

namespace ein::report {

/// One FLOP convention: per token and per step.
struct Convention {
  std::string name, note;              ///< the row's label and its source
  double per_token = 0, per_step = 0;  ///< FLOPs
};

/// The derived numbers every format prints: conventions, FLOPs side by side, what fits per
/// device under data parallelism, ZeRO, micro-batches and checkpointing, and the time.
struct Summary {
  std::vector<std::string> conventions;  ///< the header's lines
  std::vector<Convention> flops;         ///< side by side
  double useful_step = 0;                ///< exact count with causal attention halved
  double per_device = 0, per_device_zero3 = 0;  ///< bytes per device: replicated, ZeRO-3
  bool fits = false, fits_zero3 = false;        ///< each within the device memory
  bool uneven = false;  ///< the batch does not split evenly over the devices (ceil(B/N) each)
  double max_batch = 0, max_batch_zero3 = 0;  ///< per device
  /// Per device under each ZeRO stage 0 (plain data parallel) to 3.
  struct Zero {
    int stage = 0;                                                               ///< 0-3
    double params = 0, grads = 0, optimizer = 0, activations = 0, total = 0;  ///< bytes
    bool fits = false;                                                           ///< total fits
  };
  std::vector<Zero> zero;  ///< stages 0 to 3
  /// Per device at a micro-batch size, with the accumulation steps that keep the batch.
  struct MicroBatch {
    double micro = 0, accumulation = 0;  ///< micro-batch size and the steps that keep the batch
    double activations = 0, total = 0;   ///< bytes per device
    bool fits = false;                   ///< total fits
  };
  std::vector<MicroBatch> micro;  ///< powers of two dividing the per-device batch, and it
  /// Activation checkpointing of each module-list element (per device, plain data parallel).
  double checkpoint_activations = 0, checkpoint_total = 0, checkpoint_flops_ratio = 0;
  bool checkpoint_fits = false;  ///< checkpoint_total within the device memory
  /// Auto within an activation budget (Report::budget_plans), per device as the checkpointing.
  struct Budget {
    double budget = 1;
    double activations = 0, total = 0;  ///< bytes per device: the liveness peak, with the state
    bool fits = false;                  ///< total fits
    double flops_ratio = 0;  ///< (model FLOPs + all recomputation) / model FLOPs, per step
  };
  std::vector<Budget> budgets;
  /// Korthikanti et al.'s activation bytes for the attention shape found (16-bit, all layers);
  /// absent when no attention was identified.
  std::optional<napkin::ActivationMemory> korthikanti;
  /// Time, with --tokens: the exact graph count scaled to the tokens, and 6N·D for comparison.
  double total_flops = 0, seconds = 0, days = 0, gpu_hours = 0, days_6n = 0;
  double tokens_per_param = 0, chinchilla_tokens = 0;  ///< the Chinchilla check (with --tokens)
  /// A section's title and its sentences, for the sections every format writes as prose.
  struct Prose {
    std::string title;
    std::vector<std::string> lines;
  };
  std::optional<Prose> sampling;  ///< scripts with fn logits: what a token costs ein sample
  std::optional<Prose> held_out;  ///< a train block with eval_data: what its evaluations cost
};


/// The Summary of `r`: conventions, FLOP rows, per-device memory and the what-ifs.
Summary summarize(const Report& r);
/// "fits" or "does NOT fit", as every format writes it.
std::string fits_text(bool fits);

/// The report as plain text, or as markdown when `markdown`.
std::string render_text(const Report& r, const Summary& s, bool markdown);
/// The report as JSON text (keys documented in docs/report.md), indented by 2, with a newline.
std::string render_json(const Report& r, const Summary& s);
/// The report as one self-contained HTML page: inline CSS and SVG, no scripts or resources.
std::string render_html(const Report& r, const Summary& s);

}  // namespace ein::report
