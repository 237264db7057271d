// Every finite f32, both signs, through the CPU JIT's f32 tanh and erf (MLIR's rational
// approximations, runtime/jit/llvm_jit.cpp), against the float64 oracle rounded to f32: the
// largest error in ulps and where. About two minutes on two cores. docs/numerics.md quotes it.
//   ein_f32_ulps_sweep
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <ein/ops.h>

#include "compiler/kernel/scalar_math.h"

namespace {

/// Units in the last place between two finite floats, counting across zero.
int64_t ulps(float a, float b) {
  auto ordered = [](float x) -> int64_t {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : i;
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

}  // namespace

int main() {
  using ein::ScalarOp;
  for (auto [body, op] : {std::pair{"tanh(x)", ScalarOp::tanh}, std::pair{"erf(x)", ScalarOp::erf}}) {
    int64_t worst = 0;
    float at = 0;
    // The bit patterns [0, +inf) and [-0, -inf): every finite float once.
    constexpr uint64_t kInfBits = 0x7f800000u, kSign = 0x80000000u, kChunk = uint64_t{1} << 24;
    for (uint64_t start = 0; start < 2 * kInfBits; start += kChunk) {
      const auto n = static_cast<int64_t>(std::min(kChunk, 2 * kInfBits - start));
      std::vector<float> xs(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t k = start + static_cast<uint64_t>(i);
        xs[i] = std::bit_cast<float>(static_cast<uint32_t>(k < kInfBits ? k : (k - kInfBits) | kSign));
      }
      const std::vector<float> got =
          ein::map(std::string("x[i] -> ") + body, {ein::from_data(xs, {n})}).to_vector<float>();
      for (int64_t i = 0; i < n; ++i) {
        const auto want = static_cast<float>(ein::apply_scalar_op(op, xs[i]));
        const int64_t u = ulps(got[i], want);
        if (u > worst) {
          worst = u;
          at = xs[i];
        }
      }
    }
    std::printf("{\"op\": \"%s\", \"dtype\": \"f32\", \"worst_ulps\": %lld, \"at\": %.9g}\n", body,
                static_cast<long long>(worst), static_cast<double>(at));
  }
  return 0;
}
