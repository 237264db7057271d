// Whether Markstein's correction gives IEEE division's quotient (docs/cuda.md, "NVRTC"): for
// y = 1/b rounded, q = a*y, r = fma(-q, b, a) and fma(r, y, q) against a / b, for every
// significand of a in [1, 2) and 47 divisors in [1, 2) (all-ones, all-zeros and other edge
// significands, then 40 random ones). Scaling a and b by powers of two changes nothing while
// no step under- or overflows, so this covers every normal range. Also counts how often the
// uncorrected product q differs. Exit status 1 when a corrected quotient differs.
//
//   g++ -O2 -ffp-contract=off bench/gpu/markstein_check.cpp -o /tmp/markstein_check
//   /tmp/markstein_check
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace

int main() {
  std::vector<float> divisors;
  for (uint32_t m : {0x7fffffu, 0x7ffffeu, 0u, 1u, 0x400000u, 0x555555u, 0x2aaaaau})
    divisors.push_back(from_bits(0x3f800000u | m));
  std::mt19937 random(1);
  for (int i = 0; i < 40; ++i)
    divisors.push_back(from_bits(0x3f800000u | (random() & 0x7fffffu)));
  int64_t quotients = 0, corrected_off = 0, product_off = 0;
  for (const float b : divisors) {
    const float y = 1.0f / b;
    for (uint32_t m = 0; m < (1u << 23); ++m) {
      const float a = from_bits(0x3f800000u | m);
      const float q = a * y;
      const float corrected = std::fma(std::fma(-q, b, a), y, q);
      const float want = a / b;
      ++quotients;
      product_off += q != want;
      if (corrected != want) {
        if (corrected_off++ < 5) std::printf("a=%a b=%a: %a, a / b = %a\n", a, b, corrected, want);
      }
    }
  }
  std::printf("%lld quotients: corrected %lld differ from a / b, the product alone %lld\n",
              static_cast<long long>(quotients), static_cast<long long>(corrected_off),
              static_cast<long long>(product_off));
  return corrected_off == 0 ? 0 : 1;
}
