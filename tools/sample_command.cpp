// `ein sample SCRIPT [WEIGHTS]`: text (or token ids) drawn from a trained model, as nanoGPT's
// sample.py: the script's fn logits with weights from a checkpoint (a file, a training run's
// checkpoint directory, or an `ein quantize` file), a prompt, a temperature, top-k and top-p;
// each token is printed as it is drawn, and the tokens a second it drew them at at the end.
// The sampling itself is ein::generate() (include/ein/trainer.h).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include <ein/checkpoint.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/quantize.h>
#include <ein/storage.h>
#include <ein/trainer.h>
#include <ein/training_checkpoint.h>
#include <fmt/format.h>

#include "api/train_report.h"
#include "tools/cli_format.h"
#include "tools/script_command.h"

namespace ein::cli {
namespace {

struct SampleFlags {
  std::string file, weights, prompt, prompt_file, tokens, device = "auto", precision = "fp32";
  std::string quantize;  ///< q8_0, q4_0 or none; empty: the checkpoint's own type, else none
  std::string cache_dtype;  ///< bf16 or f32; empty: the model's compute dtype
  std::vector<std::string> sets;
  std::optional<int64_t> length;
  std::optional<double> temperature;
  int64_t num_samples = 1;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  uint64_t seed = 0;
  bool quiet = false;
  bool no_cache = false;
};

/// The checkpoint WEIGHTS names: the file itself, or a training run's latest good checkpoint
/// when it is a directory (as `ein train --resume` picks it).
std::string weights_file(const std::string& weights) {
  if (!std::filesystem::is_directory(weights)) return weights;
  const std::optional<LatestCheckpoint> latest = find_latest_checkpoint(weights);
  if (!latest)
    throw UserError(fmt::format("{}: no checkpoint of ein train in this directory", weights));
  return latest->path;
}

/// "1,2,3" or "1 2 3" as token ids.
std::vector<int64_t> parse_tokens(const std::string& text) {
  std::vector<int64_t> ids;
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream in(spaced);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0)
      throw UserError(
          fmt::format("--tokens {}: '{}' is not a token id (an integer >= 0)", text, word));
    ids.push_back(id);
  }
  if (ids.empty()) throw UserError("--tokens: no token ids given");
  return ids;
}

/// The prompt's tokens: --tokens, --prompt-file or --prompt as bytes, else the train block's
/// `sample` prompt, else a newline (nanoGPT's default start).
std::vector<int64_t> prompt_tokens(const SampleFlags& f, const TrainOptions& o, bool bytes) {
  const int given = int{!f.tokens.empty()} + int{!f.prompt.empty()} + int{!f.prompt_file.empty()};
  if (given > 1) throw UserError("give one of --prompt, --prompt-file and --tokens");
  if (!f.tokens.empty()) return parse_tokens(f.tokens);
  std::string text = o.sample.empty() ? "\n" : o.sample;
  if (!f.prompt.empty()) text = f.prompt;
  if (!f.prompt_file.empty()) {
    std::ifstream in(f.prompt_file, std::ios::binary);
    if (!in) throw UserError(fmt::format("--prompt-file {}: cannot open it", f.prompt_file));
    text.assign(std::istreambuf_iterator<char>(in), {});
    if (text.empty())
      throw UserError(fmt::format("--prompt-file {}: the file is empty", f.prompt_file));
  }
  if (!bytes)
    throw UserError(
        "this script's data are token ids, not bytes: give the prompt as --tokens, e.g. --tokens "
        "464,2068");
  std::vector<int64_t> ids;
  for (unsigned char c : text)
    ids.push_back(c);
  return ids;
}

/// What --quantize asks for, given the checkpoint's own type: nullopt for float weights.
std::optional<QuantType> quantize_flag(const std::string& flag, std::optional<QuantType> own) {
  if (flag.empty()) return own;
  if (flag == "none") return std::nullopt;
  if (std::optional<QuantType> type = parse_quant_type(flag)) return type;
  throw UserError(fmt::format("--quantize {}: expected q8_0, q4_0 or none", flag));
}

int run_sample(const SampleFlags& f) {
  try {
    if (f.num_samples < 1)
      throw UserError(fmt::format("--num-samples {}: expected at least 1", f.num_samples));
    ScriptTrainOptions load;
    load.device = select_device(f.device);
    for (const script::Setting& s : parse_settings(f.sets))
      load.sets.emplace_back(s.name, s.value);
    load.seed = f.seed;
    // With WEIGHTS, the parameters take the file's tensors as they are (no initial values
    // drawn, no second copy), and only the model's tensors are read, not an optimizer's state.
    load.allocate = f.weights.empty();
    TrainScript script = load_train_script(f.file, load);
    const TrainOptions& o = script.options;
    if (!o.data || o.data->context < 1)
      throw UserError(fmt::format(
          "{}: sampling needs the train block's data (its context T is the window logits() reads)",
          f.file));
    const bool bytes = o.data->kind == "bytes";
    std::string from = "the script's initial (random) parameters: no WEIGHTS given";
    std::optional<Checkpoint> ck;
    std::optional<QuantType> own;  // the checkpoint's quantization
    if (!f.weights.empty()) {
      ck = load_parameter_tensors(weights_file(f.weights), script.model->parameters());
      from = ck->path;
      if (auto step = ck->metadata.find("step"); step != ck->metadata.end()) {
        const auto eval = ck->metadata.find(kEvalLossMetadataKey);
        from += eval == ck->metadata.end()
                    ? fmt::format(" (step {})", step->second)
                    : fmt::format(" (step {}, eval loss {:.4g})", step->second,
                                  std::strtod(eval->second.c_str(), nullptr));
      }
      own = quantized_type(*ck);
    }
    // Under bf16 or fp16 the step reads 16-bit copies of the weights, not their codes; off
    // the CPU it reads floats. A quantized checkpoint's own codes are read where they can be.
    const bool mixed = f.precision != "fp32";
    const bool implicit = f.quantize.empty();
    if (mixed && !f.quantize.empty() && f.quantize != "none")
      throw UserError(fmt::format(
          "--quantize {} reads the f32 weights' codes; with --precision {} the step reads {} "
          "copies of them instead: give one of the two",
          f.quantize, f.precision, f.precision));
    const std::optional<QuantType> codes =
        mixed || (implicit && load.device.kind != DeviceKind::cpu)
            ? std::nullopt
            : quantize_flag(f.quantize, own);
    if (codes && load.device.kind != DeviceKind::cpu)
      throw UserError(fmt::format(
          "--quantize {}: the decode step reads quantized codes on the CPU only; on {} give "
          "--quantize none (the weights as the values the codes stand for)",
          quant_type_name(*codes), load.device.str()));
    // A decoder that reads the file's own codes takes them as they are: only the parameters
    // not held as codes get float values (norms, biases), so that sampling never holds the
    // f32 matrices, not even while loading.
    std::map<std::string, QuantizedTensor> file_codes;
    if (ck && codes && codes == own && !f.no_cache && f.length.value_or(1) > 0)
      file_codes = quantized_tensors(*ck);
    const auto load_weights = [&](const std::map<std::string, QuantizedTensor>& codes_only) {
      try {
        load_parameters(*ck, *script.model, codes_only);
      } catch (const RuntimeError& e) {
        throw UserError(fmt::format("{}: {}", ck->path, e.what()));
      }
    };
    if (ck) {
      load_weights(file_codes);
      if (is_quantized(*ck))
        from += file_codes.empty() ? " (quantized, read as the values its codes stand for)"
                                   : " (quantized: its codes read as they are)";
    }
    if (codes && codes != own) {
      // What a checkpoint `ein quantize` wrote of them would load as.
      round_parameters_to_codes(script.model->parameters(), *codes);
      from += fmt::format(" (rounded to {} codes: --quantize)", quant_type_name(*codes));
    }
    if (f.precision == "bf16")
      script.model->set_compute_dtype(DType::bf16);
    else if (f.precision == "fp16")
      script.model->set_compute_dtype(DType::f16);
    else if (f.precision != "fp32")
      throw UserError(fmt::format("--precision {}: expected fp32, bf16 or fp16", f.precision));

    GenerateOptions g;
    g.prompt = prompt_tokens(f, o, bytes);
    g.length = f.length.value_or(o.sample_length > 0 ? o.sample_length : 256);
    g.context = o.data->context;
    g.temperature = f.temperature.value_or(o.temperature);
    g.top_k = f.top_k.value_or(o.top_k);
    g.top_p = f.top_p.value_or(o.top_p);
    g.cache = !f.no_cache;
    g.decoder.weights = codes;
    g.decoder.codes = file_codes;
    if (!f.cache_dtype.empty()) {
      if (f.no_cache)
        throw UserError(fmt::format("--cache-dtype {} is the key-value cache's; --no-cache has "
                                    "none: give one of the two",
                                    f.cache_dtype));
      if (f.cache_dtype != "bf16" && f.cache_dtype != "f32")
        throw UserError(fmt::format("--cache-dtype {}: expected bf16 or f32", f.cache_dtype));
      if (load.device.kind != DeviceKind::cpu)
        throw UserError(fmt::format("--cache-dtype {}: a cache of another dtype than the "
                                    "model's is read on the CPU only, not on {}",
                                    f.cache_dtype, load.device.str()));
      g.decoder.cache = f.cache_dtype == "bf16" ? DType::bf16 : DType::f32;
    }
    // One decoder serves every sample. It keeps what its passes read, a matrix read from codes
    // as its codes only, so with the model gone the float parameters it does not read are
    // freed: sampling from q8_0 holds about a quarter of the f32 weights' bytes.
    std::string uncached;
    std::unique_ptr<Decoder> decoder;
    int64_t weight_bytes = 0;
    if (g.cache && g.length > 0) {
      decoder = script.model->decoder(g.context, uncached, g.decoder);
      if (decoder) {
        script.model.reset();
        weight_bytes = decoder->weight_bytes();
      }
    }
    if (!decoder && !file_codes.empty()) load_weights({});  // fn logits reads every parameter
    g.decoder.codes.clear();
    file_codes.clear();
    ck.reset();  // what the decoder holds of it, it shares
    double seconds = 0, first = 0, flops = 0;
    int64_t cached = 0, cache_bytes = 0, steps = 0, matrices = 0, matrix_bytes = 0;
    double step_flops = 0;
    std::vector<double> warm;  // every draw's time but the process's first
    for (int64_t i = 0; i < f.num_samples; ++i) {
      g.seed = f.seed + static_cast<uint64_t>(i);
      if (i > 0) std::cout << "---\n";
      // Each token printed as it is drawn, after the prompt (printed with the first, so that
      // a prompt the model refuses prints nothing); bytes as printable UTF-8, ids by spaces.
      detail::PrintableUtf8Stream text;
      bool started = false, first_id = true;
      const auto put = [&](int64_t t) {
        if (bytes) {
          std::cout << text.add(std::string(1, static_cast<char>(t)));
        } else {
          std::cout << (first_id ? "" : " ") << t;
          first_id = false;
        }
      };
      const auto start = [&] {
        if (started) return;
        started = true;
        for (int64_t t : g.prompt) put(t);
      };
      g.on_token = [&](int64_t t) {
        start();
        put(t);
        std::cout.flush();
      };
      const Generated out = decoder ? generate(*decoder, g) : generate(*script.model, g);
      start();
      if (bytes) std::cout << text.finish();
      std::cout << '\n' << std::flush;
      seconds += out.seconds;
      flops += static_cast<double>(out.flops);
      if (i == 0) first = out.first_seconds;
      cached += out.cached_tokens;
      steps += out.steps;
      step_flops += static_cast<double>(out.step_flops);
      cache_bytes = out.cache_bytes;
      matrices = out.quantized_matrices;
      matrix_bytes = out.quantized_bytes;
      if (!decoder) uncached = out.uncached;
      warm.insert(warm.end(), out.token_seconds.begin() + (i == 0 && g.length > 0),
                  out.token_seconds.end());
    }
    if (!f.quiet) {
      std::string rate = "one token";
      if (!warm.empty()) {
        std::nth_element(warm.begin(), warm.begin() + warm.size() / 2, warm.end());
        const double median = warm[warm.size() / 2];
        // At least 3 significant digits: a tiny model's 0.0251 ms printed as 0.025 would be
        // 2% off the tokens/s beside it.
        rate = fmt::format("{} ms a token (median; {:.1f} tokens/s) after the first",
                           fixed(1e3 * median, 3, 3), median > 0 ? 1 / median : 0.0);
      }
      const int64_t tokens = g.length * f.num_samples;
      // every token but the last one drawn goes into the model
      const int64_t read = (static_cast<int64_t>(g.prompt.size()) + g.length - 1) * f.num_samples;
      std::string how;
      if (tokens == 0)
        how = "none drawn";
      else if (cached > 0)
        how = fmt::format(
            "key-value cache of {}{}: {} tokens through it, {}{}{}",
            si(static_cast<double>(cache_bytes), "B"),
            f.cache_dtype.empty() ? "" : " (" + f.cache_dtype + ")", cached,
            steps < cached ? "the prompt in one pass over the window, " : "",
            steps > 0 ? fmt::format("{} step{} of {} FLOPs", steps, steps == 1 ? "" : "s",
                                    grouped(step_flops / static_cast<double>(steps)))
                      : std::string("no step"),
            cached >= read ? std::string()
            : decoder
                ? fmt::format("; {} token{} past the window, {} FLOPs each", read - cached,
                              read - cached == 1 ? "" : "s",
                              grouped(static_cast<double>(decoder->window_flops())))
                : fmt::format("; {} tokens through fn logits over a window of {}", read - cached,
                              g.context));
      else
        how = fmt::format("fn logits over a window of {}{}", g.context,
                          uncached.empty() ? std::string(", --no-cache")
                                           : fmt::format("; no key-value cache: {}", uncached));
      if (cached > 0 && codes)
        how += matrices > 0
                   ? fmt::format("; the steps and the window's pass read {} weight matrices from "
                                 "{} codes ({})",
                                 matrices, quant_type_name(*codes),
                                 si(static_cast<double>(matrix_bytes), "B"))
                   : fmt::format("; no weight matrix of the step could be read from {} codes",
                                 quant_type_name(*codes));
      if (weight_bytes > 0)
        how += fmt::format("; {} of weights held", si(static_cast<double>(weight_bytes), "B"));
      std::cerr << fmt::format(
          "ein sample: {} tokens in {} s: {}, which took {} s (tracing and compiling "
          "logits()); {} a token drawn ({}), {}; on {}, at most {} allocated; weights: {}\n",
          tokens, fixed(seconds, 3, 3), rate, fixed(first, 3, 3), grouped(tokens ? flops / static_cast<double>(tokens) : 0) + " FLOPs",
          how, si(seconds > 0 ? flops / seconds : 0, "FLOP/s"), load.device.str(),
          si(static_cast<double>(max_memory_allocated(load.device)), "B"), from);
    }
    return 0;
  } catch (...) {
    return report_error();
  }
}

}  // namespace

void add_sample_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<SampleFlags>();
  CLI::App* c = app.add_subcommand(
      "sample",
      "Draw text from a trained model: the script's fn logits continued token by token.\n\n"
      "WEIGHTS is a safetensors file (an ein train checkpoint, an --init file or an ein quantize\n"
      "file) or a checkpoint directory (its latest good checkpoint). Each token\n"
      "is drawn from the logits of the last T tokens (T: the train block's context) divided by\n"
      "--temperature, among the --top-k most likely and the --top-p nucleus; each is printed as\n"
      "it is drawn. While the tokens fit in one window, each\n"
      "comes from a key-value cache: a decode step derived from fn logits's graph computes the\n"
      "new token's row alone (--no-cache: fn logits over the window every token). The step reads\n"
      "its weight matrices from q8_0 or q4_0 codes (on the CPU) when WEIGHTS is an ein quantize\n"
      "file, or when --quantize asks (the other weights rounded to those codes' values). Text\n"
      "goes to stdout (samples separated by ---), the tokens a second to stderr.\n\n"
      "Examples:\n"
      "  ein sample examples/gpt/byte_gpt.ein ck/ --prompt 'The ' --length 300\n"
      "  ein sample examples/gpt/byte_gpt.ein gpt.q8_0.safetensors --temperature 0.8 --top-k 20 "
      "--num-samples 3");
  c->add_option("file", o->file, "the .ein script (its train block: fn logits, data)")->required();
  c->add_option("weights", o->weights, "a safetensors file or a checkpoint directory");
  c->add_option("--prompt", o->prompt,
                "the text to continue (default: the block's sample prompt, else a newline)");
  c->add_option("--prompt-file", o->prompt_file, "the text to continue, from a file");
  c->add_option("--tokens", o->tokens, "the prompt as token ids: 1,2,3 (for a model of token ids)");
  c->add_option("--length", o->length,
                "tokens to draw (default: the block's sample_length, else 256)");
  c->add_option("--temperature", o->temperature,
                "divides the logits (default: the block's temperature; 0: the most likely token)");
  c->add_option("--top-k", o->top_k,
                "draw among the k most likely tokens only (default: the block's top_k, else 0: "
                "all)");
  c->add_option("--top-p", o->top_p,
                "nucleus sampling: draw among the most likely tokens whose probabilities reach P "
                "together, after --temperature and --top-k (default: the block's top_p, else 1: "
                "all)");
  c->add_option("--num-samples", o->num_samples,
                "samples to draw (default 1); sample i uses seed + i");
  c->add_option("--seed", o->seed,
                "the draws (default 0; also the parameters' init without WEIGHTS)");
  c->add_option("--set", o->sets, "override a dim or let, as ein train's --set");
  c->add_option("--device", o->device, "auto (default), cpu, cuda or cuda:N");
  c->add_option("--precision", o->precision, "fp32 (default), bf16 or fp16");
  c->add_flag("--quiet", o->quiet, "no tokens/s line on stderr");
  c->add_option("--quantize", o->quantize,
                "q8_0 or q4_0: the decode step reads its weight matrices from such codes (CPU "
                "only); none: float weights (default: the checkpoint's own codes, else none)");
  c->add_option("--cache-dtype", o->cache_dtype,
                "bf16 or f32: the key-value cache's dtype (default: the model's); bf16 holds it "
                "in half the bytes of f32, the keys and values rounded as they are written (CPU "
                "only)");
  c->add_flag("--no-cache", o->no_cache,
              "recompute fn logits over the whole window for every token instead of drawing "
              "from its key-value cache (the decode step derived from it)");
  c->callback([o, &exit_code] { exit_code = run_sample(*o); });
}

}  // namespace ein::cli
