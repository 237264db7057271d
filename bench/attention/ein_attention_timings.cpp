// Forward + backward of bench/attention/attention.ein through the path `ein train` takes
// (Program::call on the autograd tape, then backward), fused and unfused, rounds alternating:
// median ms per forward+backward and the allocator's peak above the inputs, one JSON line per
// variant. Used by bench/attention/compare.sh (BENCHMARKS.md).
//   ein_attention_timings SCRIPT STDLIB B H T E [rounds] [variants: fused,unfused]
// A variant with the suffix ":forward" (fused:forward) times the forward alone.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/storage.h>
#include <fmt/format.h>

#include "script/script.h"

int main(int argc, char** argv) {
  using namespace ein;
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s SCRIPT STDLIB B H T E [rounds] [fused,unfused]\n", argv[0]);
    return 2;
  }
  const int64_t b = std::atoll(argv[3]), h = std::atoll(argv[4]), t = std::atoll(argv[5]),
                e = std::atoll(argv[6]);
  const int rounds = argc > 7 ? std::atoi(argv[7]) : 5;
  const std::string which = argc > 8 ? argv[8] : "fused,unfused";
  std::vector<std::string> variants;
  for (size_t at = 0; at <= which.size();) {
    const size_t comma = std::min(which.find(',', at), which.size());
    variants.push_back(which.substr(at, comma - at));
    at = comma + 1;
  }
  std::map<std::string, std::unique_ptr<script::Program>> programs;
  for (const std::string& v : variants) {
    script::LoadOptions o;
    o.stdlib = {argv[2]};
    o.fused_attention = v.rfind("fused", 0) == 0;  // "fused", "fused:forward"
    programs[v] = script::Program::load(argv[1], o);
  }
  const Shape shape{b, h, t, e};
  const Tensor q = randn(shape, DType::f32, cpu(), 1), k = randn(shape, DType::f32, cpu(), 2),
               v = randn(shape, DType::f32, cpu(), 3), g = randn(shape, DType::f32, cpu(), 4);
  std::map<std::string, std::vector<double>> ms;
  std::map<std::string, int64_t> peak;
  for (int r = -1; r < rounds; ++r) {  // round -1: warm-up (traces, JIT compiles)
    for (const std::string& name : variants) {
      const bool backward = name.find(":forward") == std::string::npos;
      Tensor qq = q.detach().requires_grad_(backward), kk = k.detach().requires_grad_(backward),
             vv = v.detach().requires_grad_(backward);
      const int64_t before = memory_allocated(cpu());
      reset_peak_memory_stats(cpu());
      const auto start = std::chrono::steady_clock::now();
      {
        const Tensor y = programs[name]->call("attention", {qq, kk, vv})[0];
        if (backward) y.backward(g);
      }
      const double elapsed =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (r >= 0) ms[name].push_back(elapsed);
      peak[name] = std::max(peak[name], max_memory_allocated(cpu()) - before);
    }
  }
  for (const std::string& name : variants) {
    std::vector<double> x = ms[name];
    std::sort(x.begin(), x.end());
    fmt::print("{{\"variant\": \"{}\", \"median_ms\": {:.3f}, \"ms\": [{:.3f}], \"peak_bytes\": {}}}\n",
               name, x[x.size() / 2], fmt::join(ms[name], ", "), peak[name]);
  }
  return 0;
}
