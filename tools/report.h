// The numbers of `ein report` (docs/report.md): a traced training step's FLOPs, bytes and
// saved activations per source expression (forward nodes from the trace, backward nodes from
// autodiff attributed back to the forward node they serve), the parameter census, and the
// memory and time ledgers. Static: nothing runs, no weights exist. Formatting is elsewhere
// (tools/report_summary.h and the report_*.cpp renderers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "script/script.h"
#include <ein/autograd.h>
#include <ein/hardware.h>
#include "tools/estimate.h"

namespace ein::report {

/// What to account for and on what hardware.
struct ReportOptions {
  std::string fn = "train.loss";   ///< the function traced (its example_types)
  const HardwareProfile* hw = nullptr;  ///< required
  MathMode math = MathMode::bf16;  ///< the peak column used for roofline and time
  double gpus = 1;                 ///< data-parallel devices
  double bucket_mb = 25;           ///< data parallel: gradient bytes per exchange (ein train's)
  double mfu = 0.4;                ///< model FLOPs utilization for the time estimate
  std::optional<double> tokens;    ///< training tokens (time section)
  /// The optimizer whose state the ledger counts; nullopt: the script's (its `state`
  /// declarations), AdamW's when the script has none.
  std::optional<napkin::Optimizer> optimizer;
  /// The state's convention (ein estimate's: fp32, mixed, mixed-bf16-grads); default: from
  /// the train block's precision.
  std::optional<napkin::Precision> precision;
  /// `ein train --precision fp32|bf16|fp16`: the step traced with that compute dtype, as ein
  /// train runs it (fp32 weights, gradients and state); nullopt: the train block's precision
  /// (fp32 when `precision` names one of ein estimate's conventions).
  std::optional<DType> compute;
  int depth = -1;                  ///< module depth rows are merged to (-1: no merging)
  Recompute recompute = Recompute::automatic;  ///< the plan the numbers are for (ein train's)
  double activation_budget = 1;  ///< with automatic: ein train --activation-budget (1: none)
};

/// One save/recompute plan of the step (autodiff's, as `ein train --recompute` runs it).
struct RecomputePlan {
  Recompute policy = Recompute::automatic;
  double activation_budget = 1;   ///< automatic's budget (autodiff.h); 1 for the other plans
  int64_t saved_activations = 0;  ///< forward values saved for the backward (inputs excluded)
  int64_t recompute_flops = 0;    ///< forward work the backward repeats
  int64_t recompute_matmul_flops = 0;  ///< of which contractions
  /// Of recompute_flops (and of its contractions): inside fused backward kernels, in every
  /// plan (BackwardCost::kernel_recompute); the rest is what the plan rebuilds.
  int64_t kernel_recompute_flops = 0, kernel_recompute_matmul_flops = 0;
  int64_t peak = 0;               ///< the activations' liveness peak as the step runs fused
  int64_t peak_with_gradients = 0;  ///< the same with the gradients as they are made
  /// Data parallel, per rank, under ZeRO 2 and 3: peak_with_gradients when the rank drops
  /// the gradients other ranks own as the backward hands their bucket to the exchange.
  std::vector<int64_t> zero2_peak_with_gradients;
};

/// One source expression within one module scope (or merged scopes, with --depth).
struct Row {
  std::string scope;       ///< module path, "" outside modules
  std::string location;    ///< "file:line:col" (file relative to the working folder), or "(no source)"
  std::string text;        ///< the expression's text
  std::string shape;       ///< the result's dtype and shape: "f32[8 1024 768]"
  int nodes = 0;           ///< forward graph nodes it made
  int64_t fwd_flops = 0, fwd_matmul_flops = 0, fwd_bytes = 0;
  int64_t bwd_input_flops = 0, bwd_weight_flops = 0, bwd_bytes = 0;
  int64_t recompute_flops = 0;  ///< excluded from model FLOPs
  int64_t saved_bytes = 0;      ///< its values the backward reads
  int64_t causal_flops = 0;     ///< FLOPs of attention score/value contractions (full count)
  double seconds = 0;           ///< roofline bound: max(flops/peak, bytes/bandwidth)
  bool memory_bound = false;    ///< bytes/bandwidth dominates
  uint32_t line = 0, column = 0;  ///< for sorting
  int first_node = 0;             ///< for sorting
  /// The contractions' FLOPs as a formula of the script's dims, like terms combined:
  /// "2·B·T·D²" (+ between unlike terms); "" if the row has no contraction.
  std::string formula;
  /// The same as factors, "2·8·1024·768·768" (+ between nodes).
  std::string formula_numeric;
  /// The result's shape in the script's dims: "B T 3·D".
  std::string symbolic_shape;
  /// Forward plus backward FLOPs.
  int64_t flops() const { return fwd_flops + bwd_input_flops + bwd_weight_flops; }
  /// Forward plus backward bytes.
  int64_t bytes() const { return fwd_bytes + bwd_bytes; }
};

/// A line of the memory ledger.
struct LedgerItem {
  std::string what;  ///< "parameters (f32)", ...
  double bytes = 0;  ///< the whole model's, not per device
};

/// The model's weights stored for inference in one format (napkin::weight_formats()): a float
/// format holds every float parameter in it; q8_0 and q4_0 quantize what `ein quantize`
/// quantizes (ein::quantizes(), its default rule) and keep the rest as stored, so `bytes` is
/// what that command writes for a checkpoint of the script, header aside.
struct InferenceWeights {
  std::string format;          ///< "fp32", "bf16", "fp16", "fp8", "q8_0", "q4_0"
  double bits_per_weight = 0;  ///< the format's nominal bits (8.5 for q8_0)
  int64_t bytes = 0;           ///< every parameter, tied ones once
  int64_t quantized_tensors = 0, quantized_params = 0;  ///< quantized formats: in blocks
  int64_t kept_tensors = 0, kept_bytes = 0;  ///< quantized formats: as stored (norms, biases)
  double smaller_by = 0;    ///< the parameters' bytes as stored / bytes (0 without parameters)
  double decode_bound = 0;  ///< tokens/s at batch 1 on one device: bandwidth / bytes (0: none)
  bool fits = true;         ///< bytes within one device's memory
};

/// Drawing one token with the key-value cache that `ein sample` derives from fn logits
/// (compiler/decode/decode_step.h), against fn logits over the whole window (--no-cache).
struct DecodeCost {
  bool has_logits = false;    ///< the train block has fn logits(x: i64[1 T])
  std::string why;            ///< why there is no decode step (empty: there is one)
  int64_t context = 0;        ///< T: the window, the caches' rows
  int64_t flops = 0, matmul_flops = 0;  ///< one token through the step
  int64_t bytes = 0;          ///< the step's unfused reads and writes (weights included)
  int64_t window_flops = 0;   ///< one token through fn logits over the window
  /// One token past the window through `ein sample`'s decoder: a pass that refills the caches
  /// from the first T - 1 tokens and a step (`refills`), or the window's pass, whichever
  /// compiler/decode/quantize_step.h's refills_past_the_window() picks, as the runtime does.
  int64_t past_window_flops = 0;
  bool refills = false;
  int64_t cache_bytes = 0;    ///< every attention's keys and values, T rows each
  int caches = 0;             ///< how many (two per attention layer)
  /// The same caches in bf16 (`ein sample --cache-dtype bf16`, with_cache_dtype()), and the
  /// step's unfused reads and writes with them.
  int64_t bf16_cache_bytes = 0, bf16_cache_step_bytes = 0;
  /// The weight matrices the step multiplies its row by that it reads from codes when
  /// sampled from an `ein quantize` file (compiler/decode/quantize_step.h), their f32 bytes,
  /// and their codes' and scales' bytes in q8_0 and q4_0.
  int matrices = 0;
  int64_t matrix_bytes = 0, q8_0_bytes = 0, q4_0_bytes = 0;
  /// The weights `ein sample`'s decoder holds (Decoder::weight_bytes(), with the model gone):
  /// from f32, and from q8_0 and q4_0 codes (the codes, and the float weights no product
  /// reads: embeddings, norms, biases, masks).
  int64_t f32_held_bytes = 0, q8_0_held_bytes = 0, q4_0_held_bytes = 0;
};

/// The held-out loss `ein train` scores with the train block's eval_data: each evaluation runs
/// the loss's forward over its batches (what the run logs as eval_flops).
struct HeldOutCost {
  bool present = false;        ///< the train block has eval_data (and this report is of fn loss)
  std::string why;             ///< why it is not priced (empty: it is)
  int64_t batches = 0;         ///< per evaluation, each rank its rows of each
  int64_t tokens = 0;          ///< per evaluation, all ranks'
  int64_t flops = 0;           ///< per evaluation, all ranks': batches · forward · ranks
  int64_t every = 0;           ///< the block's eval_every (0: after the last step only)
  int64_t steps = 0;           ///< the block's steps
  int64_t evaluations = 0;     ///< over those steps: every eval_every-th and the last
  double run_fraction = 0;     ///< their FLOPs over the training steps' model FLOPs
};

/// Everything a report says.
struct Report {
  std::string file, fn;
  std::string hw_name;
  double peak = 0, bandwidth = 0, device_memory = 0;
  std::string math;
  // parameters
  int64_t params_total = 0, params_trainable = 0, params_embedding = 0;
  int64_t param_bytes = 0;
  std::vector<std::string> embedding_names;
  std::vector<std::string> tied;  ///< "NAME (also ALIAS, ...)"
  std::vector<InferenceWeights> inference;  ///< the weights in each inference format
  DecodeCost decode;                        ///< sampling with the key-value cache
  HeldOutCost held_out;                     ///< the train block's eval_data
  // the dims formulas are written in, and those that repeat structure instead (layers)
  std::vector<script::DimInfo> dims;
  std::vector<std::string> structural_dims;
  // the step
  int64_t batch = 1, tokens_per_step = 1;
  std::string tokens_note;  ///< how tokens_per_step was found
  /// What tokens_per_step counts: "token" (token ids) or "sample" (the leading dim of the
  /// first argument, for scripts without token ids).
  std::string unit = "token";
  int64_t fwd_flops = 0, fwd_matmul_flops = 0, bwd_input_flops = 0, bwd_weight_flops = 0;
  int64_t recompute_flops = 0, fwd_bytes = 0, bwd_bytes = 0;
  int64_t kernel_recompute_flops = 0;  ///< of recompute_flops: inside fused backward kernels
  int64_t saved_total = 0, saved_activations = 0;
  int64_t causal_flops = 0;  ///< forward FLOPs of the attention score/value contractions
  bool has_backward = false;
  std::string backward_error;  ///< why there is no backward (autodiff refused an op)
  int forward_nodes = 0, backward_nodes = 0;
  std::vector<std::string> uncounted;  ///< nodes without a cost rule or attribution, loudly
  // attention shape for PaLM's formula (0 when not identified)
  int64_t layers = 0, heads = 0, head_dim = 0, seq = 0;
  std::vector<Row> rows;
  // memory
  std::string optimizer, precision;
  std::string compute = "fp32";     ///< the dtype the step was traced in (ein train --precision)
  int optimizer_states = 0;         ///< fp32 state tensors per parameter
  std::string optimizer_from;       ///< "the script's train block", "--optimizer", "assumed"
  double bytes_per_param = 0;
  std::vector<LedgerItem> ledger;   ///< params, grads, optimizer, activations, temporaries
  double state_bytes = 0;           ///< params + grads + optimizer
  double activation_bytes = 0;      ///< saved for backward (live when the forward ends)
  double temporaries = 0;           ///< the liveness peak beyond the saved activations
  double activation_peak = 0;       ///< the liveness peak: activation_bytes + temporaries
  std::string peak_at;              ///< where the peak happens: "backward of file:line:col (text)"
  double total_bytes = 0;           ///< state + activation_peak
  /// The allocator's peak in a training step: parameters and optimizer state, with the
  /// activations and the gradients made so far at their joint liveness peak (what ein train
  /// logs as peak_memory).
  double step_peak = 0;
  // The save/recompute plans (none, auto, blocks; `plans[chosen]` gives the numbers above).
  std::vector<RecomputePlan> plans;
  int chosen = 0;
  // activation checkpointing what-if: the blocks plan, each module of a list (blocks.0,
  // blocks.1, ...) keeping only the values it hands on and recomputed in its backward
  std::string checkpoint_scope;     ///< "blocks" (lists joined by ", "; "" when there is none)
  int checkpoint_modules = 0;
  double checkpoint_activations = 0;  ///< the blocks plan's liveness peak
  int64_t checkpoint_recompute_flops = 0;  ///< the blocks plan's recomputed forward work
  /// The activation-budget what-if: auto within each of kWhatIfBudgets (ein train
  /// --activation-budget), the trade of recomputed contractions for saved bytes.
  std::vector<RecomputePlan> budget_plans;
  double gpus = 1, mfu = 0;
  double bucket_mb = 25;  ///< data parallel: the gradient bucket size in MiB (ReportOptions::bucket_mb)
  std::optional<double> tokens;
  /// Data parallel over `gpus` ranks (mpirun -np N ein train): the bytes each rank sends per
  /// training step, the same at ZeRO 0, 1 and 2 (runtime/dist/gradient_sync.h's step_bytes;
  /// the run logs what it sent as comm_bytes). Empty for one device.
  std::vector<int64_t> comm_bytes;
  /// The same at ZeRO 3: the gradient exchange, then the parameter fetches (each rank's own
  /// parameters broadcast to the N − 1 others): every parameter the forward reads, and again
  /// those the backward graph reads (runtime/dist/gradient_sync.h). Per micro-step of a step
  /// without accumulation. Empty for one device or without a backward.
  std::vector<int64_t> zero3_comm_bytes;
  /// The same run's allocator peak per rank at ZeRO 1 (B per rank): step_peak less the
  /// optimizer state of the parameters other ranks own. At ZeRO 0 every rank's peak is
  /// step_peak.
  std::vector<double> zero_rank_peak;
  /// The same at ZeRO 2: zero_rank_peak less what dropping the gradients other ranks own
  /// during the backward saves (each goes when its bucket is handed to the exchange, as the
  /// backward finishes the bucket: RecomputePlan::zero2_peak_with_gradients).
  std::vector<double> zero2_rank_peak;
  /// The same at ZeRO 3: zero2_rank_peak less the parameters other ranks own, which a rank
  /// holds only while the graph nodes that read them run (fetched from their owner).
  std::vector<double> zero3_rank_peak;
  std::vector<double> owned_fraction;  ///< per rank: its share of the parameters' elements

  /// Backward FLOPs (input and weight gradients, recomputation excluded).
  int64_t bwd_flops() const { return bwd_input_flops + bwd_weight_flops; }
  /// Model FLOPs of one step: forward + backward.
  int64_t step_flops() const { return fwd_flops + bwd_flops(); }
  /// Bytes of one part of the training state (the whole model's) under optimizer/precision.
  double bytes_of(napkin::StatePart part) const;
};

/// The activation budgets the report's what-if plans auto within.
inline constexpr double kWhatIfBudgets[] = {0.75, 0.5, 0.25, 0};

/// A plan's name in the tables: the policy's (recompute_name), with auto's activation budget
/// when below 1 ("auto 0.6").
std::string plan_name(const RecomputePlan& plan);

/// Loads `file` without allocating, traces `options.fn` for its example types, differentiates
/// with respect to the float parameters and accounts for every node. Throws UserError or
/// RuntimeError for the user's mistakes.
Report make_report(const std::string& file, const std::vector<script::Setting>& sets,
                   const ReportOptions& options);

}  // namespace ein::report
