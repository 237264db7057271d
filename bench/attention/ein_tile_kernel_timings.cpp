// The fused attention's tile kernels alone, on one thread (BENCHMARKS.md, "Fused attention"):
// tile_gemm at the attention's tile shapes in GFLOP/s, and the online-softmax step and the
// backward's probabilities in CPU cycles per 16 logits (at the clock given, default 2.6 GHz),
// each on this CPU's path (AVX-512 or AVX2) and on the portable one (the BLAS GEMM,
// vector_math.h), the two alternating round by round. One JSON line per kernel and path:
// the median and every round.
//   ein_tile_kernel_timings [rounds = 5] [GHz = 2.6]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "exec/softmax_tiles.h"
#include "exec/tile_gemm.h"

namespace {

using Clock = std::chrono::steady_clock;

/// Seconds per call of `body`, over enough calls for about 0.2 s.
double per_call(const std::function<void()>& body, const std::function<void()>& reset) {
  int64_t calls = 1;
  for (;;) {
    double spent = 0;
    for (int64_t i = 0; i < calls; ++i) {
      reset();
      const auto start = Clock::now();
      body();
      spent += std::chrono::duration<double>(Clock::now() - start).count();
    }
    if (spent > 0.2) return spent / static_cast<double>(calls);
    calls *= 2;
  }
}

struct Kernel {
  std::string name, unit;
  std::function<double()> measure;  ///< one round: the figure in `unit`
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const double ghz = argc > 2 ? std::atof(argv[2]) : 2.6;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> a(256 * 256), b(256 * 256), c(256 * 256), logits(64 * 128), tile(64 * 128),
      m(64), l(64), acc(64 * 64), lse(64);
  for (auto* v : {&a, &b, &logits})
    for (float& x : *v) x = normal(rng);
  for (float& x : lse) x = 3.0f;

  std::vector<Kernel> kernels;
  // (m, n, k, A transposed): the forward's logits and P·V, the backward's dV += Pᵀ dO.
  for (auto [rows, cols, depth, transposed] :
       {std::tuple{64, 128, 64, false}, {64, 64, 128, false}, {128, 64, 64, true}}) {
    kernels.push_back({fmt::format("tile_gemm {}x{}x{}{}", rows, cols, depth, transposed ? " Aᵀ" : ""),
                       "GFLOP/s", [&, rows, cols, depth, transposed] {
                         const double s = per_call(
                             [&] {
                               ein::tile_gemm(rows, cols, depth, 1.0f, a.data(), transposed ? 1 : 256,
                                              transposed ? 256 : 1, b.data(), 256, true, c.data(), 256);
                             },
                             [] {});
                         return 2.0 * rows * cols * depth / s / 1e9;
                       }});
  }
  const double vectors = 64 * 128 / 16.0;
  kernels.push_back({"online_softmax_block 64x128", "cycles per 16 logits", [&] {
                       const double s = per_call(
                           [&] {
                             ein::online_softmax_block(tile.data(), 128, 64, 128, nullptr, m.data(),
                                                       l.data(), acc.data(), 64);
                           },
                           [&] {
                             tile = logits;
                             std::fill(m.begin(), m.end(), -1.0f);
                             std::fill(l.begin(), l.end(), 1.0f);
                           });
                       return s * ghz * 1e9 / vectors;
                     }});
  kernels.push_back({"probabilities_block 64x128", "cycles per 16 logits", [&] {
                       const double s = per_call(
                           [&] { ein::probabilities_block(tile.data(), 128, 64, 128, nullptr, lse.data()); },
                           [&] { tile = logits; });
                       return s * ghz * 1e9 / vectors;
                     }});

  for (const Kernel& k : kernels) {
    std::vector<double> avx, portable;
    for (int r = 0; r < rounds; ++r)
      for (bool p : {false, true}) {
        ein::force_portable_tile_kernels(p);
        (p ? portable : avx).push_back(k.measure());
      }
    ein::force_portable_tile_kernels(false);
    auto line = [&](const char* path, const std::vector<double>& v) {
      std::string all;
      for (double x : v) all += fmt::format("{}{:.1f}", all.empty() ? "" : ", ", x);
      std::printf("{\"kernel\": \"%s\", \"path\": \"%s\", \"unit\": \"%s\", \"median\": %.1f, \"rounds\": [%s]}\n",
                  k.name.c_str(), path, k.unit.c_str(), median(v), all.c_str());
    };
    line(ein::tile_kernels_path(), avx);
    line("portable", portable);
  }
  std::fflush(stdout);
  return 0;
}
