// Philox4x32-10 and the uniform/normal transforms on top of it. The constants and the round
// function are those of Random123's philox.h (Salmon et al. 2011).
#include "runtime/random.h"

#include <cmath>
#include <numbers>

namespace ein {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

PhiloxBlock round(PhiloxBlock c, PhiloxKey k) {
  const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
  const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

PhiloxKey key_of(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

// Top `bits` bits of (hi:lo) as k * 2^-bits in [0, 1).
double to_unit(uint32_t hi, uint32_t lo, int bits) {
  const uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
  return std::ldexp(static_cast<double>(x >> (64 - bits)), -bits);
}

}  // namespace

PhiloxBlock philox4x32(PhiloxBlock counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    counter = round(counter, key);
  }
  return counter;
}

double uniform_at(uint64_t seed, uint64_t index, int bits) {
  bits = bits < 1 ? 1 : (bits > 53 ? 53 : bits);
  const uint64_t block = index / 2;
  const PhiloxBlock out = philox4x32(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}, key_of(seed));
  const size_t w = (index % 2) * 2;
  return to_unit(out[w], out[w + 1], bits);
}

double normal_at(uint64_t seed, uint64_t index) {
  const PhiloxBlock out = philox4x32(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 1u, 0u}, key_of(seed));
  // u1 in (0, 1] so the log is finite.
  const double u1 = 1.0 - to_unit(out[0], out[1], 53);
  const double u2 = to_unit(out[2], out[3], 53);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace ein
