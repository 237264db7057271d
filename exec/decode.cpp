#include "exec/decode.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <ein/autograd.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/quantize.h>
#include <fmt/format.h>

#include "compiler/cost/charges.h"
#include "compiler/cost/cost_model.h"
#include "compiler/decode/quantize_step.h"
#include "compiler/pipeline.h"
#include "exec/execute.h"

namespace ein {
namespace {

/// Whether every element of `bias` after its query (key index above the query index along
/// dims `query` and `key`, the last two) is -inf.
bool masks_the_future(const Tensor& bias, int query, int key) {
  if (query != bias.dim() - 2 || key != bias.dim() - 1) return false;
  Tensor b = bias.to(cpu());
  if (b.dim() > 2) {
    for (int64_t i = 0; i < b.shape()[0]; ++i)
      if (!masks_the_future(b.select(0, i), query - 1, key - 1)) return false;
    return true;
  }
  const Tensor m = b.to(DType::f64).contiguous();
  const int64_t T = m.shape()[0], S = m.shape()[1];
  const double* v = m.data<double>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = t + 1; s < S; ++s)
      if (v[t * S + s] != -INFINITY) return false;
  return true;
}

int64_t total_flops(const GraphCharges& charges) {
  int64_t flops = 0;
  for (const auto& node : charges)
    for (const NodeCharge& c : node) flops += c.cost.flops;
  return flops;
}

class GraphDecoder final : public Decoder {
 public:
  /// The decoder of `window` (its tokens input `token_input`), fed `feeds` (its inputs'
  /// tensors, the tokens' any). Throws NotCausal for a mask that lets a query see later keys.
  GraphDecoder(std::shared_ptr<const Graph> window, int token_input, DecodeStep step,
                std::vector<Tensor> feeds, const DecoderOptions& options,
                std::map<int, QuantizedTensor> given)
      : window_(std::move(window)),
        step_(std::move(step)),
        feeds_(std::move(feeds)),
        given_(std::move(given)) {
    device_ = feeds_.at(token_input).device();
    for (const GraphNode& n : window_->nodes)
      if (n.op == GraphOp::input && std::get<InputAttr>(n.attr).index == token_input) {
        token_shape_ = n.shape;
        token_shape_[1] = 1;
      }
    if (options.weights)
      for (int node : step_.static_nodes)
        if (std::optional<QuantizedTensor> q = sliced_codes(node); q && q->type == *options.weights)
          given_statics_.emplace(node, std::move(*q));
    compute_statics();
    for (const CausalCheck& c : step_.causal) {
      if (!masks_the_future(float_value(c.node), c.query, c.key))
        throw NotCausal{};
    }
    if (options.weights) {
      if (device_.kind != DeviceKind::cpu) throw QuantizedOffCpu{};
      // A matrix `ein quantize` quantizes whose values are its codes' own (a quantized
      // checkpoint's, or rounded to them): the step then computes with the window's numbers.
      std::map<int, QuantizedTensor> codes;
      const auto eligible = [&](int node, DType dtype, const Shape& shape) {
        if (!quantizes(dtype, shape)) return false;
        if (const QuantizedTensor* q = given_codes(node);
            q && q->type == *options.weights && q->dtype == dtype && q->shape == shape) {
          codes.emplace(node, *q);  // codes given: as they are
          return true;
        }
        const Tensor& w = float_value(node);
        std::optional<QuantizedTensor> q;
        try {
          q = quantize(w, *options.weights);
        } catch (const RuntimeError&) {
          return false;  // a NaN or an infinity, or beyond f16's scales: no codes
        }
        if (dequantize(*q).to_vector<float>() != w.to(cpu()).to_vector<float>()) return false;
        codes.emplace(node, std::move(*q));
        return true;
      };
      step_ = quantize_step(step_, *options.weights, eligible);  // a copy: value() reads step_
      for (const QuantizedMatrix& m : step_.quantized) quantized_.push_back(codes.at(m.node));
    }
    if (options.cache) {
      if (*options.cache != DType::bf16 && *options.cache != DType::f32)
        throw UserError(fmt::format("decoder: a key-value cache of {}: it takes bf16 or f32",
                                    dtype_name(*options.cache)));
      const auto other = [&](const CacheSlot& c) { return c.dtype != *options.cache; };
      if (std::any_of(step_.caches.begin(), step_.caches.end(), other)) {
        if (device_.kind != DeviceKind::cpu) throw CacheOffCpu{};
        step_ = with_cache_dtype(step_, *options.cache);
      }
    }
    CompiledGraph c = compile_graph(step_.step, {});
    charges_ = fused_charges(c.fused, c.graph, c.fused_source);
    fused_ = std::move(c.fused);
    // The prompt's pass: the window graph, with the rows the caches hold as outputs too, and
    // its products with the step's quantized matrices read from the same codes.
    CompiledGraph p = compile_graph(decoder_window(*window_, step_, prefill_inputs_), {});
    prefill_charges_ = fused_charges(p.fused, p.graph, p.fused_source);
    prefill_ = std::move(p.fused);
    token_input_ = token_input;
    for (const CacheSlot& slot : step_.caches) caches_.push_back(zeros(slot.shape, slot.dtype, device_));
    release_unread();
  }

  /// An attention mask that lets a query see a later key.
  struct NotCausal {};
  /// Quantized weights asked for on a device other than the CPU.
  struct QuantizedOffCpu {};
  /// A cache of another dtype than the window's asked for on a device other than the CPU.
  struct CacheOffCpu {};

  Tensor next(int64_t token) override {
    const int64_t T = step_.length;
    if (position_ >= T)
      throw UserError(fmt::format("decoder: it holds {} tokens, its window; a token more needs "
                                  "the whole window recomputed",
                                  T));
    NoGrad no_grad;
    std::vector<Tensor> in;
    for (const StepInput& s : step_.inputs) {
      switch (s.kind) {
        case StepInput::Kind::token:
          in.push_back(full(token_shape_, static_cast<double>(token), DType::i64).to(device_));
          break;
        case StepInput::Kind::whole: in.push_back(value(s.node)); break;
        case StepInput::Kind::row: in.push_back(value(s.node).slice(s.dim, position_, position_ + 1)); break;
        case StepInput::Kind::cache: in.push_back(caches_.at(s.index)); break;
        case StepInput::Kind::codes: in.push_back(quantized_.at(s.index).codes); break;
        case StepInput::Kind::scales: in.push_back(quantized_.at(s.index).scales); break;
        case StepInput::Kind::position:  // on the host, where write_row reads it: no device sync
          in.push_back(full({1}, static_cast<double>(position_), DType::i64));
          break;
      }
    }
    std::vector<Tensor> into(1 + caches_.size());
    std::copy(caches_.begin(), caches_.end(), into.begin() + 1);
    std::vector<Tensor> out = execute_into(fused_, std::move(in), into, &charges_);
    for (size_t i = 0; i < caches_.size(); ++i)
      if (!out[1 + i].same_storage(caches_[i])) caches_[i] = out[1 + i];
    ++position_;
    const Tensor& logits = out[0];
    return logits.reshape({logits.numel()});
  }

  Tensor prefill(const std::vector<int64_t>& tokens) override {
    const int64_t n = static_cast<int64_t>(tokens.size()), T = step_.length;
    if (position_ != 0 || n < 1 || n > T)
      throw UserError(fmt::format("decoder: prefill of {} tokens at position {}; it takes 1 to "
                                  "{} tokens into an empty decoder",
                                  n, position_, T));
    NoGrad no_grad;
    const std::vector<Tensor> out =
        execute(prefill_, pass_inputs(prefill_inputs_, tokens), prefill_charges_);
    for (size_t i = 0; i < caches_.size(); ++i) caches_[i] = out.at(1 + i).contiguous();
    position_ = n;
    const Tensor row = out.front().select(1, n - 1);  // [1, V]: the window's row after the last
    return row.reshape({row.numel()});
  }

  Tensor window(const std::vector<int64_t>& tokens) override {
    const int64_t T = step_.length;
    if (static_cast<int64_t>(tokens.size()) != T)
      throw UserError(fmt::format("decoder: window() of {} tokens; it takes the window's {}",
                                  tokens.size(), T));
    NoGrad no_grad;
    if (!window_pass_) window_pass_ = make_window_pass();
    if (window_pass_->refill) {  // the caches of the first T - 1, then a step for the last
      const std::vector<int64_t> first(tokens.begin(), tokens.end() - 1);
      const std::vector<Tensor> out = execute(
          window_pass_->graph, pass_inputs(window_pass_->inputs, first), window_pass_->charges);
      for (size_t i = 0; i < caches_.size(); ++i) caches_[i] = out.at(i).contiguous();
      position_ = T - 1;
      return next(tokens.back());
    }
    position_ = T;  // what the caches hold is stale: next() refuses until reset()
    const std::vector<Tensor> out = execute(
        window_pass_->graph, pass_inputs(window_pass_->inputs, tokens), window_pass_->charges);
    const Tensor row = out.front().select(1, T - 1);
    return row.reshape({row.numel()});
  }

  int64_t step_flops() const override { return total_flops(charges_); }
  int64_t prefill_flops() const override { return total_flops(prefill_charges_); }
  int64_t window_flops() const override {
    if (!window_pass_) window_pass_ = make_window_pass();
    return total_flops(window_pass_->charges) + (window_pass_->refill ? step_flops() : 0);
  }
  int64_t position() const override { return position_; }
  int64_t capacity() const override { return step_.length; }
  int64_t cache_bytes() const override {
    int64_t bytes = 0;
    for (const Tensor& c : caches_) bytes += c.nbytes();
    return bytes;
  }
  int64_t weight_bytes() const override {
    std::set<const Storage*> seen;  // a slice of a parameter shares its storage
    int64_t bytes = 0;
    const auto add = [&](const Tensor& t) {
      if (t.defined() && seen.insert(t.storage().get()).second) bytes += t.storage()->nbytes();
    };
    for (size_t i = 0; i < feeds_.size(); ++i)
      if (static_cast<int>(i) != token_input_) add(feeds_[i]);
    for (const Tensor& t : statics_) add(t);
    for (const QuantizedTensor& q : quantized_) {
      add(q.codes);
      add(q.scales);
    }
    return bytes;
  }
  int64_t quantized_matrices() const override {
    return static_cast<int64_t>(quantized_.size());
  }
  int64_t quantized_bytes() const override {
    int64_t bytes = 0;
    for (const QuantizedTensor& q : quantized_) bytes += q.nbytes();
    return bytes;
  }
  void reset() override {
    position_ = 0;
    for (size_t i = 0; i < caches_.size(); ++i)
      caches_[i] = zeros(step_.caches[i].shape, step_.caches[i].dtype, device_);
  }

 private:
  /// The inputs of a window's pass whose inputs are `inputs` (decoder_window()'s), the tokens
  /// right-padded with 0 to the window.
  std::vector<Tensor> pass_inputs(const std::vector<int>& inputs,
                                  const std::vector<int64_t>& tokens) const {
    Shape window_tokens = token_shape_;
    window_tokens[1] = step_.length;
    Tensor x = zeros(window_tokens, DType::i64);
    std::copy(tokens.begin(), tokens.end(), x.data<int64_t>());
    const int n_window = static_cast<int>(feeds_.size());
    std::vector<Tensor> in;
    for (int old : inputs) {
      if (old == token_input_) {
        in.push_back(x.to(device_));
      } else if (old < n_window) {
        in.push_back(feeds_[static_cast<size_t>(old)]);
      } else {  // quantized matrix (old - n) / 2: its codes, then its scales
        const QuantizedTensor& q = quantized_.at(static_cast<size_t>((old - n_window) / 2));
        in.push_back((old - n_window) % 2 == 0 ? q.codes : q.scales);
      }
    }
    return in;
  }

  /// The codes a window node was given as: a window input's (DecoderOptions::codes), or a
  /// static slice's of one (sliced_codes()); null for any other node.
  const QuantizedTensor* given_codes(int node) const {
    const GraphNode& n = window_->nodes.at(node);
    if (n.op == GraphOp::input) {
      const auto it = given_.find(std::get<InputAttr>(n.attr).index);
      return it == given_.end() ? nullptr : &it->second;
    }
    const auto it = given_statics_.find(node);
    return it == given_statics_.end() ? nullptr : &it->second;
  }

  /// The codes of static node `node` when it slices a window input given as codes with whole
  /// blocks (`qkv.weight[:, :dim]`, dim a multiple of kQuantBlock; rows of any slice): the
  /// given codes' and scales' own slices, as quantize() of the sliced floats makes them.
  std::optional<QuantizedTensor> sliced_codes(int node) const {
    const GraphNode& n = window_->nodes.at(node);
    if (n.op != GraphOp::slice) return std::nullopt;
    const QuantizedTensor* whole = given_codes(n.inputs.at(0));
    const SliceAttr& a = std::get<SliceAttr>(n.attr);
    const int last = static_cast<int>(n.shape.size()) - 1;
    if (!whole || whole->shape != window_->nodes.at(n.inputs[0]).shape || a.step != 1 ||
        a.dim < 0 || a.dim > last || n.shape.at(a.dim) != a.stop - a.start)
      return std::nullopt;
    QuantizedTensor q = *whole;
    q.shape = n.shape;
    if (a.dim != last) {
      q.codes = whole->codes.slice(a.dim, a.start, a.stop).contiguous();
      q.scales = whole->scales.slice(a.dim, a.start, a.stop).contiguous();
      return q;
    }
    if (a.start % kQuantBlock != 0 || (a.stop % kQuantBlock != 0 && a.stop != whole->shape.back()))
      return std::nullopt;
    const int64_t per_byte = whole->type == QuantType::q4_0 ? 2 : 1;  // codes a byte holds
    q.codes = whole->codes.slice(a.dim, a.start / per_byte, (a.stop + per_byte - 1) / per_byte)
                  .contiguous();
    q.scales = whole->scales.slice(a.dim, a.start / kQuantBlock,
                                   (a.stop + kQuantBlock - 1) / kQuantBlock)
                   .contiguous();
    return q;
  }

  /// statics_: the step's static nodes, but those given as codes (given_statics_: their
  /// floats are computed only if a pass reads them), from the window inputs they still read.
  void compute_statics() {
    statics_.assign(step_.static_nodes.size(), Tensor());
    if (step_.static_nodes.empty()) return;
    Graph statics = step_.statics;
    std::vector<int> kept;  // per output of `statics`: its index in static_nodes
    statics.outputs.clear();
    for (size_t i = 0; i < step_.static_nodes.size(); ++i)
      if (!given_statics_.count(step_.static_nodes[i])) {
        statics.outputs.push_back(step_.statics.outputs.at(i));
        kept.push_back(static_cast<int>(i));
      }
    if (kept.empty()) return;
    std::vector<Tensor> in;
    for (int old : drop_unread(statics)) {
      const int input = step_.statics_inputs.at(static_cast<size_t>(old));
      read_as_floats(input);
      in.push_back(feeds_.at(static_cast<size_t>(input)));
    }
    std::vector<Tensor> out = execute(statics, std::move(in));
    for (size_t k = 0; k < kept.size(); ++k) statics_.at(kept[k]) = std::move(out.at(k));
  }

  /// Window input `input`'s floats: a parameter given only as codes gets their dequantized
  /// values (held beside the codes).
  void read_as_floats(int input) {
    Tensor& f = feeds_.at(static_cast<size_t>(input));
    if (f.defined()) return;
    const auto it = given_.find(input);
    if (it != given_.end()) f = dequantize(it->second).to(device_);
  }

  /// value() of a window node, its floats made from the codes it was given if it has none.
  const Tensor& float_value(int node) {
    const GraphNode& n = window_->nodes.at(node);
    if (n.op == GraphOp::input) {
      read_as_floats(std::get<InputAttr>(n.attr).index);
    } else {
      const auto it = std::find(step_.static_nodes.begin(), step_.static_nodes.end(), node);
      Tensor& t = statics_.at(static_cast<size_t>(it - step_.static_nodes.begin()));
      if (!t.defined()) t = dequantize(given_statics_.at(node)).to(device_);
    }
    return value(node);
  }

  /// Lets go of the window's inputs and statics that neither pass reads any more (a matrix
  /// read only from codes, and a slice of one), so that with the model gone their memory is
  /// free; what was given as codes and a pass reads as floats gets them.
  void release_unread() {
    const DecoderReads reads = decoder_reads(*window_, step_, prefill_inputs_);
    for (size_t i = 0; i < feeds_.size(); ++i) {
      if (static_cast<int>(i) == token_input_) continue;
      if (reads.inputs.at(i))
        read_as_floats(static_cast<int>(i));
      else
        feeds_[i] = Tensor();
    }
    for (size_t i = 0; i < statics_.size(); ++i)
      if (reads.statics.at(i)) float_value(step_.static_nodes[i]);
    given_.clear();
    given_statics_.clear();
    for (size_t i = 0; i < statics_.size(); ++i)
      if (!reads.statics.at(i)) statics_[i] = Tensor();
  }

  /// The window node's value: a window input, or a static node computed once.
  const Tensor& value(int node) const {
    const GraphNode& n = window_->nodes.at(node);
    if (n.op == GraphOp::input) return feeds_.at(std::get<InputAttr>(n.attr).index);
    const auto it = std::find(step_.static_nodes.begin(), step_.static_nodes.end(), node);
    return statics_.at(static_cast<size_t>(it - step_.static_nodes.begin()));
  }

  std::shared_ptr<const Graph> window_;
  Shape token_shape_;  ///< the window's tokens with one position
  DecodeStep step_;
  std::vector<Tensor> feeds_;
  std::map<int, QuantizedTensor> given_;  ///< codes by window input, until release_unread()
  std::map<int, QuantizedTensor> given_statics_;  ///< the same by static node (sliced_codes())
  std::vector<Tensor> statics_;
  Graph fused_;
  GraphCharges charges_;
  Graph prefill_;  ///< the window graph, fused, with the caches' rows as outputs after its own
  /// Per input of prefill_: the window input it is, or, past them, n + 2k (the codes of
  /// quantized_[k]) or n + 2k + 1 (its scales), n the window's inputs.
  std::vector<int> prefill_inputs_;
  GraphCharges prefill_charges_;
  /// window()'s pass, made at first use: the pass that refills the caches (decoder_refill())
  /// where it and a step cost fewer FLOPs, else the window graph as prefill_ without the
  /// caches' rows.
  struct WindowPass {
    Graph graph;
    std::vector<int> inputs;  ///< as prefill_inputs_
    GraphCharges charges;
    bool refill = false;
  };
  mutable std::optional<WindowPass> window_pass_;

  /// window()'s pass (WindowPass).
  WindowPass make_window_pass() const {
    WindowPass pass;
    std::vector<int> refill_inputs;
    Graph refill = decoder_refill(*window_, step_, refill_inputs);
    DecodeStep uncached = step_;
    uncached.caches.clear();
    Graph whole = decoder_window(*window_, uncached, pass.inputs);
    pass.refill = refills_past_the_window(cost(refill).total.flops, step_flops(),
                                          cost(whole).total.flops);
    if (pass.refill) pass.inputs = std::move(refill_inputs);
    CompiledGraph p = compile_graph(pass.refill ? refill : whole, {});
    pass.charges = fused_charges(p.fused, p.graph, p.fused_source);
    pass.graph = std::move(p.fused);
    return pass;
  }

  int token_input_ = 0;  ///< which of feeds_ the tokens are
  std::vector<Tensor> caches_;
  std::vector<QuantizedTensor> quantized_;  ///< per DecodeStep::quantized: its codes and scales
  Device device_ = cpu();
  int64_t position_ = 0;
};

}  // namespace

std::unique_ptr<Decoder> make_graph_decoder(std::shared_ptr<const Graph> window, int token_input,
                                            DecodeStep step, std::vector<Tensor> feeds,
                                            std::string& why, const DecoderOptions& options,
                                            std::map<int, QuantizedTensor> given) {
  NoGrad no_grad;
  try {
    return std::make_unique<GraphDecoder>(std::move(window), token_input, std::move(step),
                                          std::move(feeds), options, std::move(given));
  } catch (const GraphDecoder::NotCausal&) {
    why = "an attention's mask lets a query see later keys, so the model is not causal";
    return nullptr;
  } catch (const GraphDecoder::QuantizedOffCpu&) {
    why = "a step from quantized weights runs on the CPU (ein::quantized_matmul)";
    return nullptr;
  } catch (const GraphDecoder::CacheOffCpu&) {
    why = "a key-value cache of another dtype than the model's runs on the CPU";
    return nullptr;
  }
}

}  // namespace ein
