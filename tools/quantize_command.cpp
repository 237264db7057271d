// `ein quantize FILE`: a checkpoint's weights in GGUF's q8_0 or q4_0 blocks
// (include/ein/quantize.h), with what it saves and what it costs: bytes and error per tensor,
// and, given the script, the loss on the same batches before and after.
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include <ein/checkpoint.h>
#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/quantize.h>
#include <ein/trainer.h>
#include <fmt/format.h>

#include "tools/cli_format.h"
#include "tools/script_command.h"

namespace ein::cli {
namespace {

struct QuantizeFlags {
  std::string input, output, type = "q8_0", script, data, device = "cpu";
  std::vector<std::string> sets;
  int64_t min_elements = 1024;
  int64_t batches = 8;
  uint64_t seed = 0;
};

std::string shape_text(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

/// The table of what happened to each tensor, and the totals.
void print_entries(const std::vector<QuantizedEntry>& entries, QuantType type) {
  size_t name_w = 6, shape_w = 5;
  for (const auto& e : entries) {
    if (e.action == "dropped") continue;
    name_w = std::max(name_w, e.name.size());
    shape_w = std::max(shape_w, shape_text(e.shape).size());
  }
  std::cout << fmt::format("{:<{}}  {:<{}}  {:<5}  {:<7}  {:>10}  {:>10}  {:>9}  {:>9}\n", "tensor",
                           name_w, "shape", shape_w, "dtype", "stored", "bytes", "now", "rel. RMS",
                           "max |err|");
  int64_t quantized = 0, weights = 0, q_before = 0, q_after = 0, kept = 0, kept_bytes = 0,
          dropped = 0, dropped_bytes = 0;
  for (const auto& e : entries) {
    const bool q = e.action != "kept" && e.action != "dropped";
    if (e.action == "dropped") {  // a line for all of them, below
      ++dropped;
      dropped_bytes += e.bytes_before;
      continue;
    }
    std::cout << fmt::format("{:<{}}  {:<{}}  {:<5}  {:<7}  {:>10}  {:>10}  {:>9}  {:>9}\n", e.name,
                             name_w, shape_text(e.shape), shape_w, dtype_name(e.dtype), e.action,
                             si_aligned(static_cast<double>(e.bytes_before), "B"),
                             si_aligned(static_cast<double>(e.bytes_after), "B"),
                             q ? fmt::format("{:.2e}", e.error.relative_rms) : "-",
                             q ? fmt::format("{:.2e}", e.error.max_abs) : "-");
    if (q) {
      ++quantized;
      weights += e.bytes_before / static_cast<int64_t>(element_size(e.dtype));
      q_before += e.bytes_before;
      q_after += e.bytes_after;
    } else {
      ++kept;
      kept_bytes += e.bytes_before;
    }
  }
  std::cout << fmt::format(
      "\n{}: {} tensors, {} weights: {} -> {} ({:.3g} bits a weight)\n", quant_type_name(type),
      quantized, grouped(static_cast<double>(weights)), si(static_cast<double>(q_before), "B"),
      si(static_cast<double>(q_after), "B"),
      weights ? 8.0 * static_cast<double>(q_after) / static_cast<double>(weights) : 0.0);
  std::cout << fmt::format(
      "kept as they are: {} tensors, {} (fewer than 2 dimensions or "
      "too small: norms, biases)\n",
      kept, si(static_cast<double>(kept_bytes), "B"));
  if (dropped)
    std::cout << fmt::format("left out: {} optimizer tensors (optim.*), {}\n", dropped,
                             si(static_cast<double>(dropped_bytes), "B"));
  const double before = static_cast<double>(q_before + kept_bytes);
  const double after = static_cast<double>(q_after + kept_bytes);
  std::cout << fmt::format("model: {} -> {}, {:.2f}x smaller\n", si(before, "B"), si(after, "B"),
                           after > 0 ? before / after : 0.0);
}

int run_quantize(const QuantizeFlags& f) {
  try {
    const std::optional<QuantType> type = parse_quant_type(f.type);
    if (!type) throw UserError(fmt::format("--type {}: expected q8_0 or q4_0", f.type));
    if (f.min_elements < 0) throw UserError("--min-elements must be >= 0");
    if (f.batches < 1) throw UserError("--batches must be >= 1");
    if (!f.output.empty() && std::filesystem::exists(f.output) &&
        std::filesystem::exists(f.input) && std::filesystem::equivalent(f.output, f.input))
      throw UserError(
          fmt::format("-o {}: that is the input; quantizing loses precision, so "
                      "write the quantized file beside it",
                      f.output));
    QuantizeCheckpointOptions options;
    options.type = *type;
    options.min_elements = f.min_elements;
    // What is left out (a training checkpoint's optimizer state, twice the weights under
    // AdamW) is listed from the header, not read.
    const std::vector<TensorLayout> layout = safetensors_layout(f.input);
    const Checkpoint ck = load_safetensors(
        f.input, [&](const std::string& name) { return !drops(name, options); });
    std::vector<QuantizedEntry> kept;
    auto [tensors, metadata] = quantize_checkpoint(ck, options, &kept);
    std::vector<QuantizedEntry> entries;  // in the file's order
    auto next = kept.begin();
    for (const TensorLayout& t : layout) {
      if (!drops(t.name, options)) {
        if (next == kept.end() || next->name != t.name)
          throw UserError(fmt::format("{}: the file changed while it was read", f.input));
        entries.push_back(*next++);
        continue;
      }
      const int64_t bytes = checked_numel(t.shape) * static_cast<int64_t>(element_size(t.dtype));
      entries.push_back({t.name, t.dtype, t.shape, "dropped", bytes, 0, {}});
    }
    print_entries(entries, *type);

    if (!f.script.empty()) {
      // The same batches scored with the weights as trained and as the codes give them back.
      ScriptTrainOptions load;
      load.device = select_device(f.device);
      for (const script::Setting& s : parse_settings(f.sets))
        load.sets.emplace_back(s.name, s.value);
      load.seed = f.seed;
      TrainScript script = load_train_script(f.script, load);
      script.options.data_path = f.data;
      // Held-out text when the block has some (its eval_data's batches, in order), unless
      // --data names a file: what the quantization costs on text the model did not train on.
      std::string scored = "data";
      if (script.options.eval_data && f.data.empty()) {
        script.options.data = script.options.eval_data;
        script.options.eval_data.reset();
        scored = "eval_data";
      }
      Trainer trainer(*script.model, script.options);
      const std::vector<NamedTensor> params = script.model->parameters();
      Checkpoint quantized;
      quantized.path = f.input + " (" + f.type + ")";
      quantized.tensors = tensors;
      quantized.metadata = metadata;
      load_parameters(ck, params);
      const double before = trainer.evaluate(f.batches);
      load_parameters(quantized, params);  // dequantized
      const double after = trainer.evaluate(f.batches);
      std::cout << fmt::format(
          "loss on {} batches of {}'s {}: {:.6f} as trained, {:.6f} in {} ({:+.6f}, {:+.3f}%)\n",
          f.batches, f.script, scored, before, after, quant_type_name(*type), after - before,
          before != 0 ? 100.0 * (after - before) / before : 0.0);
    }
    if (!f.output.empty()) {
      save_safetensors(f.output, tensors, metadata);
      std::cout << fmt::format("wrote {} ({})\n", f.output,
                               si(static_cast<double>(std::filesystem::file_size(f.output)), "B"));
    }
    return 0;
  } catch (...) {
    return report_error();
  }
}

}  // namespace

void add_quantize_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<QuantizeFlags>();
  CLI::App* c = app.add_subcommand(
      "quantize",
      "Quantize a checkpoint's weights to GGUF's q8_0 or q4_0 blocks (docs/quantization.md).\n\n"
      "Matrices and embeddings (2+ dimensions, --min-elements or more) become blocks of 32 codes\n"
      "with an f16 scale along their last axis; norms and biases stay as they are; a training\n"
      "checkpoint's optimizer state is left out. Prints each tensor's bytes and error; with\n"
      "--script, the script's loss on the same batches with the weights as trained and as\n"
      "quantized (its eval_data's held-out batches when it has some, else its data's); with\n"
      "-o, writes the quantized safetensors file, which `ein train --init` loads dequantized\n"
      "and whose codes `ein sample`'s decode step reads.\n\n"
      "Examples:\n"
      "  ein quantize ckpt/step_200.safetensors --type q4_0 -o model.q4_0.safetensors\n"
      "  ein quantize ckpt/step_200.safetensors --script examples/gpt/byte_gpt.ein --batches 16\n"
      "  ein sample examples/gpt/byte_gpt.ein model.q4_0.safetensors --prompt 'The '");
  c->add_option("file", o->input,
                "the safetensors checkpoint (ein train's step_N.safetensors or any)")
      ->required();
  c->add_option("-o,--output", o->output, "write the quantized safetensors file here");
  c->add_option("--type", o->type, "q8_0 (default; 8.5 bits a weight) or q4_0 (4.5 bits)");
  c->add_option("--min-elements", o->min_elements,
                "quantize tensors of at least this many elements (default 1024)");
  c->add_option("--script", o->script,
                "the model's .ein script: also print its loss before and after");
  c->add_option("--batches", o->batches,
                "with --script: batches to average the loss over (default 8)");
  c->add_option("--data", o->data,
                "with --script: the data file (overrides the block's data path)");
  c->add_option("--set", o->sets, "with --script: override a dim or let, as ein train's --set");
  c->add_option("--seed", o->seed, "with --script: the seed of the batches' order (default 0)");
  c->add_option("--device", o->device, "with --script: cpu (default), cuda or auto");
  c->callback([o, &exit_code] { exit_code = run_quantize(*o); });
}

}  // namespace ein::cli
