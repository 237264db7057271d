// x @ w for a decode step's few rows: ein's f32 product (einsum through the BLAS GEMM), and
// ein::quantized_matmul from q8_0 and q4_0 codes. As in a model, each call multiplies by a
// different weight of `copies` (layers), so that the weights come from memory, not a cache
// that one matrix would fit in. One JSON line per variant: the median over `rounds` of the
// mean ms a call, and the weight bytes a call reads (bench/quantized_matmul.py; BENCHMARKS.md).
//   ein_quantized_matmul_timings K N M [rounds] [min_weight_mb]
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

int main(int argc, char** argv) {
  using namespace ein;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s K N M [rounds] [min_weight_mb]\n", argv[0]);
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
  std::vector<QuantizedTensor> q8, q4;
  for (int c = 0; c < copies; ++c) {
    const Tensor w = randn({k, n}, DType::f32, cpu(), 100 + c);
    q8.push_back(quantize(w, QuantType::q8_0));
    q4.push_back(quantize(w, QuantType::q4_0));
    f32.push_back(w);
  }
  const Tensor x = randn({m, k}, DType::f32, cpu(), 1);
  struct Variant {
    std::string name;
    double bytes;
  };
  const std::vector<Variant> variants = {{"f32", static_cast<double>(f32[0].nbytes())},
                                         {"q8_0", static_cast<double>(q8[0].nbytes())},
                                         {"q4_0", static_cast<double>(q4[0].nbytes())}};
  const auto call = [&](const std::string& v, int c) {
    if (v == "f32") return einsum("m k, k n -> m n", x, f32[c]);
    return quantized_matmul(x, v == "q8_0" ? q8[c] : q4[c]);
  };
  std::vector<std::vector<double>> ms(variants.size());
  for (const Variant& v : variants)  // warm up: every copy once
    for (int c = 0; c < copies; ++c)
      (void)call(v.name, c);
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < variants.size(); ++i) {
      int calls = 0;
      const auto start = std::chrono::steady_clock::now();
      double elapsed = 0;
      while (elapsed < 0.2 || calls < copies) {
        (void)call(variants[i].name, calls % copies);
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
                                    "\"ms\": {:.5f}, \"weight_bytes\": {:.0f}, \"copies\": {}, "
                                    "\"rounds_ms\": [{:.5f}]}}",
                                    k, n, m, variants[i].name, median, variants[i].bytes, copies,
                                    fmt::join(ms[i], ", "))
                            .c_str());
  }
  return 0;
}
