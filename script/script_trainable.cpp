// load_train_script() (include/ein/trainer.h): a `.ein` script's train block as a Trainable
// for ein::Trainer, and the block's settings as TrainOptions. The adapter forwards to
// script::Program (parameters, fn loss, fn batch, the optimizer, fn logits); it adds no
// behaviour of its own, so `ein train` and a C++ program train a script identically.
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/trainer.h>
#include <fmt/format.h>

#include "script/script.h"

namespace ein {
namespace {

/// Copies a script's named tensors into the public type.
std::vector<NamedTensor> to_public(const std::vector<script::NamedTensor>& named) {
  std::vector<NamedTensor> out;
  out.reserve(named.size());
  for (const auto& t : named)
    out.push_back({t.name, t.tensor});
  return out;
}

/// The train block of a loaded Program.
class ScriptTrainable final : public Trainable {
 public:
  explicit ScriptTrainable(std::unique_ptr<script::Program> program) : program_(std::move(program)) {}

  std::vector<NamedTensor> parameters() override { return to_public(program_->parameters()); }
  Tensor loss(const std::vector<Tensor>& batch, int64_t micro_step) override {
    return program_->loss(batch, micro_step);
  }
  void optimizer_step(int64_t step, double lr) override { program_->optimizer_step(step, lr); }
  bool optimizer_step_scaled(int64_t step, double lr, double grad_scale) override {
    program_->optimizer_step(step, lr, grad_scale);
    return true;
  }
  std::vector<Tensor> batch(int64_t micro_step) override { return program_->make_batch(micro_step); }
  std::vector<NamedTensor> optimizer_state() override { return to_public(program_->optimizer_state()); }
  void init_optimizer_state() override { program_->init_optimizer_state(); }
  void init_optimizer_state_of(const std::vector<bool>& owned) override {
    program_->init_optimizer_state_of(owned);
  }
  void set_parameter(const std::string& name, const Tensor& value) override {
    program_->set_parameter(name, value);
  }
  void set_compute_dtype(DType dtype) override { program_->set_compute_dtype(dtype); }
  Tensor logits(const Tensor& tokens) override { return program_->logits(tokens); }
  using Trainable::decoder;
  std::unique_ptr<Decoder> decoder(int64_t context, std::string& why,
                                   const DecoderOptions& options) override {
    return program_->decoder(context, why, options);
  }
  Tensor eval_loss(const std::vector<Tensor>& batch) override { return program_->eval_loss(batch); }

 private:
  std::unique_ptr<script::Program> program_;
};

/// A `data = ...` or `eval_data = ...` setting as TokenDataOptions.
TokenDataOptions data_options(const script::DataSpec& spec) {
  TokenDataOptions d;
  d.kind = spec.kind;
  d.path = spec.path;
  d.dtype = spec.dtype;
  d.batch = spec.batch;
  d.context = spec.context;
  d.order = spec.order;
  d.part_begin = spec.part_begin;
  d.part_end = spec.part_end;
  d.source = spec.source;
  d.range = spec.range;
  return d;
}

}  // namespace

/// The block's settings as TrainOptions.
TrainOptions script::train_options(const script::TrainSpec& spec) {
  TrainOptions o;
  o.steps = spec.steps;
  o.precision = spec.precision;
  o.lr = spec.lr;
  o.schedule = spec.schedule;
  o.warmup = spec.warmup;
  o.min_lr_ratio = spec.min_lr_ratio;
  o.clip = spec.clip;
  o.accumulate = spec.accumulate;
  if (spec.data) o.data = data_options(*spec.data);
  if (spec.eval_data) o.eval_data = data_options(*spec.eval_data);
  o.eval_every = spec.eval_every;
  o.eval_batches = spec.eval_batches;
  o.checkpoint_every = spec.checkpoint_every;
  o.log_every = spec.log_every;
  o.sample = spec.sample;
  o.sample_length = spec.sample_length;
  o.temperature = spec.temperature;
  o.top_k = spec.top_k;
  o.top_p = spec.top_p;
  return o;
}

TrainScript load_train_script(const std::string& path, const ScriptTrainOptions& options) {
  script::LoadOptions load;
  for (const auto& [name, value] : options.sets)
    load.sets.push_back({name, value});
  load.seed = options.seed;
  load.device = options.device;
  load.allocate = options.allocate;
  auto program = script::Program::load(path, load);
  if (!program->has_train())
    throw UserError(fmt::format("{} has no train block to run (ein check and ein run work on "
                                "scripts without one)",
                                path));
  TrainScript s;
  s.options = script::train_options(program->train_spec());
  s.options.seed = options.seed;
  s.options.device = options.device;
  s.options.metadata["script"] = path;
  s.model = std::make_unique<ScriptTrainable>(std::move(program));
  return s;
}

}  // namespace ein
