// `.ein` scripts as programs (docs/language.md): a script is parsed (dsl/script_parser.h),
// its imports resolved (the script's folder, then stdlib/), its dims and lets bound (`--set`
// overrides them), and its train block's members built: modules instantiate their parameters
// from one seed. Functions are traced, for the sizes of each call, into one Graph IR per call
// signature, checked on the way (named dims unify across calls; a mismatch is reported at the
// call and at the declaration), and run fused with autograd (api/tape.h).
//
//   auto p = ein::script::Program::load("examples/cruncher.ein", {});
//   auto y = p->call("forward", {x});          // a top-level fn, or "train.loss"
//   for (auto& [name, t] : p->parameters()) ...  // "layers.0.weight", ...
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/decode/decode_step.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/lower_patterns.h"
#include "dsl/limits.h"
#include <ein/tensor.h>

namespace ein {
class Decoder;         // include/ein/trainer.h
struct DecoderOptions;  // include/ein/trainer.h
struct TrainOptions;    // include/ein/trainer.h
}  // namespace ein

namespace ein::script {

/// `--set NAME=VALUE`: overrides the `dim` or `let` called NAME in the main script.
struct Setting {
  std::string name;
  std::string value;
};

/// How a script is loaded.
struct LoadOptions {
  std::vector<Setting> sets;           ///< overrides, checked: unknown names are errors
  uint64_t seed = 0;                   ///< parameters, random inputs and data order
  std::vector<std::string> stdlib;     ///< where `import name` looks after the script's folder
  /// Allocate and initialise parameters. Without (static checks, reports) parameters have
  /// shapes and dtypes only: functions trace, nothing runs, and a 7 B model loads instantly.
  bool allocate = true;
  /// Where parameters, optimizer state, constants and random draws live, and so where every
  /// traced function runs (initial values are drawn on the host, then moved: a seed gives the
  /// same parameters on every device).
  Device device = cpu();
  /// Replace attention written with einsum and softmax by one FlashAttention kernel
  /// (compiler/fuse/attention.h) in every traced function. EIN_ATTENTION=unfused in the
  /// environment turns it off too (for comparisons).
  bool fused_attention = true;
  /// Replace a contraction read only by cross_entropy (an LM head) by one tiled kernel that
  /// never holds the logits (compiler/fuse/cross_entropy.h). EIN_CROSS_ENTROPY=unfused turns
  /// it off too.
  bool fused_cross_entropy = true;
  /// Loop and comprehension iterations one trace (or the loading) may run: at most
  /// limits::kMaxLoopIterations (a larger value counts as that). Lower it to bound the work an
  /// untrusted script can ask for: a layer count is a loop, so a script that asks for more
  /// layers fails at its loop with a UserError instead of tracing them (the `.ein` fuzz target
  /// uses 16, so a mutated `dim L = 344` costs an error, not seconds).
  int64_t max_loop_iterations = limits::kMaxLoopIterations;
};

/// A parameter's name, shape and dtype (what exists without allocating).
struct ParamInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  /// Other names of the same tensor (tied weights: reachable from several modules);
  /// the parameter counts once, under `name`.
  std::vector<std::string> aliases;
};

/// Where a traced node came from: the innermost expression being evaluated when the node was
/// made, and the module instance whose fn was running.
struct NodeSource {
  std::string file;  ///< the .ein file as named when loaded ("" for nodes of no expression)
  uint32_t line = 0, column = 0;  ///< 1-based
  std::string text;  ///< the expression's text (its first line)
  std::string scope; ///< the module's qualified name ("blocks.0.attn"; "" outside modules)
};

/// A traced function with the origin of every node, for reports.
struct TraceInfo {
  Graph graph;
  std::vector<NodeSource> sources;  ///< one per node of graph
  /// One per graph input, in InputAttr order: "param:NAME" (its ParamInfo name), "arg:I" (the
  /// function's argument I), "constant" (ones, arange, ...) or "random" (randn, dropout).
  std::vector<std::string> inputs;
  /// Per node: the module of a list (a GPT's blocks.3) whose code made it, numbered in order of
  /// first use, -1 outside every list: what Recompute::blocks checkpoints.
  std::vector<int> blocks;
};

/// A `dim` of the main script with its value (after `--set`).
struct DimInfo {
  std::string name;
  int64_t value = 0;
};

/// The train block's optimizer as declared: what exists without allocating.
struct OptimizerInfo {
  std::string name;                 ///< its declaration's name ("AdamW")
  std::vector<std::string> states;  ///< per-parameter state tensors, in declaration order ("m", "v")
};

/// A tensor with its qualified name: "blocks.0.attn.qkv.weight".
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

/// Where a training batch comes from (the train block's `data = bytes(...)`/`tokens(...)`).
struct DataSpec {
  std::string kind;            ///< "bytes" (a text file, one token per byte) or "tokens"
  std::string path;            ///< as resolved against the script's folder
  std::string dtype;           ///< tokens: "u16" or "i32" (empty: from the extension)
  int64_t batch = 1;           ///< B
  int64_t context = 1;         ///< T
  std::string order = "random";  ///< "random" or "sequential"
  double part_begin = 0, part_end = 1;  ///< the fractions of the file's tokens used
  SourcePtr source;              ///< the script, and the range of its `data = ...` value
  SourceRange range;
};

/// The train block's settings, with defaults for what it leaves out.
struct TrainSpec {
  int64_t steps = 100;
  std::optional<DataSpec> data;  ///< absent: the block's `fn batch()` makes each batch
  std::optional<DataSpec> eval_data;  ///< held-out batches for the eval loss (absent: none)
  int64_t eval_every = 0;        ///< steps between eval losses (0: after the last step only)
  int64_t eval_batches = 0;      ///< batches an eval loss scores (0: TrainOptions' default)
  double clip = 0;               ///< global-norm clipping (0: off)
  int64_t log_every = 10;
  int64_t checkpoint_every = 0;  ///< 0: only at the end
  int64_t accumulate = 1;        ///< micro-batches per optimizer step
  std::string schedule = "constant";  ///< "constant" or "cosine"
  int64_t warmup = 0;
  double min_lr_ratio = 0.1;     ///< cosine: floor = ratio · lr
  double lr = 1e-3;              ///< the optimizer's `lr`
  std::string sample;            ///< a prompt to continue after training (empty: none)
  int64_t sample_length = 0;
  double temperature = 1.0;
  int64_t top_k = 0;             ///< the sample's top-k (0: all)
  double top_p = 1.0;            ///< the sample's nucleus (1: all)
  std::string precision = "fp32";
};

/// The block's settings as ein::Trainer options (script_trainable.cpp): what `ein train`
/// trains with before its flags, and what `ein report` prices (the held-out loss).
TrainOptions train_options(const TrainSpec& spec);

class Interpreter;
struct ProgramState;
struct ProgramParameter;
struct Traced;

/// A loaded script.
class Program {
 public:
  /// Parses `path` and what it imports, applies the settings, evaluates the top level and
  /// builds the train block's members. Throws UserError (with carets) for mistakes.
  static std::unique_ptr<Program> load(const std::string& path, const LoadOptions& options);
  ~Program();

  /// Functions callable by name: top-level `fn`s, then the train block's as "train.NAME".
  std::vector<std::string> functions() const;
  /// The Graph IR of `fn` for inputs of these types (nothing runs).
  Graph trace(const std::string& fn, const std::vector<TensorType>& args);
  /// The same with each node's source expression and module, and what feeds each input.
  /// `training` traces dropout as in training.
  TraceInfo trace_info(const std::string& fn, const std::vector<TensorType>& args,
                       bool training = true);
  /// Input types for `fn` from its annotations, dims taken from the script's scope or, for
  /// dims bound nowhere, `free_size`. Throws UserError for an unannotated parameter.
  std::vector<TensorType> example_types(const std::string& fn, int64_t free_size = 8);
  /// Runs `fn` (traced once per input types, fused, recorded on the autograd tape).
  std::vector<Tensor> call(const std::string& fn, const std::vector<Tensor>& args);
  /// Traces every function for example_types (the static check of `ein check`); returns the
  /// number of functions checked.
  int check_all();

  /// Whether the script has a train block.
  bool has_train() const;
  /// The train block's settings.
  const TrainSpec& train_spec() const;
  /// The trainable parameters of the train block's modules, in declaration order (tied
  /// parameters once). Their tensors are undefined when loaded without allocating.
  std::vector<NamedTensor> parameters() const;
  /// The same parameters' names, shapes and dtypes.
  std::vector<ParamInfo> parameter_info() const;
  /// Gives parameter `name` the tensor `value` (its declared shape and dtype; moved to the
  /// program's device): how a program loaded without allocating gets its values. UserError
  /// naming the parameter for another shape or dtype, or for a name the block lacks.
  void set_parameter(const std::string& name, const Tensor& value);
  /// The main script's `dim` declarations, in source order, with their values.
  std::vector<DimInfo> dims() const;
  /// The train block's optimizer (nullopt without one): its name and per-parameter states.
  std::optional<OptimizerInfo> optimizer_info() const;
  /// The next batch from the block's `fn batch()` (for scripts without `data`), for `step`.
  std::vector<Tensor> make_batch(int64_t step);
  /// The train block's `fn loss` on a batch: a 0-dim tensor recorded on the tape. `step`
  /// seeds its random draws (dropout).
  Tensor loss(const std::vector<Tensor>& batch, int64_t step);
  /// The same as in evaluation: dropout traced as the identity.
  Tensor eval_loss(const std::vector<Tensor>& batch);
  /// The block's optimizer applied to every parameter with a gradient (one fused kernel per
  /// parameter, traced once per shape; what the update computes from the step's scalars alone,
  /// such as AdamW's bias corrections, once a step: compiler/graph/scalar_prelude.h), at
  /// 1-based step `t` with learning rate `lr`, each gradient read as `grad_scale` times itself
  /// (clipping and unscaling in the update's kernel).
  void optimizer_step(int64_t t, double lr, double grad_scale = 1.0);
  /// The optimizer's per-parameter state: "optimizer.STATE.PARAM" (e.g. optimizer.m.wte.weight).
  std::vector<NamedTensor> optimizer_state() const;
  /// Creates the optimizer state now (each `state` at its initial value, 0 by default), so
  /// that a checkpoint can be loaded into it.
  void init_optimizer_state();
  /// The same for the parameters flagged in `owned` (one per parameters() entry; empty: all):
  /// a ZeRO rank keeps state only for the parameters it updates.
  void init_optimizer_state_of(const std::vector<bool>& owned);
  /// Mixed precision for traces made from now on: f32 parameters and inputs are read as
  /// `dtype` (bf16 or f16), results come back as f32; the master weights, gradients and
  /// optimizer state stay f32.
  void set_compute_dtype(DType dtype);
  /// Logits for generation: `fn logits` of the train block, or the model's forward.
  Tensor logits(const Tensor& tokens);
  /// The decode step of `fn logits` over windows of `context` tokens (compiler/decode/
  /// decode_step.h: one token's row from key-value caches), nothing run; when there is none,
  /// DecodeStep::why says why, naming the script's line.
  DecodeStep decode_step(int64_t context);
  /// `fn logits` one token at a time through that step (script/decoder.cpp); null, with `why`
  /// saying why, without one or when an attention's mask lets a query see later keys.
  std::unique_ptr<Decoder> decoder(int64_t context, std::string& why,
                                   const DecoderOptions& options);
  std::unique_ptr<Decoder> decoder(int64_t context, std::string& why);

  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

 private:
  Program();
  const Traced& traced(const std::string& fn, const std::vector<TensorType>& types, bool training);
  /// The parameter's optimizer state and update, made on first use.
  ProgramParameter& state_for(const Tensor& param);

  std::unique_ptr<Interpreter> impl_;
  std::unique_ptr<ProgramState> state_;
};

}  // namespace ein::script
