// `ein estimate` (tools/estimate_command.h): reads the flags, decides which sections apply,
// computes them with tools/estimate.h and prints text or JSON. The lecture's own scenarios
// are recognised from a small table so that the output can say where the lecture rounds.
#include "tools/estimate_command.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ein/errors.h"
#include <ein/hardware.h>
#include "tools/cli_errors.h"
#include "tools/cli_format.h"
#include "tools/cli_numbers.h"
#include "tools/estimate.h"

namespace ein::cli {
namespace {

using napkin::ParamMemory;
using napkin::StatePart;

constexpr const char* kDescription =
    R"(Napkin math without a script: how long training takes, and what fits in memory.

Conventions: FLOPs count 2 per multiply-add; training FLOPs = 6·N·D (forward 2·N per
token, backward = 2x forward); peaks are NVIDIA's dense figures (never the 2:4 sparsity
ones); bytes are decimal (1 GB = 1e9 B). Numbers take SI suffixes: 70e9 = 70B = 70G.

Sections (each printed when its flags are given):
  time        --params N --tokens D (or --tokens-per-param R) [--gpus G --hw H --mfu M]
  memory      --optimizer O and/or --precision P [--params N] [--gpus G --hw H]
              bytes/param of parameters, gradients and optimizer state; activations excluded
  ZeRO        --zero 0|1|2|3 --params N --gpus G: per-device training state
  activations --seq S --batch B --hidden H --heads A [--layers L] [--tp T]
              [--sequence-parallel] (Korthikanti et al. 2022, 16-bit activations)
  KV cache    --layers L --kv-heads K --head-dim D
  weights     --weights F [--params N] [--gpus G --hw H]: inference weights in F (fp32 bf16
              fp16 fp8, or quantized q8_0 8.5 bits, q4_0 4.5 bits): bytes, the largest model
              that fits, and the memory-bound decode rate at batch 1
Hardware (--hw): a100 (A100 SXM 80GB), h100 (H100 SXM), h100-pcie, h200; --list-hw shows all.
Precisions: fp32 (4+4+8 = 16 B with AdamW), mixed (the lecture's 8B example: bf16 params,
fp32 master, fp32 grads: 2+4+4+8 = 18 B), mixed-bf16-grads (ZeRO's K=12: 16 B), bf16
(no master: 12 B). Optimizers: sgd, momentum, adagrad, lion, adam, adamw.

The lecture's scenarios:
  ein estimate --params 70e9 --tokens 15e12 --gpus 1024 --hw h100 --mfu 0.5
      # 143.93 days (the lecture rounds the sustained rate to 5e17 FLOP/s and says ~146)
  ein estimate --gpus 8 --hw h100 --optimizer adamw --precision fp32
      # 16 B/param, at most 40e9 parameters (activations excluded)
  ein estimate --params 8e9 --optimizer adamw --precision mixed
      # 16 + 32 + 64 + 32 GB = 144 GB (18 B/param)
  ein estimate --params 7.5e9 --gpus 64 --zero 3 --precision mixed-bf16-grads
  ein estimate --seq 2048 --batch 1 --hidden 12288 --heads 96 --layers 96 --tp 8
  ein estimate --params 70e9 --tokens 15e12 --gpus 1024 --hw h100 --mfu 0.5 --format json
  ein estimate --params 8e9 --weights q8_0 --hw h100
      # an 8B model in Q8_0 (the lecture's example): 8.5 GB, at most 394 tokens/s at batch 1
)";

struct EstimateOptions {
  std::string params, tokens, tokens_per_param, gpus, hw, mfu, dtype = "bf16";
  std::string optimizer, precision, zero;
  std::string seq, batch, hidden, heads, layers, tp, kv_heads, head_dim;
  std::string weights;
  bool sequence_parallel = false;
  bool list_hw = false;
  std::string format = "text";
};

// A flag that may be left out: nullopt when it was, else its text read by `parse`.
std::optional<double> optional_flag(const std::string& text, std::string_view flag,
                                    double (*parse)(const std::string&, std::string_view)) {
  if (text.empty()) return std::nullopt;
  return parse(text, flag);
}

// ---- the computed estimate ----

struct Activations {
  napkin::TransformerShape shape;
  napkin::ActivationMemory per_layer;
  std::optional<double> layers;
};

struct KvCache {
  double layers, kv_heads, head_dim, bytes_per_token;
};

struct InferenceWeights {
  napkin::WeightFormat format;
  double devices = 1;                 // --gpus, else one
  std::optional<double> bytes;        // with --params
  std::optional<double> max_params;   // with --hw
  std::optional<double> decode_bound; // with --params and --hw: tokens/s at batch 1
};

struct Estimate {
  std::optional<double> params, tokens;
  std::optional<double> total_flops;
  const HardwareProfile* hw = nullptr;
  MathMode dtype = MathMode::bf16;
  std::optional<double> gpus;
  std::optional<napkin::TimeEstimate> time;
  std::optional<ParamMemory> memory;
  std::optional<double> max_params;
  std::optional<napkin::ZeroMemory> zero;
  std::vector<napkin::ZeroMemory> zero_stages;
  std::optional<Activations> activations;
  std::optional<KvCache> kv_cache;
  std::optional<InferenceWeights> weights;
  std::vector<std::string> lecture_notes;  // where the lecture rounds, for these inputs
  std::vector<std::string> hints;          // what one more flag would add
};

bool near(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::fabs(b);
}

// The lecture's scenarios, recognised so that the output can say how the lecture rounds.
void add_lecture_notes(Estimate& e) {
  const bool h100 = e.hw != nullptr && e.hw->key == "h100-sxm";
  if (e.time && h100 && near(e.time->params, 70e9) && near(e.time->tokens, 15e12) &&
      near(e.time->gpus, 1024) && near(e.time->mfu, 0.5) && e.dtype == MathMode::bf16) {
    // Lecture §3.1 scenario one: 6.3e24 / 5e17 = 1.26e7 s, "about 146 days".
    const double lecture_days = 6.3e24 / 5e17 / napkin::kSecondsPerDay;
    e.lecture_notes.push_back(fmt::format(
        "the lecture says ~146 days: it takes 990e12 x 0.5 ~ 5e14 FLOP/s per GPU and 1024 x that "
        "~ 5e17 FLOP/s (exact: {}), so 6.3e24 / 5e17 = 1.26e7 s = {:.2f} days; the exact figure "
        "is {:.2f} days",
        exact(e.time->sustained), lecture_days, e.time->days));
  }
  if (e.memory && e.max_params && h100 && e.gpus && near(*e.gpus, 8) &&
      e.memory->optimizer == napkin::Optimizer::adamw &&
      e.memory->precision == napkin::Precision::fp32) {
    e.lecture_notes.push_back(
        "the lecture says ~40B (640e9 B / 16 B): exact here, both taking the datasheet's 80 GB as "
        "80e9 bytes; the physical 80 GiB (85.9e9 B) would give 42.9e9, and activations shrink it");
  }
  if (e.memory && e.params && near(*e.params, 8e9) &&
      e.memory->precision == napkin::Precision::mixed &&
      e.memory->states == 2) {
    e.lecture_notes.push_back(
        "the lecture's 8B breakdown (multi-GPU notes): bf16 params 16 GB + fp32 master 32 GB + "
        "Adam m,v 64 GB + fp32 grads 32 GB, reproduced exactly (GB = 1e9 B; 144 GB = 134.1 GiB); "
        "it adds 10-20% for buffers and temporaries, excluded here; it notes that AMP keeps the "
        "params themselves in fp32 (32 GB)");
  }
}

Estimate compute(const EstimateOptions& o) {
  Estimate e;
  e.params = optional_flag(o.params, "--params", parse_positive);
  e.tokens = optional_flag(o.tokens, "--tokens", parse_positive);
  const auto tokens_per_param = optional_flag(o.tokens_per_param, "--tokens-per-param", parse_positive);
  e.gpus = optional_flag(o.gpus, "--gpus", parse_count);
  const auto mfu = optional_flag(o.mfu, "--mfu", parse_fraction);
  if (!o.hw.empty()) {
    e.hw = find_hardware(o.hw);
    if (e.hw == nullptr)
      throw RuntimeError(
          fmt::format("--hw: unknown hardware '{}'; known: {}", o.hw, known_hardware_names()));
  }
  const auto dtype = parse_math_mode(o.dtype);
  if (!dtype)
    throw RuntimeError(
        fmt::format("--dtype: unknown '{}'; known: fp64 fp32 tf32 bf16 fp16 fp8", o.dtype));
  e.dtype = *dtype;
  if (e.hw != nullptr && e.hw->peak(e.dtype) == 0)
    throw RuntimeError(fmt::format("--dtype {}: the {} has no {} arithmetic", o.dtype, e.hw->name,
                               math_mode_name(e.dtype)));

  // Time: 6·N·D, then G·peak·MFU.
  if (e.tokens && tokens_per_param)
    throw UsageError("give --tokens or --tokens-per-param, not both");
  if (tokens_per_param) {
    if (!e.params) throw UsageError("--tokens-per-param needs --params");
    e.tokens = *tokens_per_param * *e.params;
  }
  if (e.params && e.tokens) {
    e.total_flops = napkin::training_flops(*e.params, *e.tokens);
    if (e.gpus && e.hw && mfu)
      e.time = napkin::estimate_time(*e.params, *e.tokens, *e.gpus, e.hw->peak(e.dtype), *mfu);
    else
      e.hints.push_back("add --gpus, --hw and --mfu for the training time");
  } else if (e.tokens) {
    throw UsageError("--tokens needs --params (total FLOPs = 6·N·D)");
  } else if (mfu) {
    throw UsageError("--mfu needs --params and --tokens");
  }

  // Memory: bytes per parameter, the largest model, ZeRO.
  if (!o.optimizer.empty() || !o.precision.empty() || !o.zero.empty()) {
    napkin::Optimizer optimizer = napkin::Optimizer::adamw;
    napkin::Precision precision = napkin::Precision::fp32;
    if (!o.optimizer.empty()) {
      const auto parsed = napkin::parse_optimizer(o.optimizer);
      if (!parsed)
        throw RuntimeError(fmt::format(
            "--optimizer: unknown '{}'; known: sgd momentum adagrad lion adam adamw", o.optimizer));
      optimizer = *parsed;
    }
    if (!o.precision.empty()) {
      const auto parsed = napkin::parse_precision(o.precision);
      if (!parsed)
        throw RuntimeError(fmt::format(
            "--precision: unknown '{}'; known: fp32 mixed mixed-bf16-grads bf16", o.precision));
      precision = *parsed;
    }
    e.memory = napkin::param_memory(optimizer, precision);
    if (e.gpus && e.hw) e.max_params = napkin::max_params(*e.gpus * e.hw->memory_bytes, *e.memory);
    if (!o.zero.empty()) {
      const double stage = parse_number(o.zero, "--zero");
      if (stage != 0 && stage != 1 && stage != 2 && stage != 3)
        throw RuntimeError(fmt::format("--zero: a stage 0, 1, 2 or 3, got '{}'", o.zero));
      if (!e.params || !e.gpus) throw UsageError("--zero needs --params and --gpus");
      for (int s = 0; s <= 3; ++s)
        e.zero_stages.push_back(napkin::zero_memory(*e.memory, *e.params, *e.gpus, s));
      e.zero = e.zero_stages[static_cast<size_t>(stage)];
    }
  }

  // Activations per transformer layer.
  const bool any_shape = !o.seq.empty() || !o.batch.empty() || !o.hidden.empty() ||
                         !o.heads.empty() || !o.tp.empty() || o.sequence_parallel;
  if (any_shape) {
    if (o.seq.empty() || o.batch.empty() || o.hidden.empty() || o.heads.empty())
      throw UsageError("activation memory needs all of --seq, --batch, --hidden and --heads");
    Activations a;
    a.shape.seq = parse_count(o.seq, "--seq");
    a.shape.batch = parse_count(o.batch, "--batch");
    a.shape.hidden = parse_count(o.hidden, "--hidden");
    a.shape.heads = parse_count(o.heads, "--heads");
    if (!o.tp.empty()) a.shape.tp = parse_count(o.tp, "--tp");
    a.shape.sequence_parallel = o.sequence_parallel;
    if (std::fmod(a.shape.heads, a.shape.tp) != 0 || std::fmod(a.shape.hidden, a.shape.tp) != 0)
      throw RuntimeError(
          fmt::format("--tp {}: tensor parallelism splits heads ({}) and hidden ({}); "
                      "both must be divisible by it",
                      o.tp, o.heads, o.hidden));
    a.layers = optional_flag(o.layers, "--layers", parse_count);
    a.per_layer = napkin::activation_memory_per_layer(a.shape);
    e.activations = a;
  }

  // KV cache per token (16-bit K and V).
  if (!o.kv_heads.empty() || !o.head_dim.empty()) {
    if (o.kv_heads.empty() || o.head_dim.empty() || o.layers.empty())
      throw UsageError("the KV cache needs --layers, --kv-heads and --head-dim");
    KvCache k{parse_count(o.layers, "--layers"), parse_count(o.kv_heads, "--kv-heads"),
              parse_count(o.head_dim, "--head-dim"), 0};
    k.bytes_per_token = napkin::kv_cache_bytes_per_token(k.layers, k.kv_heads, k.head_dim, 2);
    e.kv_cache = k;
  }

  // Inference weights: bytes, the largest model, the memory-bound decode rate.
  if (!o.weights.empty()) {
    const auto format = napkin::parse_weight_format(o.weights);
    if (!format)
      throw RuntimeError(fmt::format("--weights: unknown '{}'; known: {}", o.weights,
                                     napkin::weight_format_names()));
    InferenceWeights w{*format, e.gpus.value_or(1), {}, {}, {}};
    if (e.params) w.bytes = napkin::weight_bytes(*e.params, w.format);
    if (e.hw) {
      w.max_params = std::floor(w.devices * e.hw->memory_bytes * 8 / w.format.bits_per_weight);
      if (w.bytes)
        w.decode_bound = napkin::decode_tokens_per_s_bound(*w.bytes, w.devices * e.hw->memory_bandwidth);
    }
    if (!e.params && !e.hw) throw UsageError("--weights needs --params, --hw or both");
    e.weights = w;
  }

  if (!e.total_flops && !e.memory && !e.activations && !e.kv_cache && !e.weights && e.hw == nullptr)
    throw UsageError(
        "nothing to estimate: give --params with --tokens, --optimizer or --precision, --zero, "
        "a transformer shape (--seq --batch --hidden --heads), --weights or --hw");
  add_lecture_notes(e);
  return e;
}

// ---- text ----

class TextOut {
 public:
  void heading(const std::string& text) { out_ += (out_.empty() ? "" : "\n") + text + '\n'; }
  void row(std::string_view label, std::string_view value, std::string_view detail = "") {
    out_ += fmt::format("  {:<28}{:>14}", label, value);
    if (!detail.empty()) out_ += fmt::format("   {}", detail);
    out_ += '\n';
  }
  void note(std::string_view text) { out_ += fmt::format("  note: {}\n", text); }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

std::string part_name(StatePart p) {
  switch (p) {
    case StatePart::params:
      return "params";
    case StatePart::grads:
      return "grads";
    case StatePart::optimizer:
      return "optimizer";
  }
  return "";
}

std::string render_text(const Estimate& e) {
  TextOut t;
  if (e.hw != nullptr) {
    t.heading(
        fmt::format("Hardware: {} ({}; dense peaks, never the 2:4 sparsity figures; "
                    "--list-hw shows every dtype)",
                    e.hw->name, e.hw->source));
    const double peak = e.hw->peak(e.dtype);
    t.row(fmt::format("peak {}", math_mode_name(e.dtype)), si(peak, "FLOP/s"), exact(peak));
    t.row("memory", si(e.hw->memory_bytes, "B"), exact(e.hw->memory_bytes) + " B");
    t.row("memory bandwidth", si(e.hw->memory_bandwidth, "B/s"),
          fmt::format("{} B/s; ridge point {:.4g} FLOP/B", exact(e.hw->memory_bandwidth),
                      peak / e.hw->memory_bandwidth));
  }
  if (e.total_flops) {
    t.heading("Compute: total FLOPs = 6·N·D (2 FLOPs per multiply-add, backward = 2x forward)");
    t.row("parameters N", si_aligned(*e.params), exact(*e.params));
    t.row("tokens D", si_aligned(*e.tokens), exact(*e.tokens));
    t.row("tokens per parameter", fmt::format("{:.4g}", *e.tokens / *e.params),
          fmt::format("{} (Chinchilla compute-optimal: ~{:g}, Hoffmann et al. 2022)",
                      exact(*e.tokens / *e.params), napkin::kChinchillaTokensPerParam));
    t.row("total FLOPs", si(*e.total_flops, "FLOP"),
          fmt::format("{} = {:.5g} PF-days", exact(*e.total_flops),
                      *e.total_flops / 1e15 / napkin::kSecondsPerDay));
  }
  if (e.time) {
    const auto& x = *e.time;
    t.heading(fmt::format("Time: {:g} x {}, {} dense peak {}, MFU {}", x.gpus, e.hw->name,
                          math_mode_name(e.dtype), si(x.peak_per_gpu, "FLOP/s"), exact(x.mfu)));
    t.row("sustained", si(x.sustained, "FLOP/s"),
          fmt::format("{} = {} x {} x {}", exact(x.sustained), exact(x.gpus), exact(x.peak_per_gpu),
                      exact(x.mfu)));
    t.row("time", fmt::format("{:.2f} days", x.days),
          fmt::format("{} days = {} s", exact(x.days), exact(x.seconds)));
    t.row("GPU-hours", si_aligned(x.gpu_hours), exact(x.gpu_hours));
  }
  if (e.memory) {
    const ParamMemory& m = *e.memory;
    t.heading(
        fmt::format("Memory per parameter: {}, {} (training state only; activations, "
                    "temporaries and fragmentation excluded)",
                    optimizer_name(*m.optimizer), precision_name(m.precision)));
    for (const auto& item : m.items)
      t.row(item.what, fmt::format("{:g} B/param", item.bytes_per_param),
            e.params ? fmt::format("{} = {} B", si(item.bytes_per_param * *e.params, "B"),
                                   exact(item.bytes_per_param * *e.params))
                     : "");
    t.row("total", fmt::format("{:g} B/param", m.bytes_per_param()),
          e.params ? fmt::format("{} = {} B", si(m.bytes_per_param() * *e.params, "B"),
                                 exact(m.bytes_per_param() * *e.params))
                   : "");
    if (e.max_params) {
      const double total = *e.gpus * e.hw->memory_bytes;
      t.heading(fmt::format("Largest model: {:g} x {} = {} of memory, {:g} B/param", *e.gpus,
                            e.hw->name, si(total, "B"), m.bytes_per_param()));
      t.row(
          "max parameters", si_aligned(*e.max_params),
          fmt::format("{} (activations excluded: the real limit is lower)", exact(*e.max_params)));
    }
  }
  if (e.zero) {
    t.heading(fmt::format(
        "ZeRO stage {} over {} devices, bytes per device (Rajbhandari et al. 2020: stage 1 "
        "shards optimizer state, 2 also gradients, 3 also parameters)",
        e.zero->stage, *e.gpus));
    t.row("parameters", si(e.zero->params, "B"), exact(e.zero->params));
    t.row("gradients", si(e.zero->grads, "B"), exact(e.zero->grads));
    t.row("optimizer state", si(e.zero->optimizer, "B"), exact(e.zero->optimizer));
    t.row("total", si(e.zero->total, "B"),
          e.hw ? fmt::format("{} ({} the {}'s {}; activations excluded)", exact(e.zero->total),
                             e.zero->total <= e.hw->memory_bytes ? "fits" : "exceeds", e.hw->name,
                             si(e.hw->memory_bytes, "B"))
               : exact(e.zero->total));
    for (const auto& z : e.zero_stages)
      t.row(fmt::format("stage {} total{}", z.stage, z.stage == e.zero->stage ? " (chosen)" : ""),
            si(z.total, "B"), exact(z.total));
  }
  if (e.activations) {
    const auto& a = *e.activations;
    const auto& s = a.shape;
    const bool sp = s.sequence_parallel;
    const std::string rest = sp ? "34/t" : "10 + 24/t";
    t.heading(fmt::format(
        "Activations per layer (Korthikanti et al. 2022, Table 2; 16-bit): s={:g} b={:g} h={:g} "
        "a={:g} t={:g}{}",
        s.seq, s.batch, s.hidden, s.heads, s.tp, sp ? ", sequence parallel" : ""));
    const auto line = [&](const char* label, std::string formula, double bytes) {
      std::string detail = fmt::format("{} B = {}", exact(bytes), formula);
      if (a.layers)
        detail += fmt::format("; x {} layers = {}", exact(*a.layers), si(bytes * *a.layers, "B"));
      t.row(label, si(bytes, "B"), detail);
    };
    line("no recomputation", fmt::format("sbh({} + 5as/(ht))", rest), a.per_layer.none);
    line("selective recomputation", fmt::format("sbh({})", rest), a.per_layer.selective);
    line("full recomputation", "2sbh (the layer input only)", a.per_layer.full);
    t.note("embeddings, the output layer and pipeline-stage buffers are not included");
  }
  if (e.kv_cache) {
    const auto& k = *e.kv_cache;
    t.heading("KV cache: 2 (K and V) x layers x kv_heads x head_dim x 2 B (16-bit)");
    t.row("per token", si(k.bytes_per_token, "B"),
          fmt::format("{} B = 2 x {} x {} x {} x 2", exact(k.bytes_per_token), exact(k.layers),
                      exact(k.kv_heads), exact(k.head_dim)));
  }
  if (e.weights) {
    const InferenceWeights& w = *e.weights;
    t.heading(fmt::format("Inference weights: {}, {:g} bits a weight ({})", w.format.name,
                          w.format.bits_per_weight, w.format.detail));
    if (w.bytes)
      t.row("weights", si(*w.bytes, "B"),
            fmt::format("{} B = {} x {:g} / 8", exact(*w.bytes), exact(*e.params),
                        w.format.bits_per_weight));
    const std::string where =
        e.hw ? fmt::format("{:g} x {} ({} each)", w.devices, e.hw->name, si(e.hw->memory_bytes, "B"))
             : "";
    if (w.bytes && e.hw) {
      const bool fits = *w.bytes <= w.devices * e.hw->memory_bytes;
      t.row("fits", fits ? "yes" : "no",
            fmt::format("on {}{}", where,
                        fits ? "; the KV cache and activations take what is left" : ""));
    }
    if (w.max_params)
      t.row("largest model", si_aligned(*w.max_params),
            fmt::format("{} parameters on {} (weights alone)", exact(*w.max_params), where));
    if (w.decode_bound)
      t.row("decode, batch 1, at most", fmt::format("{:.4g} tok/s", *w.decode_bound),
            fmt::format("{} / {}: each token reads every weight once (memory-bound; KV cache "
                        "reads excluded{})",
                        si(w.devices * e.hw->memory_bandwidth, "B/s"), si(*w.bytes, "B"),
                        w.devices > 1 ? "; weights split evenly, communication excluded" : ""));
  }
  if (!e.lecture_notes.empty()) {
    t.heading("Where the lecture rounds");
    for (const auto& n : e.lecture_notes)
      t.note(n);
  }
  for (const auto& h : e.hints)
    t.note(h);
  return t.str();
}

// ---- JSON (keys documented in docs/estimate.md) ----

nlohmann::ordered_json render_json(const Estimate& e) {
  nlohmann::ordered_json j;
  j["conventions"] = {{"flops", "2 per multiply-add; training = 6*N*D (backward = 2x forward)"},
                      {"peaks", "dense (no 2:4 sparsity)"},
                      {"bytes", "decimal (1 GB = 1e9 B)"},
                      {"memory", "training state only; activations excluded"}};
  if (e.hw != nullptr) {
    nlohmann::ordered_json peaks;
    for (int i = 0; i < kMathModeCount; ++i)
      peaks[std::string(math_mode_name(static_cast<MathMode>(i)))] =
          e.hw->peak(static_cast<MathMode>(i));
    j["hardware"] = {{"name", e.hw->name},
                     {"key", e.hw->key},
                     {"dtype", math_mode_name(e.dtype)},
                     {"peak_flops", e.hw->peak(e.dtype)},
                     {"peak_flops_by_dtype", peaks},
                     {"memory_bytes", e.hw->memory_bytes},
                     {"memory_bandwidth", e.hw->memory_bandwidth}};
  }
  if (e.params) j["params"] = *e.params;
  if (e.tokens) j["tokens"] = *e.tokens;
  if (e.gpus) j["gpus"] = *e.gpus;
  if (e.total_flops) {
    j["tokens_per_param"] = *e.tokens / *e.params;
    j["total_flops"] = *e.total_flops;
    j["pf_days"] = *e.total_flops / 1e15 / napkin::kSecondsPerDay;
  }
  if (e.time) {
    j["mfu"] = e.time->mfu;
    j["sustained_flops_per_s"] = e.time->sustained;
    j["seconds"] = e.time->seconds;
    j["days"] = e.time->days;
    j["gpu_hours"] = e.time->gpu_hours;
  }
  if (e.memory) {
    nlohmann::ordered_json items = nlohmann::ordered_json::array();
    for (const auto& item : e.memory->items) {
      nlohmann::ordered_json it = {{"what", item.what},
                                   {"part", part_name(item.part)},
                                   {"bytes_per_param", item.bytes_per_param}};
      if (e.params) it["bytes"] = item.bytes_per_param * *e.params;
      items.push_back(it);
    }
    j["memory"] = {{"optimizer", optimizer_name(*e.memory->optimizer)},
                   {"precision", precision_name(e.memory->precision)},
                   {"bytes_per_param", e.memory->bytes_per_param()},
                   {"items", items},
                   {"activations_excluded", true}};
    if (e.params) j["memory"]["bytes"] = e.memory->bytes_per_param() * *e.params;
  }
  if (e.max_params) j["max_params"] = *e.max_params;
  if (e.zero) {
    const auto stage = [](const napkin::ZeroMemory& z) {
      return nlohmann::ordered_json{{"stage", z.stage},
                                    {"params", z.params},
                                    {"grads", z.grads},
                                    {"optimizer", z.optimizer},
                                    {"total", z.total}};
    };
    nlohmann::ordered_json all = nlohmann::ordered_json::array();
    for (const auto& z : e.zero_stages)
      all.push_back(stage(z));
    j["zero"] = stage(*e.zero);
    j["zero"]["stages"] = all;
  }
  if (e.activations) {
    const auto& a = *e.activations;
    nlohmann::ordered_json per_layer = {{"none", a.per_layer.none},
                                        {"selective", a.per_layer.selective},
                                        {"full", a.per_layer.full}};
    j["activations"] = {
        {"seq", a.shape.seq},       {"batch", a.shape.batch},
        {"hidden", a.shape.hidden}, {"heads", a.shape.heads},
        {"tp", a.shape.tp},         {"sequence_parallel", a.shape.sequence_parallel},
        {"per_layer", per_layer}};
    if (a.layers) {
      j["activations"]["layers"] = *a.layers;
      j["activations"]["total"] = {{"none", a.per_layer.none * *a.layers},
                                   {"selective", a.per_layer.selective * *a.layers},
                                   {"full", a.per_layer.full * *a.layers}};
    }
  }
  if (e.kv_cache) j["kv_cache"] = {{"bytes_per_token", e.kv_cache->bytes_per_token}};
  if (e.weights) {
    const InferenceWeights& w = *e.weights;
    j["weights"] = {{"format", w.format.name}, {"bits_per_weight", w.format.bits_per_weight}};
    if (w.bytes) j["weights"]["bytes"] = *w.bytes;
    if (w.max_params) j["weights"]["max_params"] = *w.max_params;
    if (w.decode_bound) j["weights"]["decode_tokens_per_s_bound"] = *w.decode_bound;
  }
  if (!e.lecture_notes.empty()) j["lecture_notes"] = e.lecture_notes;
  return j;
}

std::string render_hardware_list() {
  std::string out = "Known hardware (dense peaks; decimal bytes):\n";
  out += fmt::format("  {:<16}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}{:>12}\n", "name", "fp64",
                     "fp32", "tf32", "bf16", "fp16", "fp8", "memory", "bandwidth");
  for (const HardwareProfile& p : hardware_profiles()) {
    out += fmt::format("  {:<16}", p.name);
    for (double peak : p.peak_flops)
      out += fmt::format("{:>10}", peak > 0 ? si_aligned(peak) : "-");
    out += fmt::format("{:>10}{:>12}\n", si(p.memory_bytes, "B"), si(p.memory_bandwidth, "B/s"));
  }
  out += "Names: " + known_hardware_names() + "\n";
  return out;
}

int run_estimate(const EstimateOptions& o) {
  try {
    if (o.list_hw) {
      std::cout << render_hardware_list();
      return 0;
    }
    const Estimate e = compute(o);
    if (o.format == "json")
      std::cout << render_json(e).dump(2) << '\n';
    else
      std::cout << render_text(e);
    return 0;
  } catch (...) {
    return report_error("estimate");
  }
}

}  // namespace

void add_estimate_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand("estimate", "Napkin math: training time and memory");
  cmd->description(kDescription);
  cmd->add_option("--params", options->params, "parameter count N (70e9, 70B)");
  cmd->add_option("--tokens", options->tokens, "training tokens D (15e12, 15T)");
  cmd->add_option("--tokens-per-param", options->tokens_per_param,
                  "D as a multiple of N (Chinchilla: 20)");
  cmd->add_option("--gpus", options->gpus, "number of devices G");
  cmd->add_option("--hw", options->hw, "device: a100, h100, h100-pcie, h200 (--list-hw)");
  cmd->add_option("--mfu", options->mfu, "model FLOPs utilization, in (0, 1]");
  cmd->add_option("--dtype", options->dtype, "math for the peak: fp64 fp32 tf32 bf16 fp16 fp8")
      ->capture_default_str();
  cmd->add_option("--optimizer", options->optimizer, "sgd momentum adagrad lion adam adamw");
  cmd->add_option("--precision", options->precision, "fp32 mixed mixed-bf16-grads bf16");
  cmd->add_option("--zero", options->zero, "ZeRO stage 0-3 (needs --params and --gpus)");
  cmd->add_option("--seq", options->seq, "sequence length s");
  cmd->add_option("--batch", options->batch, "micro-batch size b");
  cmd->add_option("--hidden", options->hidden, "hidden size h");
  cmd->add_option("--heads", options->heads, "attention heads a");
  cmd->add_option("--layers", options->layers, "transformer layers L");
  cmd->add_option("--tp", options->tp, "tensor-parallel size t");
  cmd->add_flag("--sequence-parallel", options->sequence_parallel,
                "sequence parallelism with --tp (Korthikanti et al.)");
  cmd->add_option("--kv-heads", options->kv_heads, "key/value heads (KV cache)");
  cmd->add_option("--head-dim", options->head_dim, "head dimension (KV cache)");
  cmd->add_option("--weights", options->weights,
                  "inference weights: fp32 bf16 fp16 fp8 q8_0 q4_0 (bytes, largest model, decode bound)");
  cmd->add_flag("--list-hw", options->list_hw, "list the hardware profiles");
  cmd->add_option("--format", options->format, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->callback([options, &exit_code] { exit_code = run_estimate(*options); });
}

}  // namespace ein::cli
