// The arithmetic of `ein estimate`: training FLOPs and time (6·N·D), bytes per parameter for
// an optimizer and precision, ZeRO sharding, and transformer activation memory (Korthikanti
// et al. 2022). Pure functions of numbers; no model graph, no I/O, no formatting.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ein::napkin {

/// Seconds in a day.
inline constexpr double kSecondsPerDay = 86400;
/// Chinchilla's compute-optimal tokens per parameter (Hoffmann et al. 2022), about 20.
inline constexpr double kChinchillaTokensPerParam = 20;

/// Training FLOPs 6·N·D: forward 2·N per token (2 FLOPs per multiply-add), backward twice the
/// forward (Kaplan et al. 2020; the lecture's "6 × params × tokens").
double training_flops(double params, double tokens);
/// PaLM's model FLOPs per token, 6·N + 12·L·H·Q·T (Chowdhery et al. 2022, Appendix B).
double palm_flops_per_token(double params, double layers, double heads, double head_dim,
                            double seq);
/// Model FLOPs utilization: achieved FLOP/s over the devices' combined dense peak.
double model_flops_utilization(double achieved_flops_per_s, double devices, double peak_per_device);

/// A training-time estimate; every field is an exact double, nothing rounded.
struct TimeEstimate {
  double params = 0;        ///< N
  double tokens = 0;        ///< D
  double total_flops = 0;   ///< 6·N·D
  double gpus = 0;          ///< G
  double peak_per_gpu = 0;  ///< dense peak FLOP/s of one device
  double mfu = 0;           ///< model FLOPs utilization, in (0, 1]
  double sustained = 0;     ///< G·peak·MFU, FLOP/s
  double seconds = 0;       ///< total_flops / sustained
  double days = 0;          ///< seconds / 86400
  double gpu_hours = 0;     ///< G·seconds / 3600
};
/// Time to train N parameters on D tokens with G devices of a given peak at an MFU.
TimeEstimate estimate_time(double params, double tokens, double gpus, double peak_per_gpu,
                           double mfu);

/// Optimizers by the per-parameter state they keep (each state element in fp32).
enum class Optimizer { sgd, momentum, adagrad, adam, adamw, lion };
/// Parses "sgd", "momentum", "adagrad", "adam", "adamw", "lion"; nullopt otherwise.
std::optional<Optimizer> parse_optimizer(std::string_view name);
/// The optimizer's name as parse_optimizer accepts it.
std::string_view optimizer_name(Optimizer o);
/// fp32 state elements per parameter: 0 for sgd, 1 for momentum/adagrad/lion, 2 for Adam(W).
int optimizer_states(Optimizer o);

/// Where parameters, gradients and optimizer state live (bytes per element of each).
enum class Precision {
  fp32,              ///< all fp32: 4 param + 4 grad (+ 4 per state): the lecture's 16 B/param
  mixed,             ///< the lecture's 8B example: bf16 params, fp32 master, fp32 grads
  mixed_bf16_grads,  ///< ZeRO's K=12 convention: bf16 params and grads, fp32 master + states
  bf16,              ///< bf16 params and grads, no fp32 master, fp32 states (CS336 2026)
};
/// Parses "fp32", "mixed", "mixed-bf16-grads", "bf16"; nullopt otherwise.
std::optional<Precision> parse_precision(std::string_view name);
/// The precision's name as parse_precision accepts it.
std::string_view precision_name(Precision p);

/// What a part of the training state is, for ZeRO's sharding.
enum class StatePart { params, grads, optimizer };

/// One line of a bytes-per-parameter breakdown.
struct MemoryItem {
  std::string what;        ///< e.g. "parameters (bf16)"
  StatePart part;          ///< which ZeRO stage shards it
  double bytes_per_param;  ///< bytes for each parameter
};

/// Bytes per parameter of the training state (activations excluded), line by line.
struct ParamMemory {
  /// The optimizer, when it is one of the known ones; nullopt for a script's own optimizer,
  /// known only by its state count.
  std::optional<Optimizer> optimizer;
  int states = 0;                 ///< fp32 state elements per parameter
  Precision precision;            ///< the precision convention
  std::vector<MemoryItem> items;  ///< the lines, in the lecture's order
  /// Sum over all lines.
  double bytes_per_param() const;
  /// Sum over the lines of one part.
  double bytes_per_param(StatePart part) const;
};
/// The breakdown for an optimizer and precision: the lecture's 16 B for fp32 AdamW, its
/// 2 + 4 + 4 + 8 = 18 B for mixed precision, ZeRO's 2 + 2 + 12 = 16 B, CS336's 2 + 2 + 8 = 12 B.
ParamMemory param_memory(Optimizer optimizer, Precision precision);
/// The same for an optimizer known by its state count (a script's `state m, v`: 2).
ParamMemory param_memory(int states, Precision precision);
/// The largest whole parameter count whose training state fits in `memory_bytes`
/// (activations, temporaries and fragmentation excluded).
double max_params(double memory_bytes, const ParamMemory& memory);

/// Per-device bytes of the training state under a ZeRO stage (Rajbhandari et al. 2020).
struct ZeroMemory {
  int stage = 0;         ///< 0 (plain data parallel), 1, 2 or 3
  double params = 0;     ///< parameter bytes on each device
  double grads = 0;      ///< gradient bytes on each device
  double optimizer = 0;  ///< optimizer-state bytes (incl. any fp32 master) on each device
  double total = 0;      ///< the sum
};
/// Stage 1 shards optimizer state over `gpus`, stage 2 also gradients, stage 3 also parameters.
ZeroMemory zero_memory(const ParamMemory& memory, double params, double gpus, int stage);

/// A transformer layer's shape for the activation formula; t > 1 is tensor parallelism.
struct TransformerShape {
  double seq = 0;                  ///< s, sequence length
  double batch = 0;                ///< b, micro-batch size
  double hidden = 0;               ///< h, hidden size
  double heads = 0;                ///< a, attention heads
  double tp = 1;                   ///< t, tensor-parallel size
  bool sequence_parallel = false;  ///< also shard LayerNorm/dropout along the sequence
};
/// Activation bytes per layer with 16-bit activations, Korthikanti et al. 2022 Table 2.
struct ActivationMemory {
  double none = 0;       ///< no recomputation: sbh(34 + 5as/h), divided as in Table 2 by t
  double selective = 0;  ///< selective recomputation (attention core recomputed): 34·sbh, /t
  double full = 0;       ///< full recomputation: only the layer input, 2·sbh
};
/// The activation memory of one transformer layer (embeddings and the output layer excluded).
ActivationMemory activation_memory_per_layer(const TransformerShape& shape);
/// KV-cache bytes per token: 2 (K and V) · layers · kv_heads · head_dim · bytes per element.
double kv_cache_bytes_per_token(double layers, double kv_heads, double head_dim,
                                double bytes_per_element);
/// How inference stores weights: a float format or a quantized block format (docs/quantization.md).
struct WeightFormat {
  std::string_view name;    ///< "fp32", "bf16", "fp16", "fp8", "q8_0", "q4_0"
  double bits_per_weight;   ///< 32, 16, 16, 8, 8.5 (32 int8 codes + an f16 scale), 4.5
  std::string_view detail;  ///< what the bits are
};
/// Every format, the float ones first.
std::span<const WeightFormat> weight_formats();
/// The format called `name`, or nullopt.
std::optional<WeightFormat> parse_weight_format(std::string_view name);
/// The formats' names, space-separated, for messages.
std::string weight_format_names();
/// Bytes of `params` weights in `format` (full blocks: N · bits / 8).
double weight_bytes(double params, const WeightFormat& format);
/// Tokens per second one sequence can decode at most when every token reads every weight once
/// from memory (batch 1, memory-bound; the KV cache's reads excluded): bandwidth / weight bytes.
double decode_tokens_per_s_bound(double weight_bytes, double memory_bandwidth);

/// Arithmetic intensity of an n×n by n×n matmul: n²(2n−1) FLOPs over 3·n² elements moved.
double square_matmul_intensity(double n, double bytes_per_element);

}  // namespace ein::napkin
