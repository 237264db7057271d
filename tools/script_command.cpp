// `ein check FILE` and `ein run FILE`: a script checked statically (every function traced for
// its annotated sizes), or one function evaluated on given or random inputs.
#include "tools/script_command.h"

#include <algorithm>

#include <iostream>
#include <memory>
#include <optional>

#include <ein/errors.h>
#include <fmt/format.h>

#include "compiler/cost/cost_model.h"
#include "script/script.h"
#include <ein/diagnostic.h>
#include <ein/autograd.h>
#include <ein/checkpoint.h>
#include "tools/cli_errors.h"
#include "tools/cli_numbers.h"
#include "tools/cli_options.h"
#include "tools/shape_args.h"

namespace ein::cli {

std::vector<script::Setting> parse_settings(const std::vector<std::string>& sets) {
  std::vector<script::Setting> out;
  for (const std::string& flag : sets) {
    // One flag may hold several, comma-separated: --set B=8,T=1024 (values are numbers).
    size_t start = 0;
    do {
      const size_t comma = std::min(flag.find(',', start), flag.size());
      const std::string s = flag.substr(start, comma - start);
      const size_t eq = s.find('=');
      if (eq == std::string::npos || eq == 0)
        throw UserError(fmt::format("--set {}: expected NAME=VALUE, e.g. --set D=64 or --set B=8,T=1024",
                                    s.empty() ? flag : s));
      out.push_back({s.substr(0, eq), expand_si_suffix(s.substr(eq + 1))});
      start = comma + 1;
    } while (start <= flag.size());
  }
  return out;
}

namespace {

struct ScriptOptions {
  std::string file, fn;
  std::vector<std::string> sets, shapes;
  uint64_t seed = 0;
  int64_t free_size = 8;
  std::string inputs;  ///< a safetensors file with the inputs, by parameter name
  bool grad = false;   ///< also the gradients of the (scalar) output by each float input
  int precision = 6;   ///< significant digits printed
};

int run_check(const ScriptOptions& o) {
  try {
    // Static: parameters have shapes but no memory, so any size checks instantly.
    script::LoadOptions load{parse_settings(o.sets), o.seed, {}};
    load.allocate = false;
    auto p = script::Program::load(o.file, load);
    const int n = p->check_all();
    const std::vector<script::ParamInfo> info = p->parameter_info();
    int64_t params = 0, bytes = 0;
    for (const auto& t : info) {
      const int64_t count = checked_numel(t.shape);
      params += count;
      bytes += count * static_cast<int64_t>(element_size(t.dtype));
    }
    std::cout << fmt::format("{}: ok ({} function{} checked", o.file, n, n == 1 ? "" : "s");
    if (p->has_train())
      std::cout << fmt::format("; the train block's model has {} parameters, {} bytes", params, bytes);
    std::cout << ")\n";
    if (p->has_train()) {
      // The parameter table: name, shape, count (the lecture's get_num_parameters by name).
      size_t width = 4;
      for (const auto& t : info)
        width = std::max(width, t.name.size());
      std::cout << fmt::format("{:<{}}  {:<16}  {:>12}\n", "name", width, "shape", "parameters");
      for (const auto& t : info)
        std::cout << fmt::format("{:<{}}  {:<16}  {:>12}\n", t.name, width,
                                 fmt::format("{}[{}]", dtype_name(t.dtype), fmt::join(t.shape, " ")),
                                 checked_numel(t.shape));
      std::cout << fmt::format("{:<{}}  {:<16}  {:>12}\n", "total", width, "", params);
    }
    return 0;
  } catch (...) {
    return report_error("check");
  }
}

int run_run(const ScriptOptions& o) {
  try {
    auto p = script::Program::load(o.file, {parse_settings(o.sets), o.seed, {}});
    std::string fn = o.fn;
    if (fn.empty()) {
      const auto fns = p->functions();
      if (fns.empty()) throw UserError(fmt::format("{} has no fn to run", o.file));
      fn = fns.front();
    }
    std::vector<TensorType> types = p->example_types(fn, o.free_size);
    std::vector<Tensor> args;
    std::optional<Checkpoint> given;
    if (!o.inputs.empty()) given = load_safetensors(o.inputs);
    for (size_t i = 0; i < types.size(); ++i) {
      const TensorType& t = types[i];
      if (i < o.shapes.size()) types[i].shape = parse_shape_arg(o.shapes[i], "--shape");
      if (given && i < given->tensors.size()) {
        args.push_back(given->tensors[i].second);
        continue;
      }
      if (kFloatDTypes.contains(t.dtype))
        args.push_back(randn(types[i].shape, t.dtype, cpu(), o.seed + i));
      else
        args.push_back(zeros(types[i].shape, t.dtype));
    }
    // --grad: the float inputs become leaves that require grad, and the one scalar output is
    // differentiated (torch.autograd.grad of a scalar function).
    if (o.grad)
      for (Tensor& a : args)
        if (kFloatDTypes.contains(a.dtype())) a = a.detach().clone().requires_grad_();
    std::optional<NoGrad> no_grad;
    if (!o.grad) no_grad.emplace();
    const std::vector<Tensor> out = p->call(fn, args);
    // Values as PyTorch prints them: in full up to 1000 elements, else the first and last 3
    // of each long dimension (runtime/tensor_format.cpp).
    for (size_t i = 0; i < args.size(); ++i)
      std::cout << fmt::format("input {}: {}[{}]\n", i, dtype_name(args[i].dtype()),
                               fmt::join(args[i].shape(), " "));
    for (size_t i = 0; i < out.size(); ++i)
      std::cout << fmt::format("output {}: {}[{}] = {}\n", i, dtype_name(out[i].dtype()),
                               fmt::join(out[i].shape(), " "), to_string(out[i].detach(), o.precision));
    if (o.grad) {
      if (out.size() != 1 || out.front().numel() != 1 || !out.front().requires_grad())
        throw UserError(fmt::format(
            "--grad differentiates a function with one scalar output that depends on a float "
            "input; fn {} returns {}",
            fn, out.size() == 1 ? fmt::format("{}[{}]", dtype_name(out.front().dtype()),
                                              fmt::join(out.front().shape(), " "))
                                : fmt::format("{} values", out.size())));
      out.front().backward();
      for (size_t i = 0; i < args.size(); ++i)
        if (args[i].requires_grad())
          std::cout << fmt::format("grad of input {}: {}\n", i,
                                   args[i].grad().defined() ? to_string(args[i].grad(), o.precision)
                                                            : "none (the output does not depend on it)");
    }
    return 0;
  } catch (...) {
    return report_error("run");
  }
}

}  // namespace

void add_script_commands(CLI::App& app, int& exit_code) {
  auto check = std::make_shared<ScriptOptions>();
  CLI::App* c = app.add_subcommand("check", "Check a .ein script statically: parse, bind dims, trace every fn");
  add_script_options(*c, check->file, check->sets);
  c->callback([check, &exit_code] { exit_code = run_check(*check); });

  auto run = std::make_shared<ScriptOptions>();
  CLI::App* r = app.add_subcommand("run", "Evaluate one fn of a .ein script on random or given inputs");
  add_script_options(*r, run->file, run->sets);
  r->add_option("--fn", run->fn, "the function (default: the first; train.NAME for the train block's)");
  r->add_option("--shape", run->shapes, "input i's shape, e.g. 4,16 (repeat per input)");
  r->add_option("--inputs", run->inputs, "a safetensors file whose tensors are the inputs, in order");
  r->add_option("--seed", run->seed, "seed of the random inputs and parameters");
  r->add_option("--free-size", run->free_size, "size of dims no declaration binds (default 8)");
  r->add_option("--precision", run->precision, "significant digits of printed values (default 6)");
  r->add_flag("--grad", run->grad,
              "also print the gradients of the fn's scalar output with respect to its float inputs");
  r->callback([run, &exit_code] { exit_code = run_run(*run); });
}

}  // namespace ein::cli
