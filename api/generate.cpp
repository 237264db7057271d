// ein::generate(): a trained model's logits() continued token by token (nanoGPT's sample.py:
// temperature, top-k, one seeded generator; and Hugging Face's top-p), and
// ein::load_parameters(), which `ein train --init`, `ein quantize --script` and `ein sample`
// share to read weights into a model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <set>

#include <ein/autograd.h>
#include <ein/checkpoint.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/flop_counter.h>
#include <ein/ops.h>
#include <ein/quantize.h>
#include <ein/trainer.h>
#include <fmt/format.h>

#include "compiler/decode/quantize_step.h"

namespace ein {
namespace {

using Clock = std::chrono::steady_clock;

void check(const GenerateOptions& o) {
  if (o.prompt.empty())
    throw UserError("generate: the prompt is empty; it needs at least one token to continue");
  if (o.length < 0) throw UserError(fmt::format("generate: length {} is negative", o.length));
  if (o.context < 1)
    throw UserError(
        fmt::format("generate: context {}; logits() needs windows of at least 1 token", o.context));
  if (!(o.temperature >= 0) || std::isinf(o.temperature))
    throw UserError(fmt::format(
        "generate: temperature {}; expected a finite number >= 0 (0: the most likely token)",
        o.temperature));
  if (o.top_k < 0) throw UserError(fmt::format("generate: top-k {} is negative (0: all)", o.top_k));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw UserError(fmt::format("generate: top-p {}; expected a probability in (0, 1] (1: all)",
                                o.top_p));
  for (int64_t t : o.prompt)
    if (t < 0) throw UserError(fmt::format("generate: the prompt holds token {}", t));
}

/// Zeroes the weights outside the nucleus: from the largest down, a token stays while the
/// weight before it is below top_p of the total, and so does every token of the last kept
/// one's weight (as top-k keeps ties with the k-th).
void keep_nucleus(std::vector<double>& weights, double top_p) {
  std::vector<double> sorted = weights;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  double total = 0;
  for (double w : sorted) total += w;
  double before = 0, last = sorted.front();
  for (double w : sorted) {
    if (w == 0 || before >= top_p * total) break;
    last = w;
    before += w;
  }
  for (double& w : weights)
    if (w < last) w = 0;
}

/// The weights of the next token's draw from one row of logits: exp((l - max) / temperature)
/// over the top_k largest (every logit equal to the k-th kept), or 1 for each largest logit at
/// temperature 0; then only the nucleus of top_p. UserError for NaN or +inf, or a row of -inf.
std::vector<double> draw_weights(const double* row, int64_t V, const GenerateOptions& o,
                                 int64_t position) {
  for (int64_t v = 0; v < V; ++v)
    if (std::isnan(row[v]) || row[v] == INFINITY)
      throw UserError(
          fmt::format("generate: the logits at position {} hold {} (token {}); the weights or the "
                      "input are not finite",
                      position, row[v], v));
  const double m = *std::max_element(row, row + V);
  if (m == -INFINITY)
    throw UserError(fmt::format(
        "generate: every logit at position {} is -inf; no token can be drawn", position));
  double floor = -INFINITY;  // logits below it are never drawn
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted(row, row + V);
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                     std::greater<double>());
    floor = sorted[static_cast<size_t>(o.top_k - 1)];
  }
  std::vector<double> weights(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) {
    if (row[v] < floor) continue;
    weights[v] = o.temperature > 0 ? std::exp((row[v] - m) / o.temperature) : (row[v] == m);
  }
  if (o.top_p < 1) keep_nucleus(weights, o.top_p);
  return weights;
}

/// The logits after the last of `tokens` from logits() of the last T of them (right-padded
/// with token 0 while there are fewer), as f64 on the CPU; `V` receives the vocabulary.
Tensor window_logits(Trainable& model, const std::vector<int64_t>& tokens, int64_t T,
                     int64_t& V) {
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), T);
  Tensor x = zeros({1, T}, DType::i64);
  std::copy(tokens.end() - n, tokens.end(), x.data<int64_t>());
  const Tensor logits = model.logits(x);
  if (logits.dim() != 3 || logits.shape()[0] != 1 || logits.shape()[1] != T)
    throw UserError(
        fmt::format("generate: logits() of tokens (1, {}) gave shape {}; expected (1, {}, V)", T,
                    shape_str(logits.shape()), T));
  V = logits.shape()[2];
  // Only the row drawn from leaves the device and becomes f64, not the window's T · V logits.
  return logits.select(1, n - 1).select(0, 0).to(cpu()).to(DType::f64).contiguous();
}

/// The same from the decoder, which takes the tokens it has not seen yet: the prompt at first
/// (by prefill() when its steps would take longer), then each drawn one.
Tensor decoded_logits(Decoder& decoder, const std::vector<int64_t>& tokens, int64_t& V,
                      Generated& g, const FlopCounter& counter) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  Tensor last;
  if (decoder.position() == 0 && n > 1 &&
      static_cast<double>(n) * static_cast<double>(decoder.step_flops()) * kStepSlowdown >=
          static_cast<double>(decoder.prefill_flops())) {
    last = decoder.prefill(tokens);
  } else {
    const int64_t before = counter.totals().flops;  // what the steps ran, as counted
    for (int64_t p = decoder.position(); p < n; ++p) {
      last = decoder.next(tokens[static_cast<size_t>(p)]);
      ++g.steps;
    }
    g.step_flops += counter.totals().flops - before;
  }
  g.cached_tokens = n;
  last = last.to(cpu()).to(DType::f64).contiguous();
  V = last.numel();
  return last;
}

/// The draws of generate(): `decoder` (may be null) while the tokens fit in a window, else
/// `window` (the logits after the last of the tokens, as f64 on the CPU, and V).
Generated draw(const GenerateOptions& o, Decoder* decoder,
               const std::function<Tensor(const std::vector<int64_t>&, int64_t&)>& window,
               Generated g) {
  g.tokens = o.prompt;
  if (decoder) {
    g.cache_bytes = decoder->cache_bytes();
    g.quantized_matrices = decoder->quantized_matrices();
    g.quantized_bytes = decoder->quantized_bytes();
  }
  std::mt19937_64 rng(o.seed);
  const int64_t T = o.context;
  FlopCounter counter;
  const auto start = Clock::now();
  auto drawn = start;  // when the last token was drawn
  for (int64_t i = 0; i < o.length; ++i) {
    int64_t V = 0;
    const bool cached = decoder && static_cast<int64_t>(g.tokens.size()) <= T;
    const Tensor logits =
        cached ? decoded_logits(*decoder, g.tokens, V, g, counter) : window(g.tokens, V);
    if (i == 0)
      for (int64_t t : o.prompt)
        if (t >= V)
          throw UserError(fmt::format(
              "generate: the prompt holds token {}, beyond the model's vocabulary of {}", t, V));
    const int64_t position = static_cast<int64_t>(g.tokens.size()) - 1;
    const std::vector<double> weights = draw_weights(logits.data<double>(), V, o, position);
    std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
    g.tokens.push_back(pick(rng));
    g.token_seconds.push_back(std::chrono::duration<double>(Clock::now() - drawn).count());
    if (o.on_token) o.on_token(g.tokens.back());
    drawn = Clock::now();
  }
  g.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!g.token_seconds.empty()) g.first_seconds = g.token_seconds.front();
  g.flops = counter.totals().flops;
  return g;
}

}  // namespace

Generated generate(Trainable& model, const GenerateOptions& o) {
  check(o);
  NoGrad no_grad;
  Generated g;
  std::unique_ptr<Decoder> decoder;
  if (o.cache && o.length > 0 && static_cast<int64_t>(o.prompt.size()) <= o.context)
    decoder = model.decoder(o.context, g.uncached, o.decoder);
  return draw(o, decoder.get(),
              [&](const std::vector<int64_t>& tokens, int64_t& V) {
                return window_logits(model, tokens, o.context, V);
              },
              std::move(g));
}

Generated generate(Decoder& decoder, const GenerateOptions& o) {
  check(o);
  if (o.context != decoder.capacity())
    throw UserError(fmt::format("generate: context {}, but the decoder holds windows of {} tokens",
                                o.context, decoder.capacity()));
  NoGrad no_grad;
  decoder.reset();
  const int64_t T = o.context;
  return draw(o, &decoder,
              [&](const std::vector<int64_t>& tokens, int64_t& V) {
                // Past the window: the last T tokens' window, its row after the last.
                Tensor last = decoder.window(std::vector<int64_t>(tokens.end() - T, tokens.end()));
                last = last.to(cpu()).to(DType::f64).contiguous();
                V = last.numel();
                return last;
              },
              Generated{});
}

void load_parameters(const Checkpoint& checkpoint, const std::vector<NamedTensor>& params) {
  // A quantized file's tensors are dequantized one at a time as each is copied into its
  // parameter and let go, so their floats are never all held at once beside the parameters.
  // Checked first, on stand-ins of the dequantized dtypes and shapes (one element, broadcast).
  const std::map<std::string, QuantizedTensor> quantized = quantized_tensors(checkpoint);
  Checkpoint shapes;
  shapes.path = checkpoint.path;
  shapes.tensors = checkpoint.tensors;
  for (const auto& [name, q] : quantized)
    shapes.tensors.emplace_back(
        name, zeros({1}, q.dtype).as_strided(q.shape, Shape(q.shape.size(), 0), 0));
  std::vector<std::pair<std::string, Tensor>> targets;
  for (const auto& p : params)
    targets.emplace_back(
        !shapes.find(p.name) && shapes.find("model." + p.name) ? "model." + p.name : p.name,
        p.tensor);
  check_fits(shapes, targets);
  for (const auto& [name, target] : targets) {
    const auto q = quantized.find(name);
    target.detach().copy_(q != quantized.end() ? dequantize(q->second) : *checkpoint.find(name));
  }
}

Checkpoint load_parameter_tensors(const std::string& path, const std::vector<NamedTensor>& params) {
  std::set<std::string> names;
  for (const NamedTensor& p : params)
    for (const std::string& name : {p.name, "model." + p.name})
      for (const char* part : {"", ".qcodes", ".qscales"}) names.insert(name + part);
  return load_safetensors(path, [&](const std::string& name) { return names.count(name) > 0; });
}

void load_parameters(const Checkpoint& checkpoint, Trainable& model,
                     const std::map<std::string, QuantizedTensor>& codes_only) {
  const std::vector<NamedTensor> params = model.parameters();
  const bool unset = std::any_of(params.begin(), params.end(),
                                 [](const NamedTensor& p) { return !p.tensor.defined(); });
  if (!unset) return load_parameters(checkpoint, params);
  // Only the quantized tensors a parameter takes as floats are dequantized, each once: the
  // result becomes that parameter (set_parameter() keeps it, no copy) or is copied into it.
  const std::map<std::string, QuantizedTensor> quantized = quantized_tensors(checkpoint);
  const auto has = [&](const std::string& name) {
    return checkpoint.find(name) || quantized.count(name);
  };
  Checkpoint values;  // what the parameters with values copy in (copy_into checks them)
  values.path = checkpoint.path;
  std::vector<std::pair<std::string, Tensor>> targets;
  std::vector<std::pair<std::string, std::string>> given;  // parameter, tensor without one
  std::string missing;
  for (const NamedTensor& p : params) {
    const std::string name = !has(p.name) && has("model." + p.name) ? "model." + p.name : p.name;
    if (!p.tensor.defined() && (codes_only.count(p.name) || codes_only.count("model." + p.name)))
      continue;
    if (!has(name)) {
      missing += "\n  '" + name + "' is missing from the checkpoint";
      continue;
    }
    const auto q = quantized.find(name);
    values.tensors.emplace_back(name, q != quantized.end() ? dequantize(q->second)
                                                           : *checkpoint.find(name));
    if (p.tensor.defined())
      targets.emplace_back(name, p.tensor);
    else
      given.emplace_back(p.name, name);
  }
  if (!missing.empty())
    throw RuntimeError("checkpoint '" + checkpoint.path + "' does not fit:" + missing);
  copy_into(values, targets);
  for (const auto& [param, name] : given) {
    try {
      model.set_parameter(param, *values.find(name));
    } catch (const UserError& e) {
      throw RuntimeError(
          fmt::format("checkpoint '{}' does not fit: {}", checkpoint.path, e.message()));
    }
  }
}

void round_parameters_to_codes(const std::vector<NamedTensor>& params, QuantType type) {
  NoGrad no_grad;
  for (const NamedTensor& p : params)
    if (quantizes(p.tensor.dtype(), p.tensor.shape()))
      p.tensor.copy_(dequantize(quantize(p.tensor, type, p.name)).to(p.tensor.device()));
}

}  // namespace ein
