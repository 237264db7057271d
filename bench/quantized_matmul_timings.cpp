// x @ w for a decode step's few rows: ein's f32 product (einsum through the BLAS GEMM), and
// ein::quantized_matmul from q8_0 and q4_0 codes, stored [k, n] and [n, k] ("out_in", as a
// tied LM head's embedding multiplies). As in a model, each call multiplies by a
// different weight of `copies` (layers), so that the weights come from memory, not a cache
// that one matrix would fit in. One JSON line per variant: the median over `rounds` of the
// mean ms a call, and the weight bytes a call reads (bench/quantized_matmul.py; BENCHMARKS.md).
// KERNELS (e.g. avx512,avx2,portable) runs the quantized variants on each of those
// instruction sets this CPU has, alternating in every round; default: the best it has.
//   ein_quantized_matmul_timings K N M [rounds] [min_weight_mb] [KERNELS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ein/autograd.h>
#include <ein/ops.h>
#include <ein/quantize.h>
#include <ein/random.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/quantize_layout.h"

int main(int argc, char** argv) {
  using namespace ein;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s K N M [rounds] [min_weight_mb] [KERNELS]\n", argv[0]);
    return 2;
  }
  const int64_t k = std::atoll(argv[1]), n = std::atoll(argv[2]), m = std::atoll(argv[3]);
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  const double min_mb = argc > 5 ? std::atof(argv[5]) : 256;
  const NoGrad no_grad;
  // Enough copies that the q4_0 weights alone (the smallest) exceed min_mb.
  const double q4_bytes = static_cast<double>(k) * static_cast<double>(n) * 4.5 / 8;
  const int copies = std::max(2, static_cast<int>(min_mb * 1e6 / q4_bytes + 0.999));
  std::vector<Tensor> f32;
  std::vector<QuantizedTensor> q8, q4, q8t, q4t;  // t: stored [n, k] (WeightLayout::out_in)
  for (int c = 0; c < copies; ++c) {
    const Tensor w = randn({k, n}, DType::f32, cpu(), 100 + c);
    q8.push_back(quantize(w, QuantType::q8_0));
    q4.push_back(quantize(w, QuantType::q4_0));
    const Tensor wt = randn({n, k}, DType::f32, cpu(), 1000 + c);
    q8t.push_back(quantize(wt, QuantType::q8_0));
    q4t.push_back(quantize(wt, QuantType::q4_0));
    f32.push_back(w);
  }
  const Tensor x = randn({m, k}, DType::f32, cpu(), 1);
  using detail::QuantKernels;
  std::vector<QuantKernels> sets{detail::quant_kernels()};
  if (argc > 6) {
    sets.clear();
    for (const std::string name : {"avx512", "avx2", "portable"}) {
      const std::string list = std::string(",") + argv[6] + ",";
      const QuantKernels set = name == "avx512" ? QuantKernels::avx512
                               : name == "avx2" ? QuantKernels::avx2
                                                : QuantKernels::portable;
      if (list.find("," + name + ",") != std::string::npos && detail::force_quant_kernels(set))
        sets.push_back(set);
    }
    detail::force_quant_kernels(std::nullopt);
    if (sets.empty()) {
      std::fprintf(stderr, "none of the kernels '%s' runs on this CPU\n", argv[6]);
      return 2;
    }
  }
  struct Variant {
    std::string name;
    double bytes;
    QuantKernels kernels;
  };
  std::vector<Variant> variants = {{"f32", static_cast<double>(f32[0].nbytes()), sets[0]}};
  for (const QuantKernels set : sets) {
    for (const char* name : {"q8_0", "q4_0", "q8_0 out_in", "q4_0 out_in"})
      variants.push_back(
          {name, static_cast<double>((name[1] == '8' ? q8 : q4)[0].nbytes()), set});
  }
  const auto call = [&](const Variant& v, int c) {
    if (v.name == "f32") return einsum("m k, k n -> m n", x, f32[c]);
    detail::force_quant_kernels(v.kernels);
    if (v.name == "q8_0") return quantized_matmul(x, q8[c]);
    if (v.name == "q4_0") return quantized_matmul(x, q4[c]);
    return quantized_matmul(x, v.name == "q8_0 out_in" ? q8t[c] : q4t[c], WeightLayout::out_in);
  };
  std::vector<std::vector<double>> ms(variants.size());
  for (const Variant& v : variants)  // warm up: every copy once
    for (int c = 0; c < copies; ++c)
      (void)call(v, c);
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < variants.size(); ++i) {
      int calls = 0;
      const auto start = std::chrono::steady_clock::now();
      double elapsed = 0;
      while (elapsed < 0.2 || calls < copies) {
        (void)call(variants[i], calls % copies);
        ++calls;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      ms[i].push_back(elapsed * 1e3 / calls);
    }
  for (size_t i = 0; i < variants.size(); ++i) {
    std::vector<double> s = ms[i];
    std::sort(s.begin(), s.end());
    const double median = s[s.size() / 2];
    std::printf("%s\n", fmt::format("{{\"k\": {}, \"n\": {}, \"m\": {}, \"variant\": \"{}\", "
                                    "\"kernels\": \"{}\", \"ms\": {:.5f}, \"weight_bytes\": {:.0f}, "
                                    "\"copies\": {}, \"rounds_ms\": [{:.5f}]}}",
                                    k, n, m, variants[i].name,
                                    detail::quant_kernels_name(variants[i].kernels), median,
                                    variants[i].bytes, copies, fmt::join(ms[i], ", "))
                            .c_str());
  }
  return 0;
}
