// ein::Trainer::fit(): the training loop of `ein train` over any Trainable. One step: the
// micro-batches' losses traced and run with autograd (their gradients summed, each scaled by
// 1/accumulate and, in fp16, by the loss scale), loss scaling's overflow check, clipping, the
// scheduled learning rate, the model's optimizer, zeroed gradients; then the log, the progress
// line and the periodic checkpoint. Batches live in train_data.cpp, text in train_report.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <pthread.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>

#include <unistd.h>

#include <ein/autograd.h>
#include <ein/checkpoint.h>
#include <ein/cpu_peak.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/flop_counter.h>
#include <ein/grad_clip.h>
#include <ein/ops.h>
#include <ein/schedule.h>
#include <ein/storage.h>
#include <ein/trainer.h>
#include <ein/training_checkpoint.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/stop_signals.h"
#include "api/train_data.h"
#include "api/train_dist.h"
#include "api/train_eval.h"
#include "api/train_report.h"
#include "exec/fused_ops.h"
#include "runtime/cuda/driver.h"
#include "runtime/dist/communicator.h"
#include "runtime/dist/gradient_sync.h"

namespace ein {
namespace {

/// Multiplies every gradient by `factor` in place (unscaling and clipping for a model without
/// Trainable::optimizer_step_scaled).
void scale_grads(const std::vector<Tensor>& params, double factor) {
  NoGrad no_grad;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    scale_in_place(g.detach(), factor);
  }
}

/// Copies `init` into the parameters (load_parameters()), its errors as --init's. Only the
/// tensors a parameter can take are read (not a training checkpoint's optimizer state).
void load_initial_parameters(const std::string& init, const std::vector<NamedTensor>& params) {
  try {
    load_parameters(load_parameter_tensors(init, params), params);
  } catch (const RuntimeError& e) {
    throw UserError(fmt::format("--init: {}", e.what()));
  }
}

/// What a checkpoint holds: "model." + parameter names, "optim." + optimizer state names.
std::vector<std::pair<std::string, Tensor>> checkpoint_tensors(Trainable& model,
                                                               const std::vector<NamedTensor>& params) {
  std::vector<std::pair<std::string, Tensor>> t;
  for (const auto& p : params)
    t.emplace_back("model." + p.name, p.tensor);
  for (const auto& s : model.optimizer_state())
    t.emplace_back("optim." + s.name, s.tensor);
  return t;
}

/// The metadata key of a checkpoint's layout_signature() (names, dtypes, shapes of its tensors).
constexpr const char* kLayoutKey = "layout";

/// How the checkpoint's tensors differ from `ours` (names, dtypes, shapes), one line each.
std::string layout_differences(const Checkpoint& ck,
                               const std::vector<std::pair<std::string, Tensor>>& ours,
                               bool sharded_state = false) {
  std::string lines;
  std::set<std::string> names;
  for (const auto& [name, t] : ours) {
    names.insert(name);
    const Tensor* theirs = ck.find(name);
    if (!theirs)
      lines += fmt::format("\n  '{}' is missing from the checkpoint", name);
    else if (theirs->dtype() != t.dtype() || theirs->shape() != t.shape())
      lines += fmt::format("\n  '{}' is {} {} in the checkpoint but {} {} here", name,
                           dtype_name(theirs->dtype()), shape_str(theirs->shape()),
                           dtype_name(t.dtype()), shape_str(t.shape()));
  }
  for (const auto& [name, t] : ck.tensors)
    if (!names.contains(name) && !(sharded_state && name.starts_with("optim.")))
      lines += fmt::format("\n  '{}' is in the checkpoint but not in this model", name);
  return lines;
}

/// A sharded checkpoint (written by a ZeRO run): adds to `ck` the tensors of its other shards
/// that `targets` names, so one rank holds only what it loads.
void add_shards(Checkpoint& ck, const std::string& dir, int64_t step,
                const std::vector<std::pair<std::string, Tensor>>& targets) {
  const auto it = ck.metadata.find(kShardsMetadataKey);
  if (it == ck.metadata.end()) return;
  const int64_t shards = std::strtoll(it->second.c_str(), nullptr, 10);
  std::set<std::string> wanted;
  for (const auto& [name, t] : targets)
    wanted.insert(name);
  for (int shard = 1; shard < shards; ++shard) {
    const std::string path = shard_file_path(dir, step, shard);
    Checkpoint part;
    try {
      part = load_safetensors(path);
    } catch (const RuntimeError& e) {
      throw UserError(fmt::format("cannot resume from {}: it is shard 0 of {}, and shard {} does "
                                  "not load: {}",
                                  ck.path, shards, shard, e.what()));
    }
    if (auto s = part.metadata.find(kStepMetadataKey);
        s == part.metadata.end() || s->second != std::to_string(step))
      throw UserError(fmt::format("cannot resume from {}: its shard {} is not of step {}", ck.path,
                                  path, step));
    for (auto& [name, t] : part.tensors)
      if (wanted.contains(name)) ck.tensors.emplace_back(name, std::move(t));
  }
}

/// Loads the latest good checkpoint of `o.checkpoint` into the model; returns its step (0
/// when there is none yet). A checkpoint whose data fails its checksums is skipped with a
/// warning, falling back to the previous good one; one of another model (its layout differs)
/// is an error. Notes go to `out` even when quiet: they say where the run stands. Under ZeRO
/// (`sharded_state`) the rank loads only its parameters' optimizer state, so the checkpoint's
/// other "optim." tensors are expected.
int64_t resume_from_checkpoint(const TrainOptions& o, Trainable& model,
                               const std::vector<NamedTensor>& params, std::ostream& out,
                               bool sharded_state) {
  if (o.checkpoint.empty()) throw UserError("--resume needs --checkpoint DIR");
  LoadedCheckpoint loaded = load_latest_checkpoint(o.checkpoint);
  for (const std::string& s : loaded.latest.skipped)
    out << o.name << ": warning: skipped " << s << '\n';
  if (!loaded.checkpoint) {
    out << fmt::format("{}: no {} in '{}'{}; starting at step 0\n", o.name,
                       loaded.latest.skipped.empty() ? "checkpoint" : "good checkpoint",
                       o.checkpoint, loaded.latest.skipped.empty() ? " yet" : "");
    return 0;
  }
  const std::string& path = loaded.latest.path;
  Checkpoint& ck = *loaded.checkpoint;
  const std::vector<std::pair<std::string, Tensor>> targets = checkpoint_tensors(model, params);
  add_shards(ck, o.checkpoint, loaded.latest.step, targets);
  const std::string differences = layout_differences(ck, targets, sharded_state);
  if (auto it = ck.metadata.find(kLayoutKey);
      it != ck.metadata.end() && (sharded_state ? !differences.empty()
                                                : it->second != layout_signature(targets))) {
    const auto script = ck.metadata.find("script");
    throw UserError(fmt::format(
        "cannot resume from {}: it is a checkpoint of another model{}; its tensors differ from "
        "this run's:{}\n(use another --checkpoint directory, or --init to start from some of "
        "its weights)",
        path,
        script != ck.metadata.end() ? fmt::format(" (written by {})", script->second) : "",
        differences));
  }
  try {
    if (auto it = ck.metadata.find("seed"); it != ck.metadata.end() && it->second != std::to_string(o.seed))
      throw UserError(fmt::format("{} was written with --seed {}, this run has --seed {}; "
                                  "resume with the same seed",
                                  path, it->second, o.seed));
    copy_into(ck, targets);
  } catch (const RuntimeError& e) {
    throw UserError(fmt::format("cannot resume from {}: {}", path, e.what()));
  }
  out << fmt::format("{}: resumed from {} (step {})\n", o.name, path, loaded.latest.step);
  return loaded.latest.step;
}

/// The 2-norm of all the averaged gradients of a distributed run: this rank's norm over the
/// parameters it owns (optim::grad_norm), squared and added over the ranks in rank order, so
/// every rank and every ZeRO stage gets the same bits.
double global_grad_norm(dist::Communicator& comm, const dist::GradientSync& sync,
                        const std::vector<Tensor>& params) {
  std::vector<Tensor> own;
  for (size_t i = 0; i < params.size(); ++i)
    if (sync.owns(i)) own.push_back(params[i]);
  const double local = optim::grad_norm(own);
  return std::sqrt(comm.sum(local * local, "the gradient norm"));
}

/// Checks the log stream after a write or flush: a full disk or a closed pipe must not lose
/// the log silently. `err` is errno from before the write was checked.
void check_log(const std::ofstream& log, const std::string& path, int64_t step, int err) {
  if (log) return;
  throw UserError(fmt::format("--log {}: writing the line of step {} failed{}; stopping so the "
                              "log is not lost silently",
                              path, step, err != 0 ? fmt::format(" ({})", std::strerror(err)) : ""));
}

/// The hardware MFU is measured against: this CPU, or the GPU's row of the table (nullptr
/// for a GPU the table lacks); `name` as the summary prints it.
const HardwareProfile* mfu_hardware(Device device, std::string& name) {
  if (device.kind != DeviceKind::cuda) {
    name = "this CPU's";
    return &this_cpu();
  }
  if (!cuda_is_available()) {  // a device backend without a driver (tests' fake GPU)
    name = "a GPU without a driver to name it (MFU 0)";
    return nullptr;
  }
  const std::string gpu = device_name(device);
  const HardwareProfile* hw = hardware_for_gpu(gpu);
  name = hw ? fmt::format("the {}'s", hw->name) : fmt::format("{}'s (unknown: MFU 0)", gpu);
  return hw;
}

}  // namespace

std::vector<Tensor> Trainable::batch(int64_t) {
  throw UserError("the model makes no batches: set TrainOptions::data or override Trainable::batch()");
}

void Trainable::set_parameter(const std::string& name, const Tensor&) {
  throw UserError(fmt::format(
      "this model's parameters cannot be given new tensors (parameter '{}'): copy into them",
      name));
}

void Trainable::set_compute_dtype(DType dtype) {
  throw UserError(fmt::format("this model trains in fp32 only, not {}", dtype_name(dtype)));
}

Tensor Trainable::logits(const Tensor&) {
  throw UserError("this model has no logits() to sample from");
}

std::unique_ptr<Decoder> Trainable::decoder(int64_t, std::string& why, const DecoderOptions&) {
  why = "the model has no decode step";
  return nullptr;
}

Tensor Trainable::eval_loss(const std::vector<Tensor>& batch) {
  return loss(batch, 0);
}

void Trainable::init_optimizer_state_of(const std::vector<bool>&) {
  init_optimizer_state();
}

Trainer::Trainer(Trainable& model, TrainOptions options) : model_(model), options_(std::move(options)) {}

Trainer::~Trainer() = default;  // signals_ (stop_signals.h) restores what fit() changed

void block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

TrainResult Trainer::fit() {
  const TrainOptions& o = options_;
  // 0. The processes of the run (mpirun -np N: MPI's world; else one). Rank 0 speaks, logs
  //    and writes checkpoints; every rank computes.
  dist::Communicator& comm = dist::world();
  const int rank = comm.rank(), ranks = comm.size();
  std::ostream silent(nullptr);
  std::ostream& out = rank != 0 ? silent : o.out ? *o.out : std::cerr;
  TrainResult r;
  r.world_size = ranks;
  // 0. Signals stop after the current step; they go to a watcher thread (stop_signals.h),
  //    set up before this thread starts any (the data prefetcher, oneTBB, OpenMP).
  if (o.handle_signals && !signals_) signals_ = std::make_unique<detail::StopSignals>();
  // 1. Precision: activations in bf16/fp16; master weights, gradients and optimizer state
  //    in f32 (fp16 adds dynamic loss scaling, step 7).
  if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "fp16")
    throw UserError(fmt::format("--precision {}: expected fp32, bf16 or fp16", o.precision));
  if (o.precision == "bf16") model_.set_compute_dtype(DType::bf16);
  if (o.precision == "fp16") model_.set_compute_dtype(DType::f16);
  const std::optional<Recompute> policy = parse_recompute(o.recompute);
  if (!policy)
    throw UserError(
        fmt::format("--recompute {}: expected none, auto, blocks or full", o.recompute));
  if (!(o.activation_budget >= 0 && o.activation_budget <= 1))
    throw UserError(fmt::format("--activation-budget {}: expected a fraction from 0 to 1",
                                o.activation_budget));
  if (o.activation_budget < 1 && *policy != Recompute::automatic)
    throw UserError(fmt::format("--activation-budget applies to --recompute auto, not {}",
                                o.recompute));
  // The ops this thread records from now on.
  const RecomputeScope recompute(*policy, o.activation_budget);
  const int64_t steps = o.steps;
  if (steps < 0) throw UserError("--steps must be >= 0");
  if (o.accumulate < 1) throw UserError("accumulate must be >= 1");
  if (o.zero < 0 || o.zero > 3)
    throw UserError(fmt::format("--zero {}: expected 0, 1, 2 or 3", o.zero));
  if (!(o.bucket_mb > 0) || o.bucket_mb > 2047)
    throw UserError(fmt::format("--bucket-mb {}: expected more than 0 and at most 2047 (MiB; "
                                "MPI counts one exchange's bytes in an int)", o.bucket_mb));
  // 2. Parameters, optimizer state, initial values.
  const std::vector<NamedTensor> params = model_.parameters();
  if (params.empty()) throw UserError("the train block's modules have no parameters to train");
  std::vector<Tensor> param_tensors;
  for (const auto& p : params) {
    param_tensors.push_back(p.tensor);
    r.parameters += p.tensor.numel();
    r.parameter_bytes += p.tensor.nbytes();
  }
  // Data parallel: every rank checks that the others run the same model and settings, then
  // averages gradients through `sync` (runtime/dist/gradient_sync.h), which also decides, under
  // ZeRO, which parameters (and so which optimizer state) this rank owns.
  std::unique_ptr<dist::GradientSync> sync;
  std::unique_ptr<dist::Communicator> device_comm;  // NCCL, for parameters on a GPU
  if (ranks > 1) {
    detail::check_same_run(comm, o, params);
    std::string note;
    dist::Communicator& grads =
        detail::gradient_communicator(comm, param_tensors.front().device(), device_comm, note);
    if (!note.empty()) out << note << "\n";
    sync = std::make_unique<dist::GradientSync>(
        grads, param_tensors,
        dist::SyncOptions{.zero = o.zero,
                          .bucket_bytes = std::max<int64_t>(1, std::llround(o.bucket_mb * (1 << 20))),
                          .average = detail::rank_order_average(),
                          .micro_steps = o.accumulate,
                          .overlap = o.overlap});
    r.zero = o.zero;
    r.comm_bytes_per_step = sync->bytes_per_step();
  }
  // What this rank sent: the gradient traffic (on NCCL's communicator for GPU parameters,
  // on the sync's lane where it overlaps the backward) and the few values the host group
  // exchanges. Within a step the lane's bytes are counted once its exchanges are waited for.
  const auto group_sent = [&] {
    return comm.stats.sent_bytes + (device_comm ? device_comm->stats.sent_bytes : 0);
  };
  const auto lane_sent = [&] { return sync ? sync->lane_sent_bytes() : int64_t{0}; };
  const auto sent_bytes = [&] { return group_sent() + lane_sent(); };
  const bool sharded_state = sync && sync->zero() > 0;
  if (sharded_state) {
    std::vector<bool> owned;
    for (size_t i = 0; i < params.size(); ++i)
      owned.push_back(sync->owns(i));
    model_.init_optimizer_state_of(owned);
  } else {
    model_.init_optimizer_state();
  }
  // A checkpoint directory that cannot be written fails now, not at the first save.
  if (!o.checkpoint.empty()) {
    try {
      check_checkpoint_directory(o.checkpoint);
    } catch (const RuntimeError& e) {
      throw UserError(fmt::format("--checkpoint: {}", e.what()));
    }
  }
  if (!o.init.empty()) load_initial_parameters(o.init, params);
  detail::TrainBatches batches(model_, o.data, o.data_path, o.seed, o.device, rank, ranks);
  std::unique_ptr<detail::HeldOutLoss> held_out;
  if (o.eval_data) {
    held_out = std::make_unique<detail::HeldOutLoss>(model_, o, rank, ranks);
    r.eval_batches = held_out->batches();
    r.eval_tokens = held_out->tokens();
  } else if (!o.eval_data_path.empty()) {
    throw UserError("--eval-data: the train block has no eval_data setting to read it as");
  }

  // 3. Resume: parameters, optimizer state, step; the data position and every random draw are
  //    functions of (seed, step), so the run continues exactly.
  if (o.resume) r.start = resume_from_checkpoint(o, model_, params, out, sharded_state);
  batches.seek(r.start * o.accumulate);
  // ZeRO 3: from here each rank holds only the parameters it owns; the forward and backward
  // fetch the others as their nodes read them (runtime/dist/gradient_sync.h).
  if (sync) sync->shard();

  std::ofstream log;
  if (!o.log.empty() && rank == 0) {
    log.open(o.log, o.resume ? std::ios::app : std::ios::trunc);
    if (!log) throw UserError(fmt::format("--log {}: cannot open for writing{}", o.log,
                                          errno != 0 ? fmt::format(" ({})", std::strerror(errno)) : ""));
  }
  auto save = [&](int64_t step) {
    if (o.checkpoint.empty()) return;
    // ZeRO 3: every parameter on every rank while the checkpoint is written, then sharded again.
    const bool resharding = sync && sync->sharded();
    if (resharding) sync->unshard();
    std::map<std::string, std::string> metadata = o.metadata;
    metadata["seed"] = std::to_string(o.seed);
    // These weights' held-out loss, when this step scored them: prune_checkpoints() keeps the
    // checkpoint with the lowest.
    if (!r.eval_losses.empty() && r.eval_losses.back().first == step &&
        std::isfinite(r.eval_losses.back().second))
      metadata[kEvalLossMetadataKey] = fmt::format("{:.17g}", r.eval_losses.back().second);
    // ZeRO: each rank writes the optimizer state it owns as a shard; rank 0's step file (the
    // parameters, its state and the layout of every shard) comes last and commits the set.
    std::vector<std::pair<std::string, Tensor>> tensors;
    if (sharded_state) {
      std::vector<std::pair<std::string, Tensor>> own;
      for (const auto& s : model_.optimizer_state())
        own.emplace_back("optim." + s.name, s.tensor);
      if (rank != 0)
        save_safetensors(shard_file_path(o.checkpoint, step, rank), own,
                         {{kStepMetadataKey, std::to_string(step)}, {"shard", std::to_string(rank)}});
      std::vector<TensorLayout> layouts;  // collective: every shard is durable after it
      for (const auto& p : params)
        layouts.push_back({"model." + p.name, p.tensor.dtype(), p.tensor.shape()});
      for (TensorLayout& l : detail::gather_layouts(comm, own))
        layouts.push_back(std::move(l));
      metadata[kLayoutKey] = layout_signature(layouts);
      metadata[kShardsMetadataKey] = std::to_string(ranks);
      for (const auto& p : params)
        tensors.emplace_back("model." + p.name, p.tensor);
      for (auto& t : own)
        tensors.push_back(std::move(t));
    } else {
      tensors = checkpoint_tensors(model_, params);
      metadata[kLayoutKey] = layout_signature(tensors);
    }
    if (rank == 0) {
      const std::string path = save_training_checkpoint(o.checkpoint, step, tensors, metadata);
      prune_checkpoints(o.checkpoint, o.keep);
      if (!o.quiet) out << fmt::format("\n{}: wrote {}\n", o.name, path);
    }
    if (ranks > 1) comm.barrier("the checkpoint write");  // no rank runs ahead of a save
    if (resharding) sync->shard();
  };

  // 4. Stop at a step boundary: stop() or a signal (step 0). In a distributed run every rank
  //    stops at the same step: at the first one where any rank was asked to.
  auto stop_here = [&] { return stop_.load() || (signals_ && detail::StopSignals::received()); };
  auto stopping = [&] {
    const bool here = stop_here();
    return ranks > 1 ? comm.sum(here ? 1.0 : 0.0, "the stop check") > 0 : here;
  };
  const int64_t comm_before = sent_bytes();
  const bool tty = &out == &std::cerr && isatty(STDERR_FILENO) && !o.quiet;
  // MFU: a distributed run's FLOPs (summed over ranks) against the sum of the ranks' peaks
  // (a GPU each; on CPUs, the cores each rank was given, which this_cpu() measures).
  const int devices = ranks;
  const HardwareProfile* hw = mfu_hardware(o.device, r.hardware);
  if (ranks > 1) r.hardware = fmt::format("the {} ranks' ({})", ranks, r.hardware);
  // MFU against the dense peak of the arithmetic the matmuls use: the activations' dtype
  // (bf16/fp16 tensor cores on a GPU; bf16 matmuls on a CPU that has them, this_cpu()'s bf16
  // figure), or f32 (TF32 when EIN_CUDA_TF32=1; a CPU's fp16, computed in f32).
  const bool cpu_f32 = o.device.kind == DeviceKind::cpu && o.precision != "bf16";
  const DType mfu_dtype = cpu_f32 || o.precision == "fp32" ? DType::f32
                          : o.precision == "bf16"          ? DType::bf16
                                                           : DType::f16;
  r.fp16 = o.precision == "fp16";
  r.loss_scale = r.fp16 ? 65536.0 : 1.0;
  r.final_loss = NAN;
  int64_t good_steps = 0;
  bool open_line = false;  // a terminal's progress line waits for its newline
  // The held-out loss of the weights after `step`, outside the steps' time, FLOPs and memory.
  const auto evaluate_held_out = [&](int64_t step, StepStats& s) {
    const auto e0 = std::chrono::steady_clock::now();
    s.eval_loss = held_out->score(comm, sync && sync->sharded());
    s.eval_flops = held_out->flops();
    s.eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    r.eval_seconds += s.eval_seconds;
    r.eval_flops += s.eval_flops;
    r.eval_losses.emplace_back(step, *s.eval_loss);
  };

  // 5. The loop.
  for (int64_t step = r.start + 1; step <= steps && !stopping(); ++step) {
    FlopCounter counter;
    reset_peak_memory_stats(o.device);
    const auto t0 = std::chrono::steady_clock::now();
    StepStats s;
    s.step = step;
    s.steps = steps;
    double loss_sum = 0;
    int64_t step_comm = 0;  // what this rank sent in the step
    const int64_t lane_before = lane_sent();
    const int64_t prefetched_before = sync ? sync->prefetched() : 0;
    // 6. Micro-batches: each backward adds its gradients scaled by loss_scale / accumulate.
    //    Model FLOPs are the forward and backward of the loss (what ein report counts); the
    //    batch function's work, recomputation and the update are counted on their own.
    const auto counted = [&] { return static_cast<double>(counter.totals().flops); };
    const auto recomputed = [&] {
      return static_cast<double>(counter.phase(CostPhase::recompute).flops);
    };
    for (int64_t micro = 0; micro < o.accumulate; ++micro) {
      const int64_t k = (step - 1) * o.accumulate + micro;  // this rank's micro-batch
      const double before_batch = counted();
      const std::vector<Tensor> batch = batches.next(k);
      s.tokens += batch.empty() ? 0 : batch.front().numel();
      const double scale = r.loss_scale / static_cast<double>(o.accumulate);
      const double before = counted(), recomputed_before = recomputed();
      s.data_flops += before - before_batch;
      // ZeRO 3: the forward and backward fetch the parameters other ranks own.
      std::optional<dist::FetchScope> fetching;
      if (sync && sync->sharded()) fetching.emplace();
      const int64_t sent_before = group_sent();
      const Tensor loss = model_.loss(batch, k);
      loss_sum += loss.item();
      // The last micro-batch's backward finishes the gradients: their exchange starts as it
      // finishes each bucket (GradientSync::arm()).
      if (sync && micro == o.accumulate - 1) sync->arm();
      loss.backward(full({}, scale, loss.dtype(), loss.device()));
      step_comm += group_sent() - sent_before;  // ZeRO 3's parameter fetches
      s.recompute_flops += recomputed() - recomputed_before;
      s.flops += counted() - before - (recomputed() - recomputed_before);
    }
    const double before_update = counted();
    s.loss = loss_sum / static_cast<double>(o.accumulate);
    // Data parallel: the gradients averaged over ranks (ZeRO: each rank keeps its own); the
    // step's loss, tokens and FLOPs are the whole run's.
    if (sync) {
      const int64_t sent = group_sent();
      sync->reduce_gradients();
      step_comm += group_sent() - sent + lane_sent() - lane_before;
      s.buckets = sync->buckets();
      s.buckets_in_backward = sync->buckets_in_backward();
      s.prefetched = sync->prefetched() - prefetched_before;
      s.loss = comm.sum(s.loss, "the loss") / ranks;
      s.tokens *= ranks;
    }
    if (!std::isfinite(s.loss))
      throw UserError(fmt::format("the loss is {} at step {}; the last checkpoint (if any) is "
                                  "kept; lower the learning rate or clip gradients (clip = 1.0)",
                                  s.loss, step));
    s.loss_scale = r.loss_scale;
    // The factor the update reads every gradient with: loss-scale unscaling times clipping's
    // (applied by the update's own kernel where the model can, else in place first).
    double grad_factor = 1.0;
    const auto norm_of_gradients = [&] {
      return sync ? global_grad_norm(comm, *sync, param_tensors) : optim::grad_norm(param_tensors);
    };
    std::optional<double> norm;  // of the gradients as they are (loss-scaled with fp16)
    if (r.fp16) {
      // 7. Dynamic loss scaling (torch.cuda.amp.GradScaler's rule): gradients of the scaled
      //    loss that overflowed skip the step and halve the scale; otherwise they are unscaled,
      //    and every 2000 good steps the scale doubles.
      norm = norm_of_gradients();
      if (!std::isfinite(*norm)) {
        s.skipped = true;
        r.loss_scale /= 2;
        good_steps = 0;
        ++r.skipped_steps;
      } else {
        grad_factor = 1.0 / r.loss_scale;  // a power of two: the unscaled norm is exact
        if (++good_steps % 2000 == 0) r.loss_scale *= 2;
      }
    }
    if (norm && !s.skipped) s.grad_norm = *norm * grad_factor;
    // 8. Clip (torch.nn.utils.clip_grad_norm_'s factor: a NaN norm gives NaN, an infinite 0),
    //    schedule, update, zero.
    if (o.clip > 0 && !s.skipped) {
      const double total = (norm ? *norm : norm_of_gradients()) * grad_factor;
      s.grad_norm = total;
      const double coef = o.clip / (total + 1e-6);
      if (!(coef >= 1.0)) grad_factor *= coef;
    }
    s.lr = o.lr;
    if (o.schedule == "cosine")
      s.lr = optim::cosine_lr(step - 1, {o.lr, o.lr * o.min_lr_ratio, o.warmup, std::max(steps, o.warmup)});
    // ZeRO: the parameters with gradients.
    if (!s.skipped && (grad_factor == 1.0 || !model_.optimizer_step_scaled(step, s.lr, grad_factor))) {
      if (grad_factor != 1.0) scale_grads(param_tensors, grad_factor);
      model_.optimizer_step(step, s.lr);
    }
    if (sync && sync->zero() > 0 && !s.skipped) {
      const int64_t sent = group_sent();
      sync->gather_parameters();
      step_comm += group_sent() - sent;
    }
    zero_grad(param_tensors);
    synchronize();  // a GPU's launches are asynchronous: the step ends when its work does
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.peak_memory = max_memory_allocated(o.device);
    r.peak_memory = std::max(r.peak_memory, s.peak_memory);
    r.seconds += s.seconds;
    ++r.done;
    r.final_loss = s.loss;
    r.losses.push_back(s.loss);
    r.tokens_per_step = s.tokens;
    s.optimizer_flops = counted() - before_update;  // unscaling, clipping and the update
    if (ranks > 1) s.flops = comm.sum(s.flops, "the FLOP count");
    s.comm_bytes = step_comm;
    r.flops += s.flops;
    s.mfu = hw ? utilization(s.flops, s.seconds, *hw, mfu_dtype) / devices : 0;
    if (held_out && held_out->due(step, steps)) evaluate_held_out(step, s);
    // 9. Report: the JSON line, the progress line, the callback, the periodic checkpoint.
    if (log.is_open()) {
      nlohmann::json j = {{"step", step},       {"loss", s.loss},
                          {"lr", s.lr},         {"tokens_per_s", static_cast<double>(s.tokens) / s.seconds},
                          {"flops", s.flops},   {"flops_per_s", s.flops / s.seconds},
                          {"mfu", s.mfu},       {"ms", s.seconds * 1e3},
                          {"peak_memory", s.peak_memory},
                          {"recompute_flops", s.recompute_flops},
                          {"optimizer_flops", s.optimizer_flops},
                          {"data_flops", s.data_flops}};
      if (ranks > 1) {
        j["comm_bytes"] = s.comm_bytes;  // this rank's gradient/parameter traffic
        j["buckets"] = s.buckets;
        j["buckets_in_backward"] = s.buckets_in_backward;
        if (r.zero == 3) j["prefetched"] = s.prefetched;
      }
      if (s.grad_norm) j["grad_norm"] = *s.grad_norm;  // before clipping
      if (s.eval_loss) {
        j["eval_loss"] = *s.eval_loss;  // null when not finite (JSON has no NaN)
        j["eval_ms"] = s.eval_seconds * 1e3;
        j["eval_flops"] = s.eval_flops;
      }
      if (r.fp16) {
        j["loss_scale"] = s.loss_scale;  // the scale this step's backward used
        j["skipped"] = s.skipped;
      }
      errno = 0;
      log << j.dump() << '\n';
      log.flush();
      check_log(log, o.log, step, errno);
    }
    if (!o.quiet && (tty || step % o.log_every == 0 || step == steps || s.eval_loss)) {
      const std::string line = detail::progress_line(s, r.seconds / static_cast<double>(r.done));
      // On a terminal the line is rewritten in place, but one with a held-out loss stays.
      open_line = tty && !s.eval_loss;
      out << (tty ? "\r\033[K" : "") << line << (open_line ? "" : "\n") << std::flush;
    }
    if (o.on_step) o.on_step(s);
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step != steps) save(step);
  }
  if (open_line) out << '\n';
  // No step to run (--steps 0, or resumed at the last step): the held-out loss of the weights
  // as they are, as nanoGPT's eval_only.
  if (held_out && r.done == 0 && !stopping()) {
    StepStats none;
    evaluate_held_out(r.start, none);
  }
  if (sync) sync->unshard();  // the model whole again on every rank (sampling, the caller)
  if (log.is_open()) {
    errno = 0;
    log.close();
    check_log(log, o.log, r.start + r.done, errno);
  }
  // 10. The final checkpoint and the accounting.
  r.last = r.start + r.done;
  if (r.done > 0 || r.start == 0) save(r.last);
  r.interrupted = stopping();
  r.signal = signals_ ? detail::StopSignals::received() : 0;
  for (const auto& s : model_.optimizer_state())
    r.state_bytes += s.tensor.nbytes();
  r.mfu = hw ? utilization(r.flops, r.seconds, *hw, mfu_dtype) / devices : 0.0;
  r.comm_bytes = sent_bytes() - comm_before;
  r.peak_flops = hw ? hw->peak(math_mode_of(mfu_dtype)) * devices : 0;
  r.math_mode = std::string(math_mode_name(math_mode_of(mfu_dtype)));
  if (o.device.kind != DeviceKind::cuda) r.peak_note = this_cpu_peak_note();
  return r;
}

double Trainer::evaluate(int64_t batches, int64_t first) {
  const TrainOptions& o = options_;
  if (batches < 1) throw UserError(fmt::format("evaluate: {} batches; expected at least 1", batches));
  if (first < 0) throw UserError(fmt::format("evaluate: first batch {} is negative", first));
  if (o.precision == "bf16") model_.set_compute_dtype(DType::bf16);
  else if (o.precision == "fp16") model_.set_compute_dtype(DType::f16);
  else if (o.precision != "fp32")
    throw UserError(fmt::format("--precision {}: expected fp32, bf16 or fp16", o.precision));
  const std::vector<NamedTensor> params = model_.parameters();
  if (!o.init.empty()) load_initial_parameters(o.init, params);
  const Device device = params.empty() ? o.device : params.front().tensor.device();
  detail::TrainBatches data(model_, o.data, o.data_path, o.seed, device);
  data.seek(first);
  NoGrad no_grad;
  double sum = 0;
  for (int64_t k = first; k < first + batches; ++k) {
    const double loss = model_.eval_loss(data.next(k)).item();
    if (!std::isfinite(loss))
      throw UserError(fmt::format("evaluate: the loss of batch {} is {}", k, loss));
    sum += loss;
  }
  return sum / static_cast<double>(batches);
}

std::string Trainer::sample() {
  const TrainOptions& o = options_;
  const int64_t T = o.data ? o.data->context : 0;
  if (T <= 0) throw UserError("sample needs the train block's data context (T)");
  GenerateOptions g;
  for (unsigned char c : o.sample)
    g.prompt.push_back(c);
  g.length = o.sample_length;
  g.context = T;
  g.temperature = o.temperature;
  g.top_k = o.top_k;
  g.top_p = o.top_p;
  g.seed = o.seed;
  std::string bytes;
  for (int64_t t : generate(model_, g).tokens)
    bytes.push_back(static_cast<char>(t));
  return detail::printable_utf8(bytes);
}

}  // namespace ein
