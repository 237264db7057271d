// `ein train FILE`: runs a script's train block. Each step: a batch (token windows from a
// memory-mapped file, or the block's `fn batch()`), the loss traced once and run fused with
// autograd, optional gradient accumulation and clipping, the script's optimizer (one fused
// kernel per parameter shape), the learning-rate schedule. It prints a live progress line,
// writes a JSON-lines log, checkpoints atomically, resumes exactly, and ends with a summary
// and, when the block asks for one, a generated sample.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

#include <unistd.h>

#include <ein/errors.h>
#include <ein/flop_counter.h>
#include <ein/grad_clip.h>
#include <ein/ops.h>
#include <ein/schedule.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "script/script.h"
#include <ein/diagnostic.h>
#include <ein/source.h>
#include <ein/autograd.h>
#include <ein/checkpoint.h>
#include <ein/cpu_peak.h>
#include "runtime/cuda/backend.h"
#include "runtime/cuda/driver.h"
#include "runtime/random.h"
#include <ein/storage.h>
#include <ein/token_data.h>
#include <ein/token_file.h>
#include <ein/training_checkpoint.h>
#include "tools/script_command.h"

namespace ein::cli {
namespace {

namespace fs = std::filesystem;

struct TrainOptions {
  std::string file, device = "auto", precision, checkpoint, data, log, init;
  std::vector<std::string> sets;
  std::optional<int64_t> steps;
  uint64_t seed = 0;
  bool resume = false, quiet = false;
  int keep = 3;
};

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return fmt::format("{:.3g} {}{}", v, prefixes[i], unit);
}

std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string bytes_str(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    ++i;
  }
  return fmt::format("{:.1f} {}", v, units[i]);
}

/// The token loader of the block's data setting.
struct Data {
  std::unique_ptr<TokenLoader> loader;
  int64_t vocab = 0;
};

/// Where byte-level token files of text corpora are kept: $EIN_CACHE_DIR/data, else
/// $XDG_CACHE_HOME/ein/data or ~/.cache/ein/data, else the temporary directory.
fs::path data_cache_dir() {
  if (const char* dir = std::getenv("EIN_CACHE_DIR"); dir && *dir) return fs::path(dir) / "data";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "ein" / "data";
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "ein" / "data";
  return fs::temp_directory_path() / "ein-data";
}

/// The u16 token file of a text's bytes, named by the text's hash and size: written once
/// (to a temporary name, then renamed, so a killed run leaves no half file) and reused.
std::string byte_token_file(const std::string& text) {
  const fs::path dir = data_cache_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path path = dir / fmt::format("bytes-{:016x}-{}.u16", std::hash<std::string>{}(text), text.size());
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 2 * text.size()) return path.string();
  const fs::path temp = path.string() + fmt::format(".tmp.{}", getpid());
  write_byte_tokens(temp.string(), text, TokenDType::u16);
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    throw UserError(fmt::format("cannot write the token file {}: {}", path.string(), ec.message()));
  }
  return path.string();
}

void open_data(Data& d, const script::DataSpec& spec, const std::string& override_path,
               uint64_t seed) {
  const std::string path = override_path.empty() ? spec.path : override_path;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw UserError(fmt::format("data file '{}' does not exist{}", path,
                                override_path.empty() ? " (set by the train block's data; --data overrides it)" : ""));
  LoaderOptions o;
  o.batch_size = spec.batch;
  o.context = spec.context;
  o.seed = seed;
  o.order = spec.order == "sequential" ? BatchOrder::sequential : BatchOrder::random;
  o.prefetch = 2;
  o.drop_last = true;
  std::string token_path = path;
  std::optional<TokenDType> dtype;
  if (spec.kind == "bytes") {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    token_path = byte_token_file(text);
    dtype = TokenDType::u16;
    o.vocab_size = 256;
    d.vocab = 256;
  } else if (spec.dtype == "u16" || spec.dtype == "uint16") {
    dtype = TokenDType::u16;
  } else if (spec.dtype == "i32" || spec.dtype == "int32") {
    dtype = TokenDType::i32;
  }
  try {
    d.loader = std::make_unique<TokenLoader>(token_path, o, dtype);
  } catch (const RuntimeError& e) {
    throw UserError(fmt::format("data '{}': {}", path, e.what()));
  }
}

/// Token batches onto a GPU through page-locked staging: the loader's thread prefetches into
/// host tensors, each is copied into a pinned buffer and queued to the device asynchronously
/// on the current stream, where the step's kernels then read it in stream order. Before a
/// buffer is refilled the stream is waited for, so its last copy has left it (in a training
/// loop the loss's item() has already drained the stream, and the wait returns at once).
class PinnedFeeder {
 public:
  explicit PinnedFeeder(Device device) : device_(device) {}

  Tensor to_device(const Tensor& host_in, size_t slot) {
    const Tensor host = host_in.contiguous();
    if (slots_.size() <= slot) slots_.resize(slot + 1);
    auto& pinned = slots_[slot];
    if (pinned) Stream::current(device_.index).synchronize();
    if (!pinned || pinned->nbytes() < host.nbytes())
      pinned = std::make_unique<PinnedBuffer>(host.nbytes());
    std::memcpy(pinned->data(), host.data_ptr(), static_cast<size_t>(host.nbytes()));
    Tensor out = empty(host.shape(), host.dtype(), device_);
    copy_to_device_async(out.device_ptr(), pinned->data(), host.nbytes(),
                         Stream::current(device_.index));
    return out;
  }

 private:
  Device device_;
  std::vector<std::unique_ptr<PinnedBuffer>> slots_;
};

std::vector<Tensor> next_batch(Data& d, script::Program& p, int64_t step,
                               PinnedFeeder* feeder) {
  if (!d.loader) return p.make_batch(step);
  if (!d.loader->has_next()) d.loader->set_position(0);  // sequential: another pass
  Batch b = d.loader->next_batch();
  if (!feeder) return {b.x, b.y};
  return {feeder->to_device(b.x, 0), feeder->to_device(b.y, 1)};
}

/// Multiplies every gradient by `factor` in place (unscaling fp16 loss-scaled gradients).
void scale_grads(const std::vector<Tensor>& params, double factor) {
  NoGrad no_grad;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor f = full({}, factor, DType::f32, g.device());
    std::string axes;
    for (int64_t d = 0; d < g.dim(); ++d)
      axes += fmt::format("{}a{}", d ? " " : "", d);
    g.copy_(ein::map(fmt::format("g[{}], f[] -> g * f", axes), {g, f}));
  }
}

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }

int run_train(const TrainOptions& o) {
  try {
    // auto: the GPU when there is one (the same command uses it), else the CPU.
    Device device;
    try {
      device = o.device == "auto" ? (cuda_is_available() ? cuda(0) : cpu()) : parse_device(o.device);
    } catch (const RuntimeError&) {
      throw UserError(fmt::format("--device {}: expected auto, cpu, cuda or cuda:N", o.device));
    }
    const HardwareProfile* hw = &this_cpu();
    std::string hw_name = "this CPU's";
    if (device.kind == DeviceKind::cuda) {
      if (!cuda_is_available())
        throw UserError(fmt::format("--device {}: {}", o.device, cuda_driver_info().reason));
      if (device.index >= cuda_driver_info().device_count)
        throw UserError(fmt::format("--device {}: the driver sees {} GPU(s)", o.device,
                                    cuda_driver_info().device_count));
      const std::string gpu = cuda_device_properties(device.index).name;
      if (!o.quiet) std::cerr << fmt::format("ein train: on {} ({})\n", device.str(), gpu);
      hw = hardware_for_gpu(gpu);
      hw_name = hw ? fmt::format("the {}'s", hw->name) : fmt::format("{}'s (unknown: MFU 0)", gpu);
    }
    script::LoadOptions load;
    load.sets = parse_settings(o.sets);
    load.seed = o.seed;
    load.device = device;
    auto program = script::Program::load(o.file, load);
    if (!program->has_train())
      throw UserError(fmt::format("{} has no train block to run (ein check and ein run work on "
                                  "scripts without one)",
                                  o.file));
    const script::TrainSpec spec = program->train_spec();
    const std::string precision = o.precision.empty() ? spec.precision : o.precision;
    if (precision != "fp32" && precision != "bf16" && precision != "fp16")
      throw UserError(fmt::format("--precision {}: expected fp32, bf16 or fp16", precision));
    // Mixed precision: activations in bf16/fp16; master weights, gradients and optimizer
    // state in f32 (fp16 adds dynamic loss scaling, below).
    if (precision == "bf16") program->set_compute_dtype(DType::bf16);
    if (precision == "fp16") program->set_compute_dtype(DType::f16);
    const int64_t steps = o.steps ? *o.steps : spec.steps;
    if (steps < 0) throw UserError("--steps must be >= 0");
    const auto params = program->parameters();
    if (params.empty()) throw UserError("the train block's modules have no parameters to train");
    std::vector<Tensor> param_tensors;
    int64_t n_params = 0, param_bytes = 0;
    for (const auto& p : params) {
      param_tensors.push_back(p.tensor);
      n_params += p.tensor.numel();
      param_bytes += p.tensor.nbytes();
    }
    program->init_optimizer_state();
    if (!o.init.empty()) {
      try {
        const Checkpoint ck = load_safetensors(o.init);
        // Plain names, or a checkpoint of ein train's ("model." + name).
        std::vector<std::pair<std::string, Tensor>> targets;
        for (const auto& p : params)
          targets.emplace_back(!ck.find(p.name) && ck.find("model." + p.name) ? "model." + p.name : p.name,
                               p.tensor);
        copy_into(ck, targets);
      } catch (const RuntimeError& e) {
        throw UserError(fmt::format("--init: {}", e.what()));
      }
    }
    Data data;
    const std::unique_ptr<PinnedFeeder> feeder =
        device.kind == DeviceKind::cuda ? std::make_unique<PinnedFeeder>(device) : nullptr;
    if (spec.data) open_data(data, *spec.data, o.data, o.seed);
    else if (!o.data.empty())
      throw UserError("--data: the train block has no data setting (its batches come from fn batch())");

    // Resume: parameters, optimizer state, step; the data position and every random draw are
    // functions of (seed, step), so the run continues exactly.
    int64_t start = 0;
    auto checkpoint_tensors = [&] {
      std::vector<std::pair<std::string, Tensor>> t;
      for (const auto& p : params)
        t.emplace_back("model." + p.name, p.tensor);
      for (const auto& s : program->optimizer_state())
        t.emplace_back("optim." + s.name, s.tensor);
      return t;
    };
    if (o.resume) {
      if (o.checkpoint.empty()) throw UserError("--resume needs --checkpoint DIR");
      const auto latest = find_latest_checkpoint(o.checkpoint);
      if (!latest) {
        std::cerr << fmt::format("ein train: no checkpoint in '{}' yet; starting at step 0\n", o.checkpoint);
      } else {
        for (const std::string& s : latest->skipped)
          std::cerr << "ein train: skipped " << s << '\n';
        try {
          const Checkpoint ck = load_safetensors(latest->path);
          if (auto it = ck.metadata.find("seed"); it != ck.metadata.end() && it->second != std::to_string(o.seed))
            throw UserError(fmt::format("{} was written with --seed {}, this run has --seed {}; "
                                        "resume with the same seed",
                                        latest->path, it->second, o.seed));
          copy_into(ck, checkpoint_tensors());
        } catch (const RuntimeError& e) {
          throw UserError(fmt::format("cannot resume from {}: {}", latest->path, e.what()));
        }
        start = latest->step;
        std::cerr << fmt::format("ein train: resumed from {} (step {})\n", latest->path, start);
      }
    }
    if (data.loader) data.loader->set_position(start * spec.accumulate);

    std::ofstream log;
    if (!o.log.empty()) {
      log.open(o.log, o.resume ? std::ios::app : std::ios::trunc);
      if (!log) throw UserError(fmt::format("--log {}: cannot open for writing", o.log));
    }
    auto save = [&](int64_t step) {
      if (o.checkpoint.empty()) return;
      const std::string path = save_training_checkpoint(
          o.checkpoint, step, checkpoint_tensors(),
          {{"seed", std::to_string(o.seed)}, {"script", o.file}});
      prune_checkpoints(o.checkpoint, o.keep);
      if (!o.quiet) std::cerr << fmt::format("\nein train: wrote {}\n", path);
    };

    const bool tty = isatty(STDERR_FILENO) && !o.quiet;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    double total_flops = 0;
    double seconds = 0, last_loss = NAN;
    int64_t tokens_per_step = 0, done = 0;
    const double lr_max = spec.lr;
    const bool fp16 = precision == "fp16";
    // MFU against the dense peak of the arithmetic the matmuls use: f32 on the CPU; on a GPU
    // the activations' dtype (bf16/fp16 tensor cores), or f32 (TF32 when EIN_CUDA_TF32=1).
    const DType mfu_dtype = device.kind == DeviceKind::cpu || precision == "fp32" ? DType::f32
                            : precision == "bf16"                                 ? DType::bf16
                                                                                  : DType::f16;
    double loss_scale = fp16 ? 65536.0 : 1.0;
    int64_t good_steps = 0, skipped_steps = 0;
    for (int64_t step = start + 1; step <= steps && !g_interrupted; ++step) {
      FlopCounter counter;
      const auto t0 = std::chrono::steady_clock::now();
      double loss_sum = 0;
      int64_t tokens = 0;
      for (int64_t micro = 0; micro < spec.accumulate; ++micro) {
        const std::vector<Tensor> batch =
            next_batch(data, *program, (step - 1) * spec.accumulate + micro, feeder.get());
        tokens += batch.empty() ? 0 : batch.front().numel();
        const int64_t k = (step - 1) * spec.accumulate + micro;
        const double scale = loss_scale / static_cast<double>(spec.accumulate);
        const Tensor loss = program->loss(batch, k);
        loss_sum += loss.item();
        loss.backward(full({}, scale, loss.dtype(), loss.device()));
      }
      const double loss_value = loss_sum / static_cast<double>(spec.accumulate);
      if (!std::isfinite(loss_value))
        throw UserError(fmt::format("the loss is {} at step {}; the last checkpoint (if any) is "
                                    "kept; lower the learning rate or clip gradients (clip = 1.0)",
                                    loss_value, step));
      bool skip = false;
      const double used_scale = loss_scale;
      if (fp16) {
        // Dynamic loss scaling (torch.cuda.amp.GradScaler's rule): gradients of the scaled
        // loss that overflowed skip the step and halve the scale; otherwise they are unscaled,
        // and every 2000 good steps the scale doubles.
        if (!std::isfinite(optim::grad_norm(param_tensors))) {
          skip = true;
          loss_scale /= 2;
          good_steps = 0;
          ++skipped_steps;
        } else {
          scale_grads(param_tensors, 1.0 / loss_scale);
          if (++good_steps % 2000 == 0) loss_scale *= 2;
        }
      }
      if (spec.clip > 0 && !skip) optim::clip_grad_norm_(param_tensors, spec.clip);
      double lr = lr_max;
      if (spec.schedule == "cosine")
        lr = optim::cosine_lr(step - 1, {lr_max, lr_max * spec.min_lr_ratio, spec.warmup,
                                         std::max(steps, spec.warmup)});
      if (!skip) program->optimizer_step(step, lr);
      zero_grad(param_tensors);
      synchronize();  // a GPU's launches are asynchronous: the step ends when its work does
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      seconds += dt;
      ++done;
      last_loss = loss_value;
      tokens_per_step = tokens;
      const double model_flops = static_cast<double>(counter.totals().flops -
                                                     counter.phase(CostPhase::recompute).flops);
      total_flops += model_flops;
      const double mfu = hw ? utilization(model_flops, dt, *hw, mfu_dtype) : 0;
      if (log.is_open()) {
        nlohmann::json j = {{"step", step},       {"loss", loss_value},
                            {"lr", lr},           {"tokens_per_s", tokens / dt},
                            {"flops", model_flops}, {"flops_per_s", model_flops / dt},
                            {"mfu", mfu},         {"ms", dt * 1e3}};
        if (fp16) {
          j["loss_scale"] = used_scale;  // the scale this step's backward used
          j["skipped"] = skip;
        }
        log << j.dump() << '\n';
        log.flush();
      }
      if (!o.quiet && (tty || step % spec.log_every == 0 || step == steps)) {
        const double eta = seconds / static_cast<double>(done) * static_cast<double>(steps - step);
        const std::string line =
            fmt::format("step {}/{} | loss {:.4g} | {}/s | {}/s | MFU {:.1f}% | ETA {}", step, steps,
                        loss_value, human(tokens / dt, "tok"), human(model_flops / dt, "FLOP"),
                        100 * mfu, duration(eta));
        std::cerr << (tty ? "\r\033[K" : "") << line << (tty ? "" : "\n") << std::flush;
      }
      if (spec.checkpoint_every > 0 && step % spec.checkpoint_every == 0 && step != steps) save(step);
    }
    if (tty) std::cerr << '\n';
    const int64_t last = start + done;
    if (done > 0 || start == 0) save(last);
    if (g_interrupted) {
      std::cerr << fmt::format("ein train: interrupted after step {}{}\n", last,
                               o.checkpoint.empty() ? "" : "; the checkpoint above resumes it");
      return 130;
    }
    // Summary: the lecture's accounting, per category.
    int64_t grad_bytes = param_bytes, state_bytes = 0;
    for (const auto& s : program->optimizer_state())
      state_bytes += s.tensor.nbytes();
    const int64_t peak = max_memory_allocated(device);
    const int64_t activations = std::max<int64_t>(0, peak - param_bytes - grad_bytes - state_bytes);
    const double flops = total_flops;
    std::cout << fmt::format(
        "trained {} for {} steps ({} to {}): final loss {:.6g}\n"
        "  parameters {} ({}), {} batch elements per step\n"
        "  {}FLOPs (model: forward and backward) in {:.2f} s: {}/s, MFU {:.2f}% of {} {} {} peak (2 FLOPs per multiply-add)\n"
        "  peak memory {}: parameters {}, gradients {}, optimizer state {}, activations and "
        "temporaries {}\n",
        o.file, done, start, last, last_loss, n_params, bytes_str(param_bytes), tokens_per_step,
        human(flops, ""), seconds, human(seconds > 0 ? flops / seconds : 0, "FLOP"),
        hw ? 100 * utilization(flops, seconds, *hw, mfu_dtype) : 0.0, hw_name,
        human(hw ? hw->peak(math_mode_of(mfu_dtype)) : 0, "FLOP/s"), math_mode_name(math_mode_of(mfu_dtype)),
        bytes_str(peak), bytes_str(param_bytes), bytes_str(grad_bytes), bytes_str(state_bytes),
        bytes_str(activations));
    if (fp16)
      std::cout << fmt::format("  fp16 loss scaling: {} step{} skipped for overflowing gradients, "
                               "final scale {}\n",
                               skipped_steps, skipped_steps == 1 ? "" : "s", loss_scale);
    if (!spec.sample.empty() && spec.sample_length > 0) {
      const int64_t T = spec.data ? spec.data->context : 0;
      if (T <= 0) throw UserError("sample needs the train block's data context (T)");
      std::vector<int64_t> tokens;
      for (unsigned char c : spec.sample)
        tokens.push_back(c);
      std::mt19937_64 rng(o.seed);
      for (int64_t i = 0; i < spec.sample_length; ++i) {
        // A fixed window of T tokens (right-padded): causal attention ignores the padding,
        // and one traced graph serves every position.
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), T);
        Tensor x = zeros({1, T}, DType::i64);
        std::copy(tokens.end() - n, tokens.end(), x.data<int64_t>());
        const Tensor logits = program->logits(x).to(cpu()).to(DType::f64).contiguous();
        const int64_t V = logits.shape().back();
        const double* row = logits.data<double>() + (n - 1) * V;
        std::vector<double> prob(V);
        const double m = *std::max_element(row, row + V);
        for (int64_t v = 0; v < V; ++v)
          prob[v] = spec.temperature > 0 ? std::exp((row[v] - m) / spec.temperature) : (row[v] == m);
        std::discrete_distribution<int64_t> pick(prob.begin(), prob.end());
        tokens.push_back(pick(rng));
      }
      std::string bytes;
      for (int64_t t : tokens)
        bytes.push_back(static_cast<char>(t));
      // Sampled bytes need not form UTF-8: a byte that starts no valid character prints as
      // U+FFFD, so the terminal (and whatever reads stdout) always gets valid text.
      std::string text;
      for (size_t i = 0; i < bytes.size();) {
        const std::string_view rest = std::string_view(bytes).substr(i);
        const uint32_t n = utf8_char_size(rest);
        const auto c = static_cast<unsigned char>(bytes[i]);
        if (n == 1 && (c >= 0x80 || (c < 0x20 && c != '\n' && c != '\t')))
          text += "\xEF\xBF\xBD";
        else
          text.append(rest.substr(0, n));
        i += n;
      }
      std::cout << "sample:\n" << text << '\n';
    }
    return 0;
  } catch (...) {
    return report_error();
  }
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* c = app.add_subcommand("train", "Train the model of a .ein script's train block");
  c->add_option("file", o->file, "the .ein script")->required();
  c->add_option("--set", o->sets, "override a dim or let: NAME=VALUE, or several: B=8,T=1024 (repeatable)");
  c->add_option("--steps", o->steps, "optimizer steps (default: the block's steps)");
  c->add_option("--device", o->device,
                 "auto (default: cuda when a GPU is there, else cpu), cpu, cuda or cuda:N");
  c->add_option("--precision", o->precision, "fp32 (default), bf16 or fp16");
  c->add_option("--checkpoint", o->checkpoint, "directory for step_N.safetensors checkpoints");
  c->add_flag("--resume", o->resume, "continue from the latest good checkpoint in --checkpoint");
  c->add_option("--keep", o->keep, "checkpoints kept (default 3)");
  c->add_option("--data", o->data, "the data file (overrides the block's data path)");
  c->add_option("--seed", o->seed, "the one seed: parameters, batches, dropout (default 0)");
  c->add_option("--log", o->log, "write one JSON line per step: step, loss, tokens_per_s, flops, mfu, ...");
  c->add_option("--init", o->init, "initial parameters from a safetensors file (names as in the checkpoint, without 'model.')");
  c->add_flag("--quiet", o->quiet, "no progress line");
  c->callback([o, &exit_code] { exit_code = run_train(*o); });
}

}  // namespace ein::cli
