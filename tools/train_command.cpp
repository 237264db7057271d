// `ein train FILE`: runs a script's train block through ein::Trainer (include/ein/trainer.h),
// which does the work: batches, precision, accumulation, clipping, the schedule, the log,
// checkpoints and exact resume. This file only maps the flags onto TrainOptions, prints the
// summary and the sample, and turns errors and interruptions into exit codes (1, 130).
#include <iostream>
#include <memory>
#include <optional>

#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/trainer.h>
#include <fmt/format.h>

#include "runtime/dist/communicator.h"
#include "tools/script_command.h"

namespace ein::cli {
namespace {

/// The flags of `ein train`.
struct TrainFlags {
  std::string file, device = "auto", precision, recompute, checkpoint, data, eval_data, log, init;
  std::optional<double> activation_budget;
  std::optional<int64_t> eval_every;
  std::vector<std::string> sets;
  std::optional<int64_t> steps;
  uint64_t seed = 0;
  bool resume = false, quiet = false, no_overlap = false;
  int keep = 3, zero = 0;
  double bucket_mb = 25;
};

int run_train(const TrainFlags& f) {
  // Before anything starts a thread: SIGINT/SIGTERM reach the Trainer's watcher only, never
  // a compute thread in the middle of a kernel (api/stop_signals.h).
  block_stop_signals();
  try {
    ScriptTrainOptions load;
    load.device = select_device(f.device);
    // mpirun -np N with GPUs: each rank takes the GPU of its rank on the machine, unless the
    // flag named one (cuda:N).
    if (load.device.kind == DeviceKind::cuda && f.device.find(':') == std::string::npos &&
        dist::launched_by_mpi())
      load.device = select_device(fmt::format("cuda:{}", dist::world().local_rank()));
    if (load.device.kind == DeviceKind::cuda && !f.quiet)
      std::cerr << fmt::format("ein train: on {} ({})\n", load.device.str(), device_name(load.device));
    for (const script::Setting& s : parse_settings(f.sets))
      load.sets.emplace_back(s.name, s.value);
    load.seed = f.seed;
    TrainScript script = load_train_script(f.file, load);
    TrainOptions& o = script.options;
    if (!f.precision.empty()) o.precision = f.precision;
    if (!f.recompute.empty()) o.recompute = f.recompute;
    if (f.activation_budget) o.activation_budget = *f.activation_budget;
    if (f.steps) o.steps = *f.steps;
    o.data_path = f.data;
    o.eval_data_path = f.eval_data;
    if (f.eval_every) o.eval_every = *f.eval_every;
    o.checkpoint = f.checkpoint;
    o.keep = f.keep;
    o.resume = f.resume;
    o.init = f.init;
    o.log = f.log;
    o.quiet = f.quiet;
    o.zero = f.zero;
    o.bucket_mb = f.bucket_mb;
    o.overlap = !f.no_overlap;
    o.name = "ein train";
    o.handle_signals = true;  // Ctrl-C and SIGTERM keep the last good checkpoint

    Trainer trainer(*script.model, o);
    const TrainResult r = trainer.fit();
    const bool speaks = r.world_size == 1 || dist::world().rank() == 0;  // rank 0 for the run
    if (r.interrupted) {
      if (speaks)
        std::cerr << fmt::format("ein train: interrupted after step {}{}\n", r.last,
                               o.checkpoint.empty() ? "" : "; the checkpoint above resumes it");
      return r.signal ? 128 + r.signal : 130;  // 130 for SIGINT, 143 for SIGTERM
    }
    if (!speaks) return 0;
    std::cout << format_summary(r, f.file);
    if (!o.sample.empty() && o.sample_length > 0 && !o.quiet) {  // --quiet: the summary only
      const std::string text = trainer.sample();
      std::cout << "sample:\n" << text << '\n';
    }
    return 0;
  } catch (...) {
    return report_error();
  }
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TrainFlags>();
  CLI::App* c = app.add_subcommand("train", "Train the model of a .ein script's train block");
  c->add_option("file", o->file, "the .ein script")->required();
  c->add_option("--set", o->sets, "override a dim or let: NAME=VALUE, or several: B=8,T=1024 (repeatable)");
  c->add_option("--steps", o->steps, "optimizer steps (default: the block's steps)");
  c->add_option("--device", o->device,
                 "auto (default: cuda when a GPU is there, else cpu), cpu, cuda or cuda:N");
  c->add_option("--precision", o->precision, "fp32 (default), bf16 or fp16");
  c->add_option("--recompute", o->recompute,
                "what the backward recomputes instead of saving: auto (default: cheap "
                "elementwise values whose inputs are saved anyway), none, blocks (activation "
                "checkpointing of each module of a list, e.g. a GPT's blocks) or full (the "
                "whole forward; saves only inputs)");
  c->add_option("--activation-budget", o->activation_budget,
                "with --recompute auto: the fraction (0 to 1, default 1) of its saved "
                "activation bytes the forward may keep; below 1 the backward recomputes "
                "contractions (matmul outputs, biases and residuals added to them), the fewest "
                "FLOPs per byte first, until the rest fits");
  c->add_option("--checkpoint", o->checkpoint, "directory for step_N.safetensors checkpoints");
  c->add_flag("--resume", o->resume, "continue from the latest good checkpoint in --checkpoint");
  c->add_option("--keep", o->keep, "checkpoints kept (default 3)");
  c->add_option("--data", o->data, "the data file (overrides the block's data path)");
  c->add_option("--eval-data", o->eval_data,
                "the held-out data file (overrides the block's eval_data path)");
  c->add_option("--eval-every", o->eval_every,
                "steps between eval losses on the block's eval_data (0: after the last step "
                "only; default: the block's eval_every)");
  c->add_option("--seed", o->seed, "the one seed: parameters, batches, dropout (default 0)");
  c->add_option("--log", o->log, "write one JSON line per step: step, loss, tokens_per_s, flops, mfu, ...");
  c->add_option("--init", o->init, "initial parameters from a safetensors file (names as in the checkpoint, without 'model.')");
  c->add_flag("--quiet", o->quiet, "no progress line");
  c->add_option("--zero", o->zero,
                "under mpirun -np N: 0 (default) plain data parallel, 1 shards the optimizer "
                "state across ranks, 2 also the gradients, 3 also the parameters (ZeRO stages)");
  c->add_option("--bucket-mb", o->bucket_mb,
                "under mpirun: gradient bytes per exchange, in MiB (default 25, as PyTorch DDP)");
  c->add_flag("--no-overlap", o->no_overlap,
              "under mpirun: exchange the gradients after the backward instead of bucket by "
              "bucket while it runs (the same results; for measuring the overlap)");
  c->callback([o, &exit_code] { exit_code = run_train(*o); });
}

}  // namespace ein::cli
