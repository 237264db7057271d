// The formulas of `ein estimate` (tools/estimate.h), each with its source. Nothing here
// rounds: the lecture's rounded figures are reproduced by the callers, from these exact ones.
#include "tools/estimate.h"

#include <array>
#include <cmath>

namespace ein::napkin {

double training_flops(double params, double tokens) {
  // Forward: 2 FLOPs (one multiply, one add) per parameter per token; backward: twice that
  // (a gradient for the input and one for the weight). Lecture §3.1, scenario one.
  return 6 * params * tokens;
}

double palm_flops_per_token(double params, double layers, double heads, double head_dim,
                            double seq) {
  // PaLM Appendix B: the 6N of the weight matmuls plus 12·L·H·Q·T for attention's two
  // sequence-length matmuls (QKᵀ and AV), forward and backward, counted without causal halving.
  return 6 * params + 12 * layers * heads * head_dim * seq;
}

double model_flops_utilization(double achieved_flops_per_s, double devices,
                               double peak_per_device) {
  return achieved_flops_per_s / (devices * peak_per_device);
}

TimeEstimate estimate_time(double params, double tokens, double gpus, double peak_per_gpu,
                           double mfu) {
  TimeEstimate t;
  t.params = params;
  t.tokens = tokens;
  t.total_flops = training_flops(params, tokens);
  t.gpus = gpus;
  t.peak_per_gpu = peak_per_gpu;
  t.mfu = mfu;
  t.sustained = gpus * peak_per_gpu * mfu;
  t.seconds = t.total_flops / t.sustained;
  t.days = t.seconds / kSecondsPerDay;
  t.gpu_hours = gpus * t.seconds / 3600;
  return t;
}

namespace {

struct OptimizerRow {
  Optimizer optimizer;
  std::string_view name;
  int states;  // fp32 elements per parameter
};

// Adam(W) keeps m and v; SGD with momentum and Lion keep one buffer; AdaGrad its sum of
// squares (lecture §3.5, optimizers); plain SGD keeps nothing.
constexpr std::array<OptimizerRow, 6> kOptimizers{{
    {Optimizer::sgd, "sgd", 0},
    {Optimizer::momentum, "momentum", 1},
    {Optimizer::adagrad, "adagrad", 1},
    {Optimizer::adam, "adam", 2},
    {Optimizer::adamw, "adamw", 2},
    {Optimizer::lion, "lion", 1},
}};

struct PrecisionRow {
  Precision precision;
  std::string_view name;
  double param_bytes;   // the working copy of the weights
  double master_bytes;  // an fp32 master copy kept by the optimizer (0: none)
  double grad_bytes;
  const char* param_label;
  const char* grad_label;
};

constexpr std::array<PrecisionRow, 4> kPrecisions{{
    {Precision::fp32, "fp32", 4, 0, 4, "parameters (fp32)", "gradients (fp32)"},
    // multi-gpu-training-notes, "Memory needed" for 8B: fp16/bf16 weights 2 B, fp32 master
    // 4 B, Adam m and v 8 B, fp32 gradients 4 B: 16 + 32 + 64 + 32 GB. Megatron-LM's
    // theoretical_memory_usage.py counts the same 18 B/param.
    {Precision::mixed, "mixed", 2, 4, 4, "parameters (bf16)", "gradients (fp32)"},
    // ZeRO (Rajbhandari et al. 2020) §3.1: 2Ψ fp16 weights + 2Ψ fp16 grads + KΨ, K = 12.
    {Precision::mixed_bf16_grads, "mixed-bf16-grads", 2, 4, 2, "parameters (bf16)",
     "gradients (bf16)"},
    // CS336 (2026) lecture_02: bf16 weights and grads, fp32 Adam state, no master copy.
    {Precision::bf16, "bf16", 2, 0, 2, "parameters (bf16)", "gradients (bf16)"},
}};

const OptimizerRow& row(Optimizer o) {
  for (const OptimizerRow& r : kOptimizers)
    if (r.optimizer == o) return r;
  return kOptimizers[0];
}

const PrecisionRow& row(Precision p) {
  for (const PrecisionRow& r : kPrecisions)
    if (r.precision == p) return r;
  return kPrecisions[0];
}

}  // namespace

std::optional<Optimizer> parse_optimizer(std::string_view name) {
  for (const OptimizerRow& r : kOptimizers)
    if (r.name == name) return r.optimizer;
  if (name == "sgd-momentum") return Optimizer::momentum;
  return std::nullopt;
}

std::string_view optimizer_name(Optimizer o) {
  return row(o).name;
}

int optimizer_states(Optimizer o) {
  return row(o).states;
}

std::optional<Precision> parse_precision(std::string_view name) {
  for (const PrecisionRow& r : kPrecisions)
    if (r.name == name) return r.precision;
  return std::nullopt;
}

std::string_view precision_name(Precision p) {
  return row(p).name;
}

double ParamMemory::bytes_per_param() const {
  double sum = 0;
  for (const MemoryItem& item : items)
    sum += item.bytes_per_param;
  return sum;
}

double ParamMemory::bytes_per_param(StatePart part) const {
  double sum = 0;
  for (const MemoryItem& item : items)
    if (item.part == part) sum += item.bytes_per_param;
  return sum;
}

ParamMemory param_memory(Optimizer optimizer, Precision precision) {
  ParamMemory m = param_memory(optimizer_states(optimizer), precision);
  m.optimizer = optimizer;
  return m;
}

ParamMemory param_memory(int states, Precision precision) {
  const PrecisionRow& p = row(precision);
  ParamMemory m{std::nullopt, states, precision, {}};
  m.items.push_back({p.param_label, StatePart::params, p.param_bytes});
  // The master copy belongs to the optimizer's state: ZeRO stage 1 shards it with m and v.
  if (p.master_bytes > 0)
    m.items.push_back({"fp32 master parameters", StatePart::optimizer, p.master_bytes});
  m.items.push_back({p.grad_label, StatePart::grads, p.grad_bytes});
  if (states > 0)
    m.items.push_back({"optimizer state (" + std::to_string(states) + " x fp32)",
                       StatePart::optimizer, 4.0 * states});
  return m;
}

double max_params(double memory_bytes, const ParamMemory& memory) {
  return std::floor(memory_bytes / memory.bytes_per_param());  // a whole number of parameters
}

ZeroMemory zero_memory(const ParamMemory& memory, double params, double gpus, int stage) {
  // ZeRO Table 1: stage 1 (P_os) divides the optimizer state by N_d, stage 2 (P_os+g) also the
  // gradients, stage 3 (P_os+g+p) also the parameters.
  ZeroMemory z;
  z.stage = stage;
  const double p = memory.bytes_per_param(StatePart::params) * params;
  const double g = memory.bytes_per_param(StatePart::grads) * params;
  const double o = memory.bytes_per_param(StatePart::optimizer) * params;
  z.optimizer = stage >= 1 ? o / gpus : o;
  z.grads = stage >= 2 ? g / gpus : g;
  z.params = stage >= 3 ? p / gpus : p;
  z.total = z.params + z.grads + z.optimizer;
  return z;
}

ActivationMemory activation_memory_per_layer(const TransformerShape& x) {
  // Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
  // Table 2 (16-bit activations, bytes per layer). 34·sbh is everything but the attention
  // core; 5as²b is the attention scores, softmax and its dropout mask. Under tensor
  // parallelism 24 of the 34 are split by t and the 10 of LayerNorm and dropout inputs are
  // not, unless sequence parallelism splits them too.
  const double sbh = x.seq * x.batch * x.hidden;
  const double t = x.tp;
  const double attention_core = 5 * x.heads * x.seq / (x.hidden * t);
  const double rest = x.sequence_parallel ? 34 / t : 10 + 24 / t;
  ActivationMemory m;
  m.none = sbh * (rest + attention_core);
  m.selective = sbh * rest;
  m.full = 2 * sbh;  // Table 2: only the layer input is kept; the paper leaves it whole
  return m;
}

double kv_cache_bytes_per_token(double layers, double kv_heads, double head_dim,
                                double bytes_per_element) {
  return 2 * layers * kv_heads * head_dim * bytes_per_element;
}

std::span<const WeightFormat> weight_formats() {
  static constexpr WeightFormat kFormats[] = {
      {"fp32", 32, "IEEE single"},
      {"bf16", 16, "bfloat16"},
      {"fp16", 16, "IEEE half"},
      {"fp8", 8, "e4m3 or e5m2, one byte"},
      {"q8_0", 8.5, "llama.cpp's Q8_0: blocks of 32 int8 codes and an f16 scale, 34 bytes"},
      {"q4_0", 4.5, "llama.cpp's Q4_0: blocks of 32 4-bit codes and an f16 scale, 18 bytes"},
  };
  return kFormats;
}

std::optional<WeightFormat> parse_weight_format(std::string_view name) {
  for (const WeightFormat& f : weight_formats())
    if (f.name == name) return f;
  return std::nullopt;
}

std::string weight_format_names() {
  std::string names;
  for (const WeightFormat& f : weight_formats())
    names += (names.empty() ? "" : " ") + std::string(f.name);
  return names;
}

double weight_bytes(double params, const WeightFormat& format) {
  return params * format.bits_per_weight / 8;
}

double decode_tokens_per_s_bound(double weight_bytes, double memory_bandwidth) {
  return memory_bandwidth / weight_bytes;
}

double square_matmul_intensity(double n, double bytes_per_element) {
  // CS336 lecture_02 arithmetic_intensity_matmul: n²(2n−1) FLOPs; read A and B, write C.
  return n * n * (2 * n - 1) / (3 * n * n * bytes_per_element);
}

}  // namespace ein::napkin
