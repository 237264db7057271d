// Forward + backward of bench/attention/lm_head.ein (logits = h @ w, then cross_entropy) through
// the path `ein train` takes, fused and unfused, rounds alternating: median ms and the
// allocator's peak above the inputs, one JSON line per variant (bench/attention/
// compare_lm_head.sh; BENCHMARKS.md). With `cuda` last, on cuda:0 (bench/gpu/run.sh), each
// round's time taken after the device finished.
//   ein_lm_head_timings SCRIPT STDLIB ROWS D V [rounds] [variants: fused,unfused] [cpu|cuda]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/ops.h>
#include <ein/storage.h>
#include <ein/tensor_math.h>
#include <fmt/format.h>

#include "script/script.h"

int main(int argc, char** argv) {
  using namespace ein;
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s SCRIPT STDLIB ROWS D V [rounds] [fused,unfused]\n", argv[0]);
    return 2;
  }
  const int64_t rows = std::atoll(argv[3]), d = std::atoll(argv[4]), v = std::atoll(argv[5]);
  const int rounds = argc > 6 ? std::atoi(argv[6]) : 3;
  const std::string which = argc > 7 ? argv[7] : "fused,unfused";
  const Device device = argc > 8 && std::string(argv[8]) == "cuda" ? cuda() : cpu();
  std::vector<std::string> variants;
  for (size_t at = 0; at <= which.size();) {
    const size_t comma = std::min(which.find(',', at), which.size());
    variants.push_back(which.substr(at, comma - at));
    at = comma + 1;
  }
  std::map<std::string, std::unique_ptr<script::Program>> programs;
  for (const std::string& name : variants) {
    script::LoadOptions o;
    o.stdlib = {argv[2]};
    o.fused_cross_entropy = name == "fused";
    o.device = device;
    programs[name] = script::Program::load(argv[1], o);
  }
  // h as a LayerNorm leaves it (unit variance), w at GPT-2's initialisation (std 0.02), so
  // the logits have the spread of a real LM head's (std 0.02·√d, 0.55 at d = 768). With unit
  // w they would spread by √d (28): most probabilities, and their gradients, fall below
  // FLT_MIN, and every GEMM reading subnormals runs 10-30x slower on Intel CPUs (microcode
  // assists) while AMD's run at full speed.
  Tensor h = randn({rows, d}, DType::f32, cpu(), 1);
  Tensor w = randn({d, v}, DType::f32, cpu(), 2);
  w *= 0.02;
  std::vector<int64_t> targets(rows);
  for (int64_t i = 0; i < rows; ++i) targets[i] = (i * 7919) % v;
  Tensor y = from_data(targets, {rows});
  h = h.to(device);
  w = w.to(device);
  y = y.to(device);
  std::map<std::string, std::vector<double>> ms;
  std::map<std::string, int64_t> peak;
  std::map<std::string, double> loss;
  for (int r = -1; r < rounds; ++r) {  // round -1: warm-up
    for (const std::string& name : variants) {
      Tensor hh = h.detach().requires_grad_(), ww = w.detach().requires_grad_();
      const int64_t before = memory_allocated(device);
      reset_peak_memory_stats(device);
      const auto start = std::chrono::steady_clock::now();
      {
        const Tensor l = programs[name]->call("head", {hh, ww, y})[0];
        l.backward(ones({}, DType::f32, device));
        loss[name] = l.item();
        synchronize();  // the gradients' kernels done (a CUDA device runs them asynchronously)
      }
      const double elapsed =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (r >= 0) ms[name].push_back(elapsed);
      peak[name] = std::max(peak[name], max_memory_allocated(device) - before);
    }
  }
  for (const std::string& name : variants) {
    std::vector<double> x = ms[name];
    std::sort(x.begin(), x.end());
    fmt::print("{{\"variant\": \"{}\", \"median_ms\": {:.3f}, \"ms\": [{:.3f}], \"peak_bytes\": {}, "
               "\"loss\": {:.9g}}}\n",
               name, x[x.size() / 2], fmt::join(ms[name], ", "), peak[name], loss[name]);
  }
  return 0;
}
