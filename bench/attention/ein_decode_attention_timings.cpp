// One query row per head over a key-value cache (exec/attention_query.h), as a decode step
// runs it: H query heads of head dim E over a cache of S rows of which the first P are filled
// (a mask of zeros then -inf, as the step's causal mask gives the new position), the cache f32
// or bf16 (ein sample --cache-dtype bf16). Per round, alternating: the AVX-512 products
// ("avx512", where the CPU has AVX-512) and vector_math.h's ("rows", force_avx2_tile_kernels),
// each on the f32 and the bf16 cache. One JSON line per variant: the median µs a call over
// the rounds, every round's, and the cache bytes a call reads (2·H·P·E elements) per µs.
// The calls rotate over L layers' caches (default 12, GPT-2 small's: 75.5 MB of f32 caches at
// H S E = 12 1024 64, more than a server CPU's L3 holds per core), so that they come from
// memory as a decode step's do; L = 1 times a cache that stays in the CPU's caches.
//   ein_decode_attention_timings H S P E [rounds = 7] [calls a round = 2400] [L = 12]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <ein/ein.h>
#include <fmt/format.h>

#include "exec/attention.h"
#include "exec/tile_gemm.h"

int main(int argc, char** argv) {
  using namespace ein;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s H S P E [rounds] [calls]\n", argv[0]);
    return 2;
  }
  const int64_t h = std::atoll(argv[1]), s = std::atoll(argv[2]), p = std::atoll(argv[3]),
                e = std::atoll(argv[4]);
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 7;
  const int calls = argc > 6 ? std::atoi(argv[6]) : 2400;
  const int layers = argc > 7 ? std::atoi(argv[7]) : 12;
  if (h < 1 || e < 1 || p < 1 || p > s || rounds < 1 || calls < 1 || layers < 1) {
    std::fprintf(stderr, "want H, E >= 1, 1 <= P <= S, rounds, calls and L >= 1\n");
    return 2;
  }
  const Tensor q = randn({1, h, 1, e}, DType::f32, cpu(), 1);
  std::vector<Tensor> k, v, kb, vb;
  for (int l = 0; l < layers; ++l) {
    k.push_back(randn({1, h, s, e}, DType::f32, cpu(), 2 + 2 * l));
    v.push_back(randn({1, h, s, e}, DType::f32, cpu(), 3 + 2 * l));
    kb.push_back(k.back().to(DType::bf16));
    vb.push_back(v.back().to(DType::bf16));
  }
  std::vector<float> row(static_cast<size_t>(s), 0.0f);
  for (int64_t j = p; j < s; ++j) row[j] = -std::numeric_limits<float>::infinity();
  const Tensor mask = from_data(row, {1, 1, 1, s}).as_strided({1, h, 1, s}, {0, 0, s, 1}, 0);
  const double scale = 1 / std::sqrt(static_cast<double>(e));
  struct Variant {
    std::string name;
    bool rows;
    bool bf16;
  };
  std::vector<Variant> variants;
  for (const bool bf16 : {false, true}) {
    if (avx512_tile_kernels()) variants.push_back({bf16 ? "avx512 bf16" : "avx512 f32", false, bf16});
    variants.push_back({bf16 ? "rows bf16" : "rows f32", true, bf16});
  }
  std::map<std::string, std::vector<double>> us;
  for (int r = 0; r < rounds; ++r)
    for (const Variant& x : variants) {
      force_avx2_tile_kernels(x.rows);
      const std::vector<Tensor>& kk = x.bf16 ? kb : k;
      const std::vector<Tensor>& vv = x.bf16 ? vb : v;
      attention_forward(q, kk[0], vv[0], mask, scale, DType::f32);  // warm
      const auto start = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c)
        attention_forward(q, kk[c % layers], vv[c % layers], mask, scale, DType::f32);
      const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      us[x.name].push_back(took.count() / calls);
      force_avx2_tile_kernels(false);
    }
  for (const Variant& x : variants) {
    std::vector<double> t = us[x.name];
    std::vector<double> sorted = t;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double bytes = 2.0 * static_cast<double>(h * p * e) * (x.bf16 ? 2 : 4);
    std::printf("%s\n", fmt::format("{{\"variant\": \"{}\", \"h\": {}, \"s\": {}, \"p\": {}, "
                                    "\"e\": {}, \"layers\": {}, \"median_us\": {:.2f}, \"rounds_us\": [{:.2f}], "
                                    "\"gb_per_s\": {:.1f}}}",
                                    x.name, h, s, p, e, layers, median, fmt::join(t, ", "),
                                    bytes / median / 1e3)
                            .c_str());
  }
  return 0;
}
