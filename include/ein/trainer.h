// ein::Trainer: the training loop of `ein train` as a library type, for a `.ein` script's train
// block or for C++ code. A model is a Trainable (parameters, a loss on a batch, an optimizer
// step); the Trainer adds batches from token files, precision and fp16 loss scaling, gradient
// accumulation and clipping, the learning-rate schedule, atomic checkpoints with exact resume,
// a JSON-lines log, the progress line, the summary and sampling. It owns no model and parses
// no command line: the `ein` CLI (tools/train_command.cpp) is a thin layer over it.
//
//   struct Regression : ein::Trainable {                     // a C++ model
//     ein::Tensor w = ein::zeros({16, 1}, ein::DType::f32).requires_grad_();
//     std::vector<ein::NamedTensor> parameters() override { return {{"w", w}}; }
//     std::vector<ein::Tensor> batch(int64_t k) override { ... return {x, y}; }
//     ein::Tensor loss(const std::vector<ein::Tensor>& b, int64_t) override { ... }
//     void optimizer_step(int64_t, double lr) override { ein::optim::SGD({w}, {.lr = lr}).step(); }
//   };
//   Regression model;
//   ein::TrainOptions options;  options.steps = 300;  options.lr = 0.1;
//   ein::TrainResult r = ein::Trainer(model, options).fit();  // r.losses, r.final_loss
//
//   ein::TrainScript s = ein::load_train_script("examples/gpt/byte_gpt.ein");  // a script
//   ein::Trainer(*s.model, s.options).fit();
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ein/device.h>
#include <ein/dtype.h>
#include <ein/quant_type.h>
#include <ein/quantize.h>
#include <ein/source.h>
#include <ein/tensor.h>

namespace ein {


namespace detail {
class StopSignals;  // api/stop_signals.h
}  // namespace detail

/// A tensor with its qualified name ("blocks.0.attn.qkv.weight"): checkpoint keys are
/// "model." + name for parameters and "optim." + name for optimizer state.
struct NamedTensor {
  std::string name;  ///< stable across runs: resuming matches tensors by it
  Tensor tensor;     ///< the tensor itself (not a copy): loading a checkpoint writes into it
};

/// What a Trainer trains: like a torch.nn.Module with its loss and optimizer attached.
/// Implement parameters(), loss() and optimizer_step(); batch() unless TrainOptions::data
/// gives token batches; the rest only for the features that need them.
class Decoder;  // below: logits() one token at a time

/// How a Decoder computes its steps.
struct DecoderOptions {
  /// Read the step's weight matrices from q8_0 or q4_0 codes (ein::quantized_matmul, on the
  /// CPU, f32 weights): each f32 matrix a row is multiplied by that `ein quantize` would
  /// quantize (ein::quantizes()) and whose values are its codes' own, as a quantized
  /// checkpoint loads or round_parameters_to_codes() leaves them, is quantized once when the
  /// decoder is made (blocks along its last axis, as `ein quantize` stores it: the same codes).
  /// The step then computes with the numbers the window's pass does. nullopt: float weights.
  std::optional<QuantType> weights;
  /// Parameters given as codes, by parameters() name or a training checkpoint's "model." +
  /// name (quantized_tensors() of an `ein quantize` file): a matrix among them that the step
  /// would read from `weights` codes takes these codes as they are instead of quantizing its
  /// values, so its parameter needs none: a script loaded without allocating
  /// (ScriptTrainOptions::allocate) and given only its other parameters' values
  /// (load_parameters(checkpoint, model, codes)) samples holding the codes alone. A pass that
  /// reads one of them as floats reads its dequantized values, held beside the codes.
  std::map<std::string, QuantizedTensor> codes;
  /// The key and value caches' dtype: nullopt (or the window's own) keeps the window's, bf16
  /// holds them in half the bytes of f32 and a step's attention reads half as much, the keys
  /// and values rounded to bf16 as they are written (the attention still computes in f32). On
  /// the CPU; nothing else.
  std::optional<DType> cache;
};

class Trainable {
 public:
  virtual ~Trainable() = default;
  /// The parameters to train: leaf tensors that require grad, in a fixed order.
  virtual std::vector<NamedTensor> parameters() = 0;
  /// The loss on one micro-batch: a 0-dim tensor recorded on the autograd tape. `micro_step`
  /// is 0-based over the whole run (step · accumulate + micro) and seeds random draws.
  virtual Tensor loss(const std::vector<Tensor>& batch, int64_t micro_step) = 0;
  /// One optimizer update of every parameter with a gradient, at 1-based `step` with the
  /// schedule's learning rate `lr` (the Trainer zeroes the gradients afterwards).
  virtual void optimizer_step(int64_t step, double lr) = 0;
  /// optimizer_step() with every gradient read as `grad_scale` times itself (the gradients
  /// themselves are left as they are): gradient clipping and loss-scale unscaling folded into
  /// the update, which saves them a pass over every gradient. Returns false, having done
  /// nothing, when the model has no such update (the default): the Trainer then scales the
  /// gradients in place and calls optimizer_step().
  virtual bool optimizer_step_scaled(int64_t /*step*/, double /*lr*/, double /*grad_scale*/) {
    return false;
  }
  /// The batch of micro-step `micro_step` when TrainOptions::data is unset; a function of
  /// it (and the seed), so that a resumed run sees the same batches. Default: UserError.
  virtual std::vector<Tensor> batch(int64_t micro_step);
  /// Optimizer state to checkpoint and resume (default none: a resume restores parameters).
  virtual std::vector<NamedTensor> optimizer_state() { return {}; }
  /// Creates the optimizer state at its initial values, so a checkpoint can load into it.
  virtual void init_optimizer_state() {}
  /// ZeRO: the same for the parameters marked in `owned` only (one flag per parameters()
  /// entry); this rank updates only those, so it keeps state only for them. Default: all.
  virtual void init_optimizer_state_of(const std::vector<bool>& owned);
  /// Gives parameter `name` (as parameters() names it) the tensor `value`, which has its
  /// declared shape and dtype, on any device: how a model loaded without allocating gets its
  /// values (load_parameters(checkpoint, model)). Default: UserError.
  virtual void set_parameter(const std::string& name, const Tensor& value);
  /// Mixed precision: computes activations in `dtype` (bf16 or f16) from now on, keeping
  /// f32 master weights. Default: UserError (the model has only fp32).
  virtual void set_compute_dtype(DType dtype);
  /// Next-token logits (1 T V) for tokens (1 T), for Trainer::sample(). Default: UserError.
  virtual Tensor logits(const Tensor& tokens);
  /// A Decoder of logits() for windows of `context` tokens: one token at a time from a
  /// key-value cache, for generate(). Null, with `why` saying why, when the model has none
  /// (the default: "the model has no decode step").
  /// `options` says how its steps compute.
  virtual std::unique_ptr<Decoder> decoder(int64_t context, std::string& why,
                                           const DecoderOptions& options);
  std::unique_ptr<Decoder> decoder(int64_t context, std::string& why) {
    return decoder(context, why, DecoderOptions{});
  }
  /// The loss on one batch as in evaluation (torch's model.eval(): no dropout), for
  /// Trainer::evaluate(); called inside a NoGrad scope. Default: loss(batch, 0), which is right
  /// for a model without random draws.
  virtual Tensor eval_loss(const std::vector<Tensor>& batch);
};

/// logits() one token at a time: each call takes the next token and gives the logits of the
/// one after it, as logits() of the window of the tokens so far gives at its last row, but
/// from a key-value cache of the earlier rows instead of recomputing them
/// (compiler/decode/decode_step.h). It holds up to capacity() tokens, the window's length.
/// It reads the parameters as they are when it is made: what depends on them alone (a bf16
/// copy of a weight) is computed then, so make a new one after changing them.
class Decoder {
 public:
  virtual ~Decoder() = default;
  /// Logits (V) after `token`, which takes position position(); advances it. UserError past
  /// capacity().
  virtual Tensor next(int64_t token) = 0;
  /// Logits (V) after the last of `tokens` (1 to capacity() of them, from position 0: the
  /// decoder must be empty), in one pass of logits() over the window that also fills the
  /// caches; position() becomes their number. For a long prompt: one pass over the window's T
  /// rows reads each weight once, where a step per token reads them all every token.
  virtual Tensor prefill(const std::vector<int64_t>& tokens) = 0;
  /// Logits (V) after the last of `tokens` (capacity() of them), logits() of them at their
  /// last row: a token past the window, whose positions have all shifted. By one pass over
  /// them, or, where it costs fewer FLOPs (a large vocabulary: the LM head is most of a pass),
  /// by a pass over the first T - 1 that only refills the caches and a step for the last (the
  /// default: reset() and prefill()). The decoder is left to be reset().
  virtual Tensor window(const std::vector<int64_t>& tokens) {
    reset();
    return prefill(tokens);
  }
  /// FLOPs a next() counts (the decode step's, as `ein report` predicts them), and a prefill()
  /// (logits() over the window's).
  virtual int64_t step_flops() const = 0;
  virtual int64_t prefill_flops() const = 0;
  /// FLOPs a window() counts (`ein report`'s past_window_flops_per_token).
  virtual int64_t window_flops() const { return prefill_flops(); }
  /// How many tokens it has taken: the next one's position.
  virtual int64_t position() const = 0;
  /// How many tokens it holds at most: the window's length T.
  virtual int64_t capacity() const = 0;
  /// The bytes of its key and value caches.
  virtual int64_t cache_bytes() const = 0;
  /// How many weight matrices its steps read from quantized codes (DecoderOptions::weights),
  /// and the bytes of their codes and scales; 0 and 0 when they read float weights.
  virtual int64_t quantized_matrices() const { return 0; }
  virtual int64_t quantized_bytes() const { return 0; }
  /// The bytes of the weights it holds: the float tensors its passes still read (and what it
  /// computed from them once), and the codes. Both passes read a matrix read from codes from
  /// its codes, so it lets go of the float one: with the model gone, that is what sampling
  /// keeps in memory besides the caches. 0 when it does not say.
  virtual int64_t weight_bytes() const { return 0; }
  /// Forgets every token (position 0 again).
  virtual void reset() = 0;
};

/// Token batches from a file: `x` windows of `context` tokens and `y` the same shifted by one.
struct TokenDataOptions {
  std::string kind = "tokens";   ///< "tokens" (a token file) or "bytes" (text, one token a byte)
  std::string path;              ///< the file
  std::string dtype;             ///< tokens: "u16" or "i32" (empty: from the extension)
  int64_t batch = 1;             ///< B
  int64_t context = 1;           ///< T
  std::string order = "random";  ///< "random" or "sequential"
  /// The part of the file used: tokens [floor(part_begin · n), floor(part_end · n)) of its n,
  /// so one file holds a training and a held-out split (nanoGPT's first 90% and last 10%:
  /// parts 0 to 0.9 and 0.9 to 1). 0 ≤ part_begin < part_end ≤ 1.
  double part_begin = 0;
  double part_end = 1;
  /// Where a script set this (its `data = ...`), for errors about the file; null elsewhere.
  SourcePtr source;
  SourceRange range;
};

/// One finished optimizer step, as logged.
struct StepStats {
  int64_t step = 0;         ///< 1-based
  int64_t steps = 0;        ///< the step the run stops at
  double loss = 0;          ///< mean loss over the step's micro-batches
  double lr = 0;            ///< the learning rate the optimizer used
  double seconds = 0;       ///< the step's wall time, tracing and compilation included
  int64_t tokens = 0;       ///< batch elements (x.numel() summed over micro-batches and ranks)
  double flops = 0;         ///< model FLOPs: the loss's forward and backward, as ein report's
  double recompute_flops = 0;  ///< forward work the backward repeated (not model FLOPs)
  double optimizer_flops = 0;  ///< gradient unscaling, clipping and the optimizer update
  double data_flops = 0;       ///< the batch function's work (fn batch)
  double mfu = 0;           ///< fraction of the device's dense peak
  double loss_scale = 1;    ///< fp16: the scale this step's backward used
  /// The 2-norm of the step's gradients (averaged over ranks and micro-batches, unscaled,
  /// before clipping), when the step computed it: with clipping, or fp16's overflow check.
  std::optional<double> grad_norm;
  bool skipped = false;     ///< fp16: gradients overflowed and the update was skipped
  /// The allocator's peak on the device during the step (max_memory_allocated, reset when the
  /// step starts): parameters, gradients, optimizer state, activations and temporaries.
  int64_t peak_memory = 0;
  int64_t comm_bytes = 0;   ///< distributed: gradient and parameter bytes this rank sent
  /// Distributed: the step's gradient buckets, and how many of them the backward handed to
  /// the exchange while it ran (TrainOptions::overlap; the rest waited for its end).
  int64_t buckets = 0;
  int64_t buckets_in_backward = 0;
  /// ZeRO 3: parameter fetches started before the node reading them ran (prefetch).
  int64_t prefetched = 0;
  /// The held-out loss after this step's update (TrainOptions::eval_data), when the step
  /// evaluated: the mean of Trainable::eval_loss() over the evaluation's batches.
  std::optional<double> eval_loss;
  double eval_seconds = 0;  ///< the evaluation's wall time (not in `seconds`)
  double eval_flops = 0;    ///< the evaluation's FLOPs: the loss's forward over its batches
};

/// Every knob of `ein train`; the names follow its flags and the train block's settings.
struct TrainOptions {
  int64_t steps = 100;               ///< the step to stop at (with resume: the total)
  uint64_t seed = 0;                 ///< data order, sampling; recorded in checkpoints
  Device device = cpu();             ///< where the model lives (pinned batch copies on a GPU)
  std::string precision = "fp32";    ///< "fp32", "bf16" or "fp16" (dynamic loss scaling)
  /// What the backward saves and what it recomputes (autograd.h's Recompute): "auto" (saves the
  /// forward values the gradients read, rebuilding cheap elementwise ones), "none" (saves them
  /// all), "blocks" (activation checkpointing of each module of a list, e.g. a GPT's blocks)
  /// or "full" (saves nothing but inputs; the backward recomputes the forward)
  std::string recompute = "auto";
  /// Under recompute "auto": the fraction of its saved activation bytes the forward may keep
  /// (autograd.h's activation_budget; 1: all). Below 1 the backward recomputes contractions.
  double activation_budget = 1;
  double lr = 1e-3;                  ///< the peak learning rate
  std::string schedule = "constant"; ///< "constant" or "cosine" (linear warmup, nanoGPT's)
  int64_t warmup = 0;                ///< cosine: warmup steps
  double min_lr_ratio = 0.1;         ///< cosine: the floor as a fraction of lr
  double clip = 0;                   ///< global-norm gradient clipping (0: off)
  int64_t accumulate = 1;            ///< micro-batches per optimizer step
  std::optional<TokenDataOptions> data;  ///< token batches; unset: Trainable::batch()
  std::string data_path;             ///< overrides data->path (`--data`)
  /// Held-out batches scored by Trainable::eval_loss() (no dropout, no gradients) every
  /// eval_every steps and after the last: a validation loss. Sequential order scores the same
  /// windows every time (the first eval_batches of one pass; 0: up to 200), random order
  /// eval_batches random batches (0: 20), the same ones every time (nanoGPT's estimate_loss
  /// draws new ones). Neither the training batches nor any random draw of the run depend on
  /// it, so a run trains to the same bits with or without it.
  std::optional<TokenDataOptions> eval_data;
  std::string eval_data_path;        ///< overrides eval_data->path (`--eval-data`)
  int64_t eval_every = 0;            ///< steps between evaluations (0: after the last only)
  int64_t eval_batches = 0;          ///< batches an evaluation scores (0: see eval_data)
  std::string checkpoint;            ///< directory of step_N.safetensors ("" none)
  int64_t checkpoint_every = 0;      ///< steps between checkpoints (0: only at the end)
  int keep = 3;                      ///< checkpoints kept
  bool resume = false;               ///< continue from the latest good checkpoint
  std::string init;                  ///< initial parameters from a safetensors file
  std::string log;                   ///< a JSON-lines file, one object per step ("" none)
  int64_t log_every = 10;            ///< progress lines when not on a terminal
  bool quiet = false;                ///< no progress line, no "wrote" notes
  std::string sample;                ///< a prompt to continue with sample() ("" none)
  int64_t sample_length = 0;         ///< tokens sample() adds
  double temperature = 1.0;          ///< sampling temperature (0: greedy)
  int64_t top_k = 0;                 ///< sampling: the k most likely tokens only (0: all)
  double top_p = 1.0;                ///< sampling: the nucleus of that probability (1: all)
  std::ostream* out = nullptr;       ///< progress and notes (nullptr: std::cerr)
  std::string name = "train";        ///< the prefix of notes ("ein train: resumed from ...")
  std::map<std::string, std::string> metadata;  ///< added to every checkpoint's metadata
  bool handle_signals = false;       ///< SIGINT/SIGTERM stop after the current step
  std::function<void(const StepStats&)> on_step;  ///< called after every step
  /// Distributed runs (a process of `mpirun -np N`; see docs/distributed.md): each rank reads
  /// its own rows of every global batch, and gradients are averaged across ranks in a fixed
  /// order. `zero` 1 shards the optimizer state (each rank updates the parameters it owns,
  /// then all gather them), 2 also the gradients, 3 also the parameters (a rank holds the
  /// ones it owns; the forward and backward fetch the others as the graph nodes that read them
  /// run, and free them after). One process: no effect.
  int zero = 0;
  double bucket_mb = 25;             ///< gradient bytes per exchange, in MiB (DDP's default)
  /// Exchange each bucket as soon as the backward has finished its gradients, beside the rest
  /// of the backward (DDP's overlap), rather than after it. The same bits either way.
  bool overlap = true;
};

/// What fit() did.
struct TrainResult {
  int64_t start = 0;            ///< the step it resumed from (0: a fresh run)
  int64_t done = 0;             ///< steps run
  int64_t last = 0;             ///< start + done
  bool interrupted = false;     ///< stopped by stop() or a signal
  int signal = 0;               ///< the signal that stopped it (SIGINT, SIGTERM); 0 otherwise
  double final_loss = 0;        ///< the last step's loss (NaN when none ran)
  std::vector<double> losses;   ///< every step's loss, in order
  /// Every evaluation (TrainOptions::eval_data): the step after which it ran, and the loss.
  std::vector<std::pair<int64_t, double>> eval_losses;
  int64_t eval_batches = 0;     ///< batches an evaluation scored (this rank's rows of each)
  int64_t eval_tokens = 0;      ///< tokens an evaluation scored (all ranks' rows)
  double eval_seconds = 0;      ///< summed evaluation times (not in `seconds`)
  double eval_flops = 0;        ///< summed evaluation FLOPs (not in `flops`)
  int64_t parameters = 0;       ///< parameter count (elements)
  int64_t parameter_bytes = 0;  ///< their bytes (and the gradients' bytes)
  int64_t state_bytes = 0;      ///< the optimizer state's bytes
  int64_t peak_memory = 0;      ///< peak allocated bytes on the device
  int64_t tokens_per_step = 0;  ///< the last step's batch elements
  double flops = 0;             ///< model FLOPs of every step
  double seconds = 0;           ///< summed step times
  double mfu = 0;               ///< flops / seconds against the peak, as a fraction
  double peak_flops = 0;        ///< the dense peak used for MFU (0: unknown hardware)
  std::string hardware;         ///< "this CPU's", "the H100 SXM's", ...
  std::string peak_note;        ///< "" or why the peak may be low (this_cpu_peak_note())
  std::string math_mode;        ///< the peak's arithmetic: "fp32", "bf16", ...
  bool fp16 = false;            ///< dynamic loss scaling was on
  int64_t skipped_steps = 0;    ///< fp16: steps skipped for overflowing gradients
  double loss_scale = 1;        ///< fp16: the final scale
  int world_size = 1;           ///< processes the run was spread over (mpirun -np)
  int zero = 0;                 ///< the ZeRO stage used
  int64_t comm_bytes = 0;       ///< bytes this rank sent to other ranks over the run
  /// The plan's bytes a step sends (gradients, parameters). ZeRO 3: an upper bound, counting
  /// two fetches of every parameter per micro-step; the backward fetches only the parameters
  /// its gradient rules read.
  int64_t comm_bytes_per_step = 0;
};

/// Runs the training loop over a Trainable (which must outlive it).
class Trainer {
 public:
  /// Checks nothing yet: fit() does, and throws UserError for bad options.
  Trainer(Trainable& model, TrainOptions options);
  /// Stops the signal watcher fit() started and restores the handlers and signal mask.
  ~Trainer();
  /// Trains to options.steps (resuming, logging and checkpointing as the options say) and
  /// returns what happened. UserError for a bad option, a missing file or a non-finite loss
  /// (the last checkpoint is kept).
  TrainResult fit();
  /// The options.sample prompt continued by options.sample_length tokens drawn from
  /// logits() at options.temperature (bytes; invalid UTF-8 printed as U+FFFD), in windows
  /// of the data's context: generate() with options.seed. UserError without a data context.
  std::string sample();
  /// The mean of Trainable::eval_loss() over the batches of micro-steps first, ..., first +
  /// batches - 1 (the ones fit() would train on from there: options.data and --data, or
  /// Trainable::batch()), with no gradients recorded and the parameters as they are now: a
  /// validation loss, or the same batches scored before and after a change to the weights
  /// (`ein quantize --script`). Applies options.precision and options.init. UserError for
  /// batches < 1, a missing data file or a non-finite loss.
  double evaluate(int64_t batches, int64_t first = 0);
  /// Asks fit() to stop after the current step (safe from another thread).
  void stop() { stop_.store(true); }
  /// The options as given.
  const TrainOptions& options() const { return options_; }

  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

 private:
  Trainable& model_;                ///< what fit() trains (not owned)
  TrainOptions options_;            ///< as given to the constructor
  std::atomic<bool> stop_{false};   ///< set by stop(): fit() ends after the current step
  std::unique_ptr<detail::StopSignals> signals_;  ///< handle_signals: the watcher thread
};

/// The batches one evaluation of options.eval_data scores at `ranks` ranks (each rank its rows
/// of every batch): what fit() reports as TrainResult::eval_batches, for `ein report`. Opens
/// the file; 0 without eval_data. UserError as fit() gives it for a missing file or a part
/// without one whole batch.
int64_t held_out_batches(const TrainOptions& options, int ranks = 1);

/// Blocks SIGINT and SIGTERM in the calling thread, so that every thread it starts afterwards
/// (oneTBB's and OpenMP's workers, data loaders) inherits the block, and a Trainer with
/// handle_signals receives them on its own watcher thread instead of interrupting a compute
/// thread. Call it at the start of main(), before anything starts threads; `ein train` does.
/// A signal that arrives before fit() stays pending until fit() takes it: the run then stops
/// before its first step (writing the step-0 checkpoint).
void block_stop_signals();

/// The `ein train` summary of a run on stdout: steps, final loss, parameters, FLOPs, MFU and
/// peak memory by category (and the fp16 loss-scaling line). `what` names the model.
std::string format_summary(const TrainResult& result, std::string_view what);

/// What generate() draws: nanoGPT's sample.py, token by token.
struct GenerateOptions {
  std::vector<int64_t> prompt;  ///< the tokens to continue (at least one; bytes for a byte model)
  int64_t length = 0;           ///< tokens to add
  int64_t context = 0;          ///< T: logits() takes windows of T tokens
  double temperature = 1.0;     ///< logits are divided by it; 0 takes the most likely token
  int64_t top_k = 0;            ///< draw among the k most likely tokens only (0: among all)
  /// Nucleus sampling (Holtzman et al. 2019; Hugging Face's top_p): after temperature and
  /// top_k, draw among the most likely tokens whose probabilities reach top_p together (each
  /// kept while the mass before it is below top_p, every token as likely as the last kept
  /// too). 1: among all. In (0, 1].
  double top_p = 1.0;
  uint64_t seed = 0;            ///< the draws (std::mt19937_64)
  /// Draw from the model's Decoder (its key-value cache) while the tokens fit in one window;
  /// false, or a model without one: logits() of the whole window for every token.
  bool cache = true;
  /// How the Decoder computes (its weights from quantized codes, DecoderOptions::weights).
  DecoderOptions decoder;
  /// Called with each token as it is drawn (`ein sample` prints it then); its time is left
  /// out of Generated::token_seconds.
  std::function<void(int64_t token)> on_token;
};

/// What generate() produced, and how long it took.
struct Generated {
  std::vector<int64_t> tokens;  ///< the prompt, then the tokens drawn
  double seconds = 0;           ///< all of it: logits() calls and draws
  double first_seconds = 0;     ///< the first token's share (a first call traces and compiles)
  std::vector<double> token_seconds;  ///< each draw's time, logits() call included
  /// FLOPs the logits() and Decoder calls ran (FlopCounter's count, on the calling thread):
  /// per token, the forward of the model over a whole window, as `ein report --fn
  /// train.logits` counts it, or with the cache the forward of one row.
  int64_t flops = 0;
  /// How many tokens (prompt tokens included) went through the Decoder; 0 without one.
  int64_t cached_tokens = 0;
  /// Of those, how many went through its one-token steps (Decoder::next()), and their FLOPs
  /// (steps · Decoder::step_flops()); the rest, the prompt, went through one prefill().
  int64_t steps = 0;
  int64_t step_flops = 0;
  /// Bytes of the Decoder's caches (0 without one).
  int64_t cache_bytes = 0;
  /// The weight matrices the Decoder's steps read from quantized codes, and their bytes
  /// (GenerateOptions::decoder; Decoder::quantized_matrices()).
  int64_t quantized_matrices = 0;
  int64_t quantized_bytes = 0;
  /// Why no Decoder was used (empty when one was, or options.cache was false).
  std::string uncached;
};

/// Continues options.prompt by options.length tokens, each drawn from model.logits() of the
/// last T tokens (fewer at first: right-padded with token 0, which a causal model ignores, so
/// one traced graph serves every position) at the last real position: softmax of logits /
/// temperature over the top_k largest (ties with the k-th kept, as nanoGPT). While the tokens
/// fit in one window and options.cache is set, the same logits come from model.decoder(T)
/// instead, a step per token from its key-value cache; a prompt whose steps would take
/// longer than one pass over the window (a step's FLOPs run about 16x slower: it reads every
/// weight for one row) goes in through Decoder::prefill(). A model without a decoder says
/// why in Generated::uncached. Runs without gradients. UserError for an empty prompt, a negative length or top_k, a temperature that is
/// negative or not a number, T < 1, and logits holding NaN or +inf or only -inf (naming the
/// position), or a prompt token the model's vocabulary lacks.
Generated generate(Trainable& model, const GenerateOptions& options);

/// The same from a Decoder alone (made by model.decoder(options.context), which the model
/// need not outlive): its steps while the tokens fit in the window, and past it window() of
/// the last T tokens, which is logits() of that window (nanoGPT's recomputation).
/// options.cache and options.decoder are not read; the decoder is reset() first, so one
/// serves many samples. UserError as above, and for a context other than its capacity().
Generated generate(Decoder& decoder, const GenerateOptions& options);

/// Copies a checkpoint's tensors into `params`, as `ein train --init` does: each parameter
/// under its own name, or an `ein train` checkpoint's "model." + name; a quantized file (`ein
/// quantize`) loads as the values its codes stand for, in the parameters' dtypes. Extra tensors
/// (the optimizer state) are ignored. RuntimeError naming the tensor for a missing one or a
/// shape that differs.
void load_parameters(const Checkpoint& checkpoint, const std::vector<NamedTensor>& params);

/// load_safetensors() of the tensors load_parameters() can read for `params` alone (under each
/// one's name or "model." + name, or their ".qcodes" and ".qscales"): a training checkpoint's
/// optimizer state, twice the weights under AdamW, is not read.
Checkpoint load_parameter_tensors(const std::string& path, const std::vector<NamedTensor>& params);

/// The same into `model`, whose parameters may have no values yet (a script loaded without
/// allocating, ScriptTrainOptions::allocate): those are given the checkpoint's tensors through
/// set_parameter() — a quantized one's dequantized values — without a copy where dtype and
/// device match. A parameter whose codes are in `codes_only` (DecoderOptions::codes, as
/// quantized_tensors() gives them) and that has no value is left without one: the decoder
/// reads its codes. RuntimeError naming the tensor as above.
void load_parameters(const Checkpoint& checkpoint, Trainable& model,
                     const std::map<std::string, QuantizedTensor>& codes_only = {});

/// Rounds, in place, every parameter `ein quantize` would quantize (ein::quantizes()) to the
/// values of its `type` codes, dequantize(quantize(p)): the model a quantized checkpoint of
/// it loads as, and whose matrices a Decoder can read from codes (DecoderOptions::weights).
void round_parameters_to_codes(const std::vector<NamedTensor>& params, QuantType type);

/// The device `spec` names: "auto" (cuda:0 when a driver sees a GPU, else the CPU), "cpu",
/// "cuda" or "cuda:N". UserError ("--device SPEC: ...") for another spec or a missing GPU.
Device select_device(std::string_view spec);
/// The driver's name of a GPU ("NVIDIA H100 80GB HBM3"); "cpu" for the CPU.
std::string device_name(Device device);

/// How load_train_script() loads a script.
struct ScriptTrainOptions {
  std::vector<std::pair<std::string, std::string>> sets;  ///< `--set NAME=VALUE` overrides
  uint64_t seed = 0;      ///< parameters, random draws, data order
  Device device = cpu();  ///< where parameters and optimizer state live
  /// Allocate and initialise the parameters. Without, they have shapes and dtypes only (as
  /// PyTorch's meta device): nothing is drawn and no memory is taken until set_parameter() or
  /// load_parameters(checkpoint, model) gives them values; a function that reads one before
  /// fails with a UserError naming it. `ein sample` loads a quantized checkpoint so.
  bool allocate = true;
};

/// A `.ein` script's train block, ready for a Trainer.
struct TrainScript {
  std::unique_ptr<Trainable> model;  ///< its modules, fn loss, fn batch, optimizer, fn logits
  TrainOptions options;              ///< its settings (steps, lr, data, ...), seed and device
};

/// Loads `path` and its train block (defined in script/; link ein_script or ein::ein).
/// UserError for a script mistake or a script without a train block.
TrainScript load_train_script(const std::string& path, const ScriptTrainOptions& options = {});

}  // namespace ein
