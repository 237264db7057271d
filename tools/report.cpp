// make_report (tools/report.h). Steps:
//   1. load the script without allocating; trace the function for its example types, with the
//      source expression and module of every node and what feeds every input;
//   2. cost every forward node (compiler/cost/cost_model.h);
//   3. differentiate with respect to the float parameters; cost the backward graph and split it
//      into input-gradient, weight-gradient and recompute work (compiler/cost/backward_cost.h);
//   4. attribute each backward node to the forward node it serves (GradOrigin::forward; glue
//      takes its producer's, else its consumer's forward node);
//   5. sum nodes into rows keyed by (module scope cut to --depth, source location);
//   6. the parameter census (embeddings: tables of gather nodes), attention shape for PaLM's
//      formula, the memory ledger (tools/estimate.h's bytes per parameter) and time; the
//      save/recompute plans of every policy and the per-rank ZeRO peaks (tools/report_plans.h).
#include "tools/report.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include <ein/diagnostic.h>
#include <ein/quantize.h>
#include <ein/tensor.h>
#include <ein/trainer.h>
#include "compiler/autodiff/autodiff.h"
#include "compiler/cost/backward_cost.h"
#include "compiler/cost/cost_model.h"
#include "compiler/cost/step_memory.h"
#include "compiler/decode/quantize_step.h"
#include "compiler/pipeline.h"
#include "ein/errors.h"
#include "runtime/dist/gradient_sync.h"
#include "tools/report_plans.h"
#include "tools/report_symbols.h"

namespace ein::report {
namespace {

/// Follows views, reshapes, permutes, slices and casts up to the node that holds the memory.
int storage_root(const Graph& g, int id) {
  for (;;) {
    const GraphNode& n = g.nodes[id];
    if (n.op != GraphOp::view && n.op != GraphOp::reshape && n.op != GraphOp::permute &&
        n.op != GraphOp::slice && n.op != GraphOp::cast)
      return id;
    id = n.inputs[0];
  }
}

/// The trace's description of graph input node `id` ("param:NAME", "arg:0", ...).
const std::string& input_kind(const script::TraceInfo& t, int id) {
  static const std::string none;
  const GraphNode& n = t.graph.nodes[id];
  if (n.op != GraphOp::input) return none;
  const int index = std::get<InputAttr>(n.attr).index;
  return index >= 0 && index < static_cast<int>(t.inputs.size()) ? t.inputs[index] : none;
}

bool from_param(const script::TraceInfo& t, int id) {
  return input_kind(t, storage_root(t.graph, id)).starts_with("param:");
}

/// "blocks.0.attn" cut to its first `depth` components (depth < 0: whole).
std::string cut_scope(const std::string& scope, int depth) {
  if (depth < 0 || scope.empty()) return scope;
  if (depth == 0) return "";
  size_t pos = 0;
  for (int i = 0; i < depth; ++i) {
    pos = scope.find('.', pos);
    if (pos == std::string::npos) return scope;
    if (i + 1 < depth) ++pos;
  }
  return scope.substr(0, pos);
}

/// `path` relative to the working folder when it lies below it (stdlib/nn.ein), else as given.
std::string short_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path rel = std::filesystem::proximate(path, ec);
  if (ec || rel.empty() || *rel.begin() == "..") return path;
  return rel.string();
}

/// A contraction's FLOPs as factors: 2 · every output dim · every summed dim.
std::string contract_formula(const Graph& g, const GraphNode& n) {
  const auto& c = std::get<ContractAttr>(n.attr);
  std::vector<int64_t> factors(n.shape.begin(), n.shape.end());
  const Shape& a = g.nodes[n.inputs[0]].shape;
  for (size_t k = 0; k < c.a_axes.size() && k < a.size(); ++k)
    if (std::find(c.out_axes.begin(), c.out_axes.end(), c.a_axes[k]) == c.out_axes.end())
      factors.push_back(a[k]);
  std::erase(factors, 1);
  return fmt::format("2·{}", fmt::join(factors, "·"));
}

/// The same as a monomial of the script's dims (nullopt if it overflows int64).
std::optional<Monomial> contract_monomial(const Graph& g, const GraphNode& n, int id,
                                          const DimSymbols& syms) {
  const auto& c = std::get<ContractAttr>(n.attr);
  Monomial m{2, 1, std::vector<int>(syms.dims().size(), 0)};
  bool ok = true;
  for (size_t k = 0; k < n.shape.size(); ++k) ok = ok && m.multiply(syms.axis(id, static_cast<int>(k)));
  const Shape& a = g.nodes[n.inputs[0]].shape;
  for (size_t k = 0; k < c.a_axes.size() && k < a.size(); ++k)
    if (std::find(c.out_axes.begin(), c.out_axes.end(), c.a_axes[k]) == c.out_axes.end())
      ok = ok && m.multiply(syms.axis(n.inputs[0], static_cast<int>(k)));
  return ok ? std::optional<Monomial>(m) : std::nullopt;
}

/// A fused attention's two products (q kᵀ and p v) as factors: 2 · batch · T · S · (E, then F).
std::string attention_formula(const Graph& g, const GraphNode& n) {
  const Shape &q = g.nodes[n.inputs[0]].shape, &k = g.nodes[n.inputs[1]].shape,
              &v = g.nodes[n.inputs[2]].shape;
  std::vector<int64_t> factors(q.begin(), q.end() - 1);
  factors.push_back(k[k.size() - 2]);
  std::erase(factors, 1);
  return fmt::format("2·{}·{} + 2·{}·{}", fmt::join(factors, "·"), q.back(), fmt::join(factors, "·"),
                     v.back());
}

/// The same as monomials of the script's dims (nullopt if one overflows int64).
std::optional<std::vector<Monomial>> attention_monomials(const Graph& g, const GraphNode& n,
                                                         const DimSymbols& syms) {
  const int q = n.inputs[0], k = n.inputs[1], v = n.inputs[2];
  const int rank = static_cast<int>(g.nodes[q].shape.size());
  std::vector<Monomial> out;
  for (const auto& [node, dim] : {std::pair{q, rank - 1}, std::pair{v, rank - 1}}) {
    Monomial m{2, 1, std::vector<int>(syms.dims().size(), 0)};
    bool ok = true;
    for (int d = 0; d + 1 < rank; ++d) ok = ok && m.multiply(syms.axis(q, d));
    ok = ok && m.multiply(syms.axis(k, rank - 2)) && m.multiply(syms.axis(node, dim));
    if (!ok) return std::nullopt;
    out.push_back(m);
  }
  return out;
}

std::string shape_text(const GraphNode& n) {
  return fmt::format("{}[{}]", dtype_name(n.dtype), fmt::join(n.shape, " "));
}

/// Attention contractions of two activations (no operand read from a parameter): the values
/// contraction reads, through elementwise ops only, an earlier scores contraction (the
/// probabilities); a scores contraction is one with a square t x t tail that does not (q·kᵀ).
/// Sizes alone cannot tell them apart when the head dim equals the sequence length.
enum class Attention { none, scores, values, fused };
std::vector<Attention> find_attention(const script::TraceInfo& t) {
  const Graph& g = t.graph;
  std::vector<Attention> kind(g.nodes.size(), Attention::none);
  const auto square_tail = [](const Shape& s) {
    return s.size() >= 3 && s[s.size() - 1] == s[s.size() - 2] && s.back() > 1;
  };
  std::vector<int> seen(g.nodes.size(), -1);
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const GraphNode& n = g.nodes[id];
    if (n.op == GraphOp::attention) {  // fused (compiler/fuse/attention.h): both products
      kind[id] = Attention::fused;
      continue;
    }
    if (n.op != GraphOp::contract || from_param(t, n.inputs[0]) || from_param(t, n.inputs[1]))
      continue;
    bool reads_scores = false;
    std::vector<int> stack(n.inputs.begin(), n.inputs.end());
    while (!stack.empty() && !reads_scores) {
      const int at = stack.back();
      stack.pop_back();
      if (seen[at] == id) continue;
      seen[at] = id;
      if (kind[at] == Attention::scores) reads_scores = true;
      if (g.nodes[at].op == GraphOp::contract) continue;
      stack.insert(stack.end(), g.nodes[at].inputs.begin(), g.nodes[at].inputs.end());
    }
    if (reads_scores)
      kind[id] = Attention::values;
    else if (square_tail(n.shape))
      kind[id] = Attention::scores;
  }
  return kind;
}

}  // namespace

/// What a token costs `ein sample` with and without the key-value cache, as the runtime
/// counts it: the unfused step graph's and the window graph's FLOPs.
DecodeCost decode_cost(script::Program& program) {
  DecodeCost d;
  const std::vector<std::string> fns = program.functions();
  if (std::find(fns.begin(), fns.end(), "train.logits") == fns.end()) return d;
  const std::vector<TensorType> types = program.example_types("train.logits");
  if (types.size() != 1 || types[0].shape.size() != 2 || types[0].shape[0] != 1) return d;
  d.has_logits = true;
  d.context = types[0].shape[1];
  const Graph window = program.trace("train.logits", types);
  d.window_flops = cost(window).total.flops;
  d.past_window_flops = d.window_flops;
  const DecodeStep step = program.decode_step(d.context);
  d.why = step.why;
  if (!step.derived()) return d;
  const NodeCost total = cost(step.step).total;
  d.flops = total.flops;
  d.matmul_flops = total.matmul_flops;
  d.bytes = total.bytes_read + total.bytes_written;
  for (const CacheSlot& c : step.caches) {
    d.cache_bytes += checked_numel(c.shape) * static_cast<int64_t>(element_size(c.dtype));
    d.bf16_cache_bytes += checked_numel(c.shape) * 2;
    ++d.caches;
  }
  const NodeCost bf16 = cost(with_cache_dtype(step, DType::bf16).step).total;
  d.bf16_cache_step_bytes = bf16.bytes_read + bf16.bytes_written;
  // The matrices a quantized checkpoint's codes would stand for (the runtime also checks that
  // their values are the codes' own, which a checkpoint of `ein quantize` guarantees).
  const auto rule = [](int, DType dtype, const Shape& shape) { return quantizes(dtype, shape); };
  const DecodeStep q8_0 = quantize_step(step, QuantType::q8_0, rule);
  for (const QuantizedMatrix& m : q8_0.quantized) {
    ++d.matrices;
    d.matrix_bytes += checked_numel(m.shape) * 4;
    d.q8_0_bytes += quantized_nbytes(m.shape, QuantType::q8_0);
    d.q4_0_bytes += quantized_nbytes(m.shape, QuantType::q4_0);
  }
  std::vector<int> refill_inputs;
  const int64_t refill = cost(decoder_refill(window, step, refill_inputs)).total.flops;
  d.refills = refills_past_the_window(refill, d.flops, d.window_flops);
  d.past_window_flops = d.refills ? refill + d.flops : d.window_flops;
  d.f32_held_bytes = decoder_weight_bytes(window, step);
  d.q8_0_held_bytes = decoder_weight_bytes(window, q8_0);
  d.q4_0_held_bytes = decoder_weight_bytes(window, quantize_step(step, QuantType::q4_0, rule));
  return d;
}

/// What the train block's held-out loss costs a run of its steps: the forward of fn loss (its
/// FLOPs, `forward`, at the training batch this report traced) over each evaluation's batches,
/// on every one of `ranks` data-parallel ranks, as fit() runs and counts it.
HeldOutCost held_out_cost(const script::TrainSpec& spec, int64_t forward, int64_t step_flops,
                          int ranks) {
  HeldOutCost h;
  if (!spec.eval_data) return h;
  h.present = true;
  h.every = spec.eval_every;
  h.steps = spec.steps;
  const script::DataSpec& e = *spec.eval_data;
  if (!spec.data || e.batch != spec.data->batch || e.context != spec.data->context) {
    h.why = fmt::format("its batches ({} x {}) are not the training batch this report traced",
                        e.batch, e.context);
    return h;
  }
  try {
    h.batches = held_out_batches(script::train_options(spec), ranks);
  } catch (const UserError& err) {
    h.why = err.message();
    return h;
  }
  h.tokens = h.batches * e.batch * e.context * ranks;
  h.flops = h.batches * forward * ranks;
  h.evaluations = h.steps == 0  ? 0
                  : h.every > 0 ? h.steps / h.every + (h.steps % h.every != 0 ? 1 : 0)
                                : 1;
  const double training = static_cast<double>(h.steps) * static_cast<double>(step_flops) * ranks;
  h.run_fraction =
      training > 0 ? static_cast<double>(h.evaluations) * static_cast<double>(h.flops) / training : 0;
  return h;
}

Report make_report(const std::string& file, const std::vector<script::Setting>& sets,
                   const ReportOptions& o) {
  Report r;
  r.file = file;
  r.fn = o.fn;
  r.hw_name = std::string(o.hw->name);
  r.math = std::string(math_mode_name(o.math));
  r.peak = o.hw->peak(o.math);
  if (!(r.peak > 0))
    throw RuntimeError(fmt::format("--math {}: {} has no {} arithmetic", r.math, r.hw_name, r.math));
  r.bandwidth = o.hw->memory_bandwidth;
  r.device_memory = o.hw->memory_bytes;
  r.gpus = o.gpus;
  r.bucket_mb = o.bucket_mb;
  r.mfu = o.mfu;
  r.tokens = o.tokens;

  // 1. Load and trace.
  script::LoadOptions load{sets, 0, {}};
  load.allocate = false;
  auto program = script::Program::load(file, load);
  const std::vector<std::string> fns = program->functions();
  if (std::find(fns.begin(), fns.end(), o.fn) == fns.end())
    throw UserError(fmt::format("--fn {}: {} has no such function (it has: {})", o.fn, file,
                                fns.empty() ? std::string("none") : fmt::format("{}", fmt::join(fns, ", "))));
  // Traced as `ein train --precision` runs it: f32 weights read through casts to bf16 or f16
  // (ein estimate's conventions, --precision mixed..., count on the f32 step).
  const script::TrainSpec spec = program->has_train() ? program->train_spec() : script::TrainSpec{};
  const DType compute_dtype = o.compute     ? *o.compute
                              : o.precision ? DType::f32
                              : spec.precision == "bf16" ? DType::bf16
                              : spec.precision == "fp16" || spec.precision == "f16" ? DType::f16
                                                                                   : DType::f32;
  if (compute_dtype != DType::f32) program->set_compute_dtype(compute_dtype);
  r.compute = compute_dtype == DType::bf16 ? "bf16" : compute_dtype == DType::f16 ? "fp16" : "fp32";
  const std::vector<TensorType> types = program->example_types(o.fn);
  const script::TraceInfo trace = program->trace_info(o.fn, types, true);
  const Graph& g = trace.graph;
  r.forward_nodes = static_cast<int>(g.nodes.size());
  DimSymbols syms(g, file, sets, o.fn, program->dims());
  std::vector<int> args;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (input_kind(trace, i).starts_with("arg:")) args.push_back(i);
  syms.lead_with(args);
  r.dims = syms.dims();
  r.structural_dims = syms.structural();

  // Tokens per step: the first integer argument (token ids b t), else the data block's.
  r.tokens_note = "no token-id argument: one step counts as one token";
  for (const TensorType& t : types)
    if (!kFloatDTypes.contains(t.dtype) && !t.shape.empty()) {
      r.batch = t.shape[0];
      r.tokens_per_step = checked_numel(t.shape);
      r.tokens_note = fmt::format("from the token-id argument {}[{}]", dtype_name(t.dtype),
                                  fmt::join(t.shape, " "));
      break;
    }
  // No token ids: the batch is the leading dim of the first argument that has one, and the
  // per-unit FLOPs are per sample.
  if (r.tokens_note.starts_with("no token-id"))
    for (size_t i = 0; i < types.size(); ++i)
      if (!types[i].shape.empty()) {
        r.batch = types[i].shape[0];
        r.tokens_per_step = r.batch;
        r.unit = "sample";
        r.tokens_note = fmt::format("no token-id argument: the batch is the leading dim of argument "
                                    "{}, {}[{}]",
                                    i, dtype_name(types[i].dtype), fmt::join(types[i].shape, " "));
        break;
      }

  // Parameters (tied ones once), embeddings (tables of gathers).
  const std::vector<script::ParamInfo> params = program->parameter_info();
  std::set<std::string> embedding;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::gather) {
      const std::string& kind = input_kind(trace, storage_root(g, n.inputs[0]));
      if (kind.starts_with("param:")) embedding.insert(kind.substr(6));
    }
  // A gather table that is also read elsewhere (an output head: GPT-2's wte) is tied.
  std::set<std::string> reused;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const GraphNode& n = g.nodes[i];
    if (n.op == GraphOp::input || n.op == GraphOp::view || n.op == GraphOp::reshape ||
        n.op == GraphOp::permute || n.op == GraphOp::slice || n.op == GraphOp::cast)
      continue;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.op == GraphOp::gather && k == 0) continue;
      const std::string& kind = input_kind(trace, storage_root(g, n.inputs[k]));
      if (kind.starts_with("param:") && embedding.contains(kind.substr(6))) reused.insert(kind.substr(6));
    }
  }
  std::vector<int64_t> trained_numels, trained_bytes;  // what data parallel exchanges
  for (const script::ParamInfo& p : params) {
    const int64_t count = checked_numel(p.shape);
    if (kFloatDTypes.contains(p.dtype)) {
      trained_numels.push_back(count);
      trained_bytes.push_back(count * static_cast<int64_t>(element_size(p.dtype)));
    }
    r.params_total += count;
    r.param_bytes += count * static_cast<int64_t>(element_size(p.dtype));
    if (kFloatDTypes.contains(p.dtype)) r.params_trainable += count;
    if (embedding.contains(p.name)) {
      r.params_embedding += count;
      r.embedding_names.push_back(p.name);
    }
    if (!p.aliases.empty())
      r.tied.push_back(fmt::format("{} (also {})", p.name, fmt::join(p.aliases, ", ")));
    else if (reused.contains(p.name))
      r.tied.push_back(fmt::format("{} (embedding table, also read by another op: an output head)", p.name));
  }
  // The weights in each inference format, as `ein quantize` or a cast would store them.
  for (const napkin::WeightFormat& f : napkin::weight_formats()) {
    InferenceWeights w{std::string(f.name), f.bits_per_weight};
    const std::optional<QuantType> quant = parse_quant_type(f.name);
    for (const script::ParamInfo& p : params) {
      const int64_t count = checked_numel(p.shape);
      const int64_t stored = count * static_cast<int64_t>(element_size(p.dtype));
      if (quant && quantizes(p.dtype, p.shape)) {
        w.bytes += quantized_nbytes(p.shape, *quant);
        ++w.quantized_tensors;
        w.quantized_params += count;
      } else if (quant || !kFloatDTypes.contains(p.dtype)) {
        w.bytes += stored;
        if (quant) ++w.kept_tensors, w.kept_bytes += stored;
      } else {
        w.bytes += static_cast<int64_t>(f.bits_per_weight) / 8 * count;
      }
    }
    if (w.bytes > 0) {
      w.smaller_by = static_cast<double>(r.param_bytes) / static_cast<double>(w.bytes);
      w.decode_bound = r.bandwidth / static_cast<double>(w.bytes);
    }
    w.fits = static_cast<double>(w.bytes) <= r.device_memory;
    r.inference.push_back(w);
  }
  // Data parallel: what each rank sends per step (the plan runtime/dist follows).
  if (r.gpus >= 2 && r.gpus <= 65536 && r.gpus == std::floor(r.gpus))
    for (int rank = 0; rank < static_cast<int>(r.gpus); ++rank) {
      r.comm_bytes.push_back(dist::step_bytes(trained_numels, trained_bytes, static_cast<int>(r.gpus), rank));
      const std::vector<int> owner = dist::partition_parameters(trained_numels, static_cast<int>(r.gpus));
      double own = 0, all = 0;
      for (size_t i = 0; i < owner.size(); ++i) {
        all += static_cast<double>(trained_numels[i]);
        if (owner[i] == rank) own += static_cast<double>(trained_numels[i]);
      }
      r.owned_fraction.push_back(all > 0 ? own / all : 0);
    }

  r.decode = decode_cost(*program);

  // 2. Forward costs.
  const GraphCost fwd = cost(g);

  // 3. Backward with respect to the float parameters (data never needs a gradient).
  int input_count = 0;
  for (const GraphNode& n : g.nodes)
    if (n.op == GraphOp::input) input_count = std::max(input_count, std::get<InputAttr>(n.attr).index + 1);
  std::vector<bool> needs(input_count, false), weights(input_count, false);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const GraphNode& n = g.nodes[i];
    if (n.op != GraphOp::input) continue;
    const int index = std::get<InputAttr>(n.attr).index;
    const bool param = input_kind(trace, i).starts_with("param:");
    needs[index] = param && kFloatDTypes.contains(n.dtype);
    weights[index] = param;
  }
  std::optional<Backward> back;
  std::optional<BackwardCost> bcost;
  GraphCost bnodes;
  std::vector<int> owner;  // per backward node: the forward node it serves, -1 none
  try {
    CompiledGraph c = compile_graph(g, {.differentiate = needs,
                                        .recompute = o.recompute,
                                        .blocks = trace.blocks,
                                        .activation_budget = o.activation_budget,
                                        .cost = true,
                                        .fuse = false});
    back = std::move(c.backward);
    bcost = backward_cost(*back, back->forward, weights);
    bnodes = std::move(*c.cost);
    r.has_backward = true;
  } catch (const RuntimeError& e) {
    r.backward_error = e.what();
  }
  if (back && !r.comm_bytes.empty()) {
    // ZeRO 3's fetches: the forward reads each parameter input once; the backward reads the
    // forward inputs its gradient rules need (its input nodes below the saved values).
    std::set<std::string> forward_reads, backward_reads;
    for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
      if (input_kind(trace, i).starts_with("param:")) forward_reads.insert(input_kind(trace, i).substr(6));
    for (const GraphNode& n : back->graph.nodes) {
      if (n.op != GraphOp::input) continue;
      const int index = std::get<InputAttr>(n.attr).index;
      if (index >= 0 && index < static_cast<int>(trace.inputs.size()) &&
          trace.inputs[index].starts_with("param:"))
        backward_reads.insert(trace.inputs[index].substr(6));
    }
    std::vector<std::string> trained_names;
    for (const script::ParamInfo& p : params)
      if (kFloatDTypes.contains(p.dtype)) trained_names.push_back(p.name);
    const int ranks = static_cast<int>(r.gpus);
    const std::vector<int> owner_of = dist::partition_parameters(trained_numels, ranks);
    for (int rank = 0; rank < ranks; ++rank) {
      int64_t total = 0, own = 0, fetched = 0;
      for (size_t i = 0; i < trained_bytes.size(); ++i) {
        total += trained_bytes[i];
        if (owner_of[i] != rank) continue;
        own += trained_bytes[i];
        fetched += trained_bytes[i] * (static_cast<int64_t>(forward_reads.contains(trained_names[i])) +
                                       static_cast<int64_t>(backward_reads.contains(trained_names[i])));
      }
      r.zero3_comm_bytes.push_back((total - own) + fetched * (ranks - 1));
    }
  }
  // ZeRO 2 and 3: which rank drops which gradient when (runtime/dist/gradient_sync.h).
  std::optional<ShardedGradients> sharded;
  if (back && !r.comm_bytes.empty()) {
    ShardedGradients sg;
    sg.ranks = static_cast<int>(r.gpus);
    sg.owner = dist::partition_parameters(trained_numels, sg.ranks);
    sg.bucket = dist::gradient_buckets(
        trained_bytes, std::max<int64_t>(1, std::llround(o.bucket_mb * (1 << 20))));
    std::map<std::string, int> trained_index;
    for (const script::ParamInfo& p : params)
      if (kFloatDTypes.contains(p.dtype)) trained_index.emplace(p.name, static_cast<int>(trained_index.size()));
    sg.param_of_input.assign(trace.inputs.size(), -1);
    for (size_t i = 0; i < trace.inputs.size(); ++i)
      if (trace.inputs[i].starts_with("param:"))
        if (const auto it = trained_index.find(trace.inputs[i].substr(6)); it != trained_index.end())
          sg.param_of_input[i] = it->second;
    sharded = std::move(sg);
  }
  if (back) {
    const Graph& bg = back->graph;
    r.backward_nodes = static_cast<int>(bg.nodes.size());
    // 4. Attribution: origin, else a producer's (forward order), else a consumer's (reverse).
    const int n = static_cast<int>(bg.nodes.size());
    owner.assign(n, -1);
    const auto forward_side = [&](int i) { return back->forward_of[i] >= 0; };
    for (int i = 0; i < n; ++i) {
      if (forward_side(i)) continue;
      owner[i] = back->origin[i].forward;
      if (owner[i] >= 0 || bg.nodes[i].op == GraphOp::input) continue;
      for (int in : bg.nodes[i].inputs)
        if (!forward_side(in) && owner[in] >= 0) {
          owner[i] = owner[in];
          break;
        }
    }
    std::vector<int> consumer_owner(n, -1);
    for (int i = n - 1; i >= 0; --i) {
      if (forward_side(i)) continue;
      if (owner[i] < 0) owner[i] = consumer_owner[i];
      if (owner[i] >= 0)
        for (int in : bg.nodes[i].inputs)
          if (consumer_owner[in] < 0) consumer_owner[in] = owner[i];
    }
    r.saved_total = bcost->saved_total;
    r.saved_activations = bcost->saved_activations;
    r.recompute_flops = bcost->recompute.flops;
    r.kernel_recompute_flops = bcost->kernel_recompute.flops;
  }

  // 5. Rows.
  struct Key {
    std::string scope, file, text;
    uint32_t line, column;
    auto operator<=>(const Key&) const = default;
  };
  std::map<Key, size_t> index;
  std::map<std::string, int> scope_order;
  std::vector<int> row_of(g.nodes.size(), -1);
  std::vector<std::vector<Monomial>> row_terms;  // per row: its contractions' monomials
  std::vector<bool> row_overflow;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    const GraphNode& n = g.nodes[i];
    if (n.op == GraphOp::input) continue;
    const script::NodeSource& s = i < static_cast<int>(trace.sources.size()) ? trace.sources[i]
                                                                             : script::NodeSource{};
    Key key{cut_scope(s.scope, o.depth), s.file, s.text, s.line, s.column};
    auto [it, fresh] = index.emplace(key, r.rows.size());
    if (fresh) {
      Row row;
      row.scope = key.scope;
      row.location = s.file.empty() ? "(no source)" : fmt::format("{}:{}:{}", short_path(s.file), s.line, s.column);
      row.text = s.text;
      row.line = s.line;
      row.column = s.column;
      row.first_node = i;
      r.rows.push_back(row);
      row_terms.emplace_back();
      row_overflow.push_back(false);
      scope_order.emplace(key.scope, i);
    }
    Row& row = r.rows[it->second];
    row_of[i] = static_cast<int>(it->second);
    ++row.nodes;
    row.shape = shape_text(n);  // the last node of the expression: its result
    row.symbolic_shape = fmt::format("{}[{}]", dtype_name(n.dtype), syms.shape(i));
    if (n.op == GraphOp::contract) {
      row.formula_numeric += (row.formula_numeric.empty() ? "" : " + ") + contract_formula(g, n);
      if (const std::optional<Monomial> m = contract_monomial(g, n, i, syms))
        row_terms[it->second].push_back(*m);
      else
        row_overflow[it->second] = true;
    } else if (n.op == GraphOp::linear_cross_entropy) {
      // h [N, D] · w [D, V]: the head's product, as the unfused contraction counted it.
      const Shape &h = g.nodes[n.inputs[0]].shape, &w = g.nodes[n.inputs[1]].shape;
      std::vector<int64_t> factors{h[0], h[1], w[1]};
      std::erase(factors, 1);
      row.formula_numeric += (row.formula_numeric.empty() ? "" : " + ") +
                             fmt::format("2·{}", fmt::join(factors, "·"));
      Monomial m{2, 1, std::vector<int>(syms.dims().size(), 0)};
      if (m.multiply(syms.axis(i, 0)) && m.multiply(syms.axis(n.inputs[0], 1)) &&
          m.multiply(syms.axis(n.inputs[1], 1)))
        row_terms[it->second].push_back(m);
      else
        row_overflow[it->second] = true;
    } else if (n.op == GraphOp::attention) {
      row.formula_numeric += (row.formula_numeric.empty() ? "" : " + ") + attention_formula(g, n);
      if (const auto m = attention_monomials(g, n, syms))
        row_terms[it->second].insert(row_terms[it->second].end(), m->begin(), m->end());
      else
        row_overflow[it->second] = true;
    }
    row.fwd_flops += fwd.nodes[i].flops;
    row.fwd_matmul_flops += fwd.nodes[i].matmul_flops;
    row.fwd_bytes += fwd.nodes[i].bytes_read + fwd.nodes[i].bytes_written;
    if (bcost) row.saved_bytes += bcost->saved_bytes[i];
    r.fwd_flops += fwd.nodes[i].flops;
    r.fwd_matmul_flops += fwd.nodes[i].matmul_flops;
    r.fwd_bytes += fwd.nodes[i].bytes_read + fwd.nodes[i].bytes_written;
  }
  for (size_t k = 0; k < r.rows.size(); ++k)
    r.rows[k].formula = row_overflow[k] ? r.rows[k].formula_numeric : syms.sum_text(row_terms[k]);
  // Attention shape and the causal (full-count) FLOPs.
  const std::vector<Attention> kinds = find_attention(trace);
  std::vector<bool> attention(g.nodes.size(), false);
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (kinds[i] == Attention::none) continue;
    attention[i] = true;
    if (kinds[i] == Attention::fused) {
      // q [batch... (b h), t, e]: one layer's attention in one node.
      const GraphNode& n = g.nodes[i];
      const Shape& q = g.nodes[n.inputs[0]].shape;
      int64_t heads = 1;
      for (size_t k = 0; k + 2 < q.size(); ++k) heads *= q[k];
      ++r.layers;
      r.seq = g.nodes[n.inputs[1]].shape[q.size() - 2];
      r.heads = r.batch > 0 && heads % r.batch == 0 ? heads / r.batch : heads;
      r.head_dim = q.back();
    } else if (kinds[i] == Attention::scores) {
      // scores: (b h) t s, summed over the head dim e.
      const GraphNode& n = g.nodes[i];
      const auto& c = std::get<ContractAttr>(n.attr);
      const Shape& a = g.nodes[n.inputs[0]].shape;
      int64_t head_dim = 1, heads = 1;
      for (size_t k = 0; k < c.a_axes.size() && k < a.size(); ++k)
        if (std::find(c.out_axes.begin(), c.out_axes.end(), c.a_axes[k]) == c.out_axes.end())
          head_dim *= a[k];
      for (size_t k = 0; k + 2 < n.shape.size(); ++k) heads *= n.shape[k];
      ++r.layers;
      r.seq = n.shape.back();
      r.heads = r.batch > 0 && heads % r.batch == 0 ? heads / r.batch : heads;
      r.head_dim = head_dim;
    }
    r.causal_flops += fwd.nodes[i].flops;
    r.rows[row_of[i]].causal_flops += fwd.nodes[i].flops;
  }
  if (back) {
    int64_t unattributed_flops = 0, unattributed = 0;
    for (int i = 0; i < static_cast<int>(back->graph.nodes.size()); ++i) {
      if (back->forward_of[i] >= 0) continue;  // recomputation has a line of its own
      NodeCost c = bnodes.nodes[i];
      c.flops -= c.recompute_flops;  // a backward kernel's rebuilt logits: the recompute line
      const bool weight = bcost->phases[i] == CostPhase::weight_grad;
      (weight ? r.bwd_weight_flops : r.bwd_input_flops) += c.flops;
      r.bwd_bytes += c.bytes_read + c.bytes_written;
      const int f = owner[i];
      if (f < 0 || row_of[f] < 0) {
        if (back->graph.nodes[i].op != GraphOp::input) {
          ++unattributed;
          unattributed_flops += c.flops;
        }
        continue;
      }
      Row& row = r.rows[row_of[f]];
      (weight ? row.bwd_weight_flops : row.bwd_input_flops) += c.flops;
      row.bwd_bytes += c.bytes_read + c.bytes_written;
      if (attention[f]) {
        row.causal_flops += c.flops;
        r.causal_flops += c.flops;
      }
    }
    // A cross-entropy head computing its gradients in the forward (graph.h's
    // CrossEntropyAttr) did backward work there: its row's, as input gradients.
    for (int f = 0; f < static_cast<int>(back->forward.nodes.size()); ++f) {
      const auto* a = std::get_if<CrossEntropyAttr>(&back->forward.nodes[f].attr);
      if (!a || !a->unit_grads) continue;
      const int64_t grads = node_cost(back->forward, f).gradient_flops;
      r.bwd_input_flops += grads;
      if (f < static_cast<int>(row_of.size()) && row_of[f] >= 0)
        r.rows[row_of[f]].bwd_input_flops += grads;
    }
    if (unattributed_flops > 0)
      r.uncounted.push_back(fmt::format(
          "{} backward nodes serve no known forward node ({} FLOPs): counted in the totals, in "
          "no row",
          unattributed, unattributed_flops));
  }
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i)
    if (g.nodes[i].op == GraphOp::fused || g.nodes[i].op == GraphOp::result)
      r.uncounted.push_back(fmt::format("node %{} ({}): no cost rule for unfused accounting", i,
                                        graph_op_name(g.nodes[i].op)));
  for (Row& row : r.rows) {
    const double compute = static_cast<double>(row.flops()) / r.peak;
    const double memory = static_cast<double>(row.bytes()) / r.bandwidth;
    row.seconds = std::max(compute, memory);
    row.memory_bound = memory > compute;
  }
  std::stable_sort(r.rows.begin(), r.rows.end(), [&](const Row& a, const Row& b) {
    return std::tuple(scope_order[a.scope], a.location.starts_with("("), a.line, a.column, a.first_node) <
           std::tuple(scope_order[b.scope], b.location.starts_with("("), b.line, b.column, b.first_node);
  });

  // 6. Memory ledger: state from the optimizer and precision conventions, activations from
  // liveness (tools/report.h).
  // A bf16 or fp16 compute dtype is ein train's own mixed precision: fp32 weights, gradients
  // and state; the bf16 weight copies are saved activations of the traced step.
  napkin::Precision precision = napkin::Precision::fp32;
  if (o.precision)
    precision = *o.precision;
  else if (compute_dtype == DType::f32 && spec.precision != "fp32" && spec.precision != "f32")
    precision = napkin::Precision::mixed;
  const std::optional<script::OptimizerInfo> declared = program->optimizer_info();
  if (o.optimizer) {
    r.optimizer = std::string(napkin::optimizer_name(*o.optimizer));
    r.optimizer_states = napkin::optimizer_states(*o.optimizer);
    r.optimizer_from = "--optimizer";
  } else if (declared) {
    r.optimizer = fmt::format("{} (state {})", declared->name,
                              declared->states.empty() ? std::string("none") : fmt::format("{}", fmt::join(declared->states, ", ")));
    r.optimizer_states = static_cast<int>(declared->states.size());
    r.optimizer_from = "the script's train block";
  } else {
    r.optimizer = std::string(napkin::optimizer_name(napkin::Optimizer::adamw));
    r.optimizer_states = napkin::optimizer_states(napkin::Optimizer::adamw);
    r.optimizer_from = "assumed: the script declares no optimizer";
  }
  const napkin::ParamMemory pm = napkin::param_memory(r.optimizer_states, precision);
  r.precision = std::string(napkin::precision_name(precision));
  r.bytes_per_param = pm.bytes_per_param();
  const double n = static_cast<double>(r.params_total);
  for (const napkin::MemoryItem& item : pm.items) r.ledger.push_back({item.what, item.bytes_per_param * n});
  r.state_bytes = pm.bytes_per_param() * n;
  r.activation_bytes = static_cast<double>(r.saved_activations);
  r.activation_peak = r.activation_bytes;
  if (back) {
    const StepMemory live = step_memory(back->forward, *back);
    r.activation_peak = std::max(static_cast<double>(live.peak), r.activation_bytes);
    // The backward node at the peak serves a forward expression; name it.
    const int f = live.peak_in_backward ? owner[live.peak_node] : live.peak_node;
    const script::NodeSource* src = f >= 0 && f < static_cast<int>(trace.sources.size()) ? &trace.sources[f] : nullptr;
    r.peak_at = fmt::format("{} of {}", live.peak_in_backward ? "the backward" : "the forward",
                            src && !src->file.empty()
                                ? fmt::format("{}:{}:{} ({})", short_path(src->file), src->line, src->column, src->text)
                                : std::string("an expression outside the source"));
  }
  r.temporaries = r.activation_peak - r.activation_bytes;
  r.ledger.push_back({fmt::format("activations saved for backward (batch {})", r.batch), r.activation_bytes});
  r.ledger.push_back({"temporaries at the liveness peak", r.temporaries});
  r.total_bytes = r.state_bytes + r.activation_peak;

  // The plans of every policy, built and measured as for the chosen one (the chosen one's are
  // the numbers above); the blocks plan is the activation-checkpointing what-if.
  if (back)
    add_recompute_plans(r, g, needs, weights, trace, o.recompute, o.activation_budget,
                        sharded ? &*sharded : nullptr, compute_dtype != DType::f32);
  if (o.fn == "train.loss") {
    const int ranks = r.gpus >= 1 && r.gpus <= 65536 && r.gpus == std::floor(r.gpus)
                          ? static_cast<int>(r.gpus)
                          : 1;
    r.held_out = held_out_cost(spec, r.fwd_flops, r.step_flops(), ranks);
  }
  return r;
}

std::string plan_name(const RecomputePlan& plan) {
  return plan.activation_budget < 1
             ? fmt::format("{} {:g}", recompute_name(plan.policy), plan.activation_budget)
             : recompute_name(plan.policy);
}

double Report::bytes_of(napkin::StatePart part) const {
  const napkin::ParamMemory pm =
      napkin::param_memory(optimizer_states, *napkin::parse_precision(precision));
  return pm.bytes_per_param(part) * static_cast<double>(params_total);
}

}  // namespace ein::report
