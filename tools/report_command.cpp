// `ein report` (tools/report_command.h): reads the flags, has tools/report.h account for the
// script, derives the Summary (tools/report_summary.h) and prints it in one of four formats,
// each rendered in its own file. Every format prints the same derived numbers.
#include "tools/report_command.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ein/errors.h"
#include "tools/cli_errors.h"
#include "tools/cli_numbers.h"
#include "tools/cli_options.h"
#include "tools/report.h"
#include "tools/report_summary.h"
#include "tools/script_command.h"

namespace ein::cli {
namespace {

struct ReportFlags {
  std::string file, fn = "train.loss", hw = "h100", math = "bf16", gpus = "1", mfu = "0.4";
  std::string bucket_mb = "25";
  std::string tokens, optimizer, precision, recompute = "auto", format = "text", output;
  double activation_budget = 1;
  std::vector<std::string> sets;
  int depth = -1;
};

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
    o.gpus = parse_count(f.gpus, "--gpus");
    o.bucket_mb = parse_positive(f.bucket_mb, "--bucket-mb");
    o.mfu = parse_fraction(f.mfu, "--mfu");
    if (!f.tokens.empty()) o.tokens = parse_positive(f.tokens, "--tokens");
    if (!f.optimizer.empty()) {
      o.optimizer = napkin::parse_optimizer(f.optimizer);
      if (!o.optimizer)
        throw RuntimeError(fmt::format("--optimizer {}: expected sgd, momentum, adagrad, lion, adam or adamw", f.optimizer));
    }
    if (f.precision == "fp32" || f.precision == "bf16" || f.precision == "fp16") {
      // As ein train --precision runs it, whatever the train block says.
      o.compute = f.precision == "bf16" ? DType::bf16 : f.precision == "fp16" ? DType::f16 : DType::f32;
      if (f.precision == "fp32") o.precision = napkin::Precision::fp32;
    } else if (!f.precision.empty()) {
      o.precision = napkin::parse_precision(f.precision);
      if (!o.precision || *o.precision == napkin::Precision::bf16)
        throw RuntimeError(fmt::format("--precision {}: expected fp32, bf16 or fp16 (as ein train runs them), mixed or mixed-bf16-grads (ein estimate's conventions)", f.precision));
    }
    o.depth = f.depth;
    const std::optional<Recompute> recompute = parse_recompute(f.recompute);
    if (!recompute || *recompute == Recompute::full)
      throw RuntimeError(fmt::format("--recompute {}: expected none, auto or blocks", f.recompute));
    o.recompute = *recompute;
    if (!(f.activation_budget >= 0 && f.activation_budget <= 1))
      throw RuntimeError(fmt::format("--activation-budget {}: expected a fraction from 0 to 1",
                                     f.activation_budget));
    if (f.activation_budget < 1 && *recompute != Recompute::automatic)
      throw RuntimeError(
          fmt::format("--activation-budget applies to --recompute auto, not {}", f.recompute));
    o.activation_budget = f.activation_budget;
    const report::Report r = report::make_report(f.file, parse_settings(f.sets), o);
    const report::Summary s = report::summarize(r);
    std::string out;
    if (f.format == "json")
      out = report::render_json(r, s);
    else if (f.format == "html")
      out = report::render_html(r, s);
    else
      out = report::render_text(r, s, f.format == "md");
    if (f.output.empty()) {
      std::cout << out;
    } else {
      std::ofstream file(f.output, std::ios::binary);
      file << out;
      if (!file) throw RuntimeError(fmt::format("-o {}: cannot write the file", f.output));
    }
    return 0;
  } catch (...) {
    return report_error("report");
  }
}

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Static accounting of a .ein script's training step: FLOPs, bytes, memory, time");
  add_script_options(*cmd, f->file, f->sets);
  cmd->add_option("--fn", f->fn, "the function traced (default train.loss)");
  cmd->add_option("--hw", f->hw, "device: a100, h100, h100-pcie, h200 (default h100)");
  cmd->add_option("--math", f->math, "the peak column: fp64 fp32 tf32 bf16 fp16 fp8 (default bf16)");
  cmd->add_option("--gpus", f->gpus, "data-parallel devices (default 1)");
  cmd->add_option("--bucket-mb", f->bucket_mb,
                  "with --gpus: ein train's gradient bucket size in MiB (default 25; decides "
                  "when ZeRO 2 drops gradients)");
  cmd->add_option("--mfu", f->mfu, "model FLOPs utilization for the time (default 0.4)");
  cmd->add_option("--tokens", f->tokens, "training tokens (300e9, 300B): the time section");
  cmd->add_option("--optimizer", f->optimizer, "count this optimizer's state instead of the script's: sgd momentum adagrad lion adam adamw");
  cmd->add_option("--precision", f->precision, "fp32, bf16 or fp16 as ein train runs them, or ein estimate's mixed or mixed-bf16-grads (default from the train block)");
  cmd->add_option("--recompute", f->recompute,
                  "the save/recompute plan of the step, as ein train --recompute: auto (default), "
                  "none or blocks");
  cmd->add_option("--activation-budget", f->activation_budget,
                  "with --recompute auto, as ein train --activation-budget: the fraction (0 to "
                  "1, default 1) of its saved activation bytes the forward may keep");
  cmd->add_option("--depth", f->depth, "merge modules below this depth (blocks.0.attn has depth 3)");
  cmd->add_option("--format", f->format, "text, md, json or html (default text)");
  cmd->add_option("-o,--output", f->output, "write to this file instead of stdout");
  cmd->callback([f, &exit_code] { exit_code = run_report(*f); });
}

}  // namespace ein::cli

