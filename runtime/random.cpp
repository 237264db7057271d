// Philox4x32-10 and the uniform/normal transforms on top of it. The constants and the round
// function are those of Random123's philox.h (Salmon et al. 2011).
#include "runtime/random.h"

#include <ein/random.h>

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

uint64_t bits_at(uint64_t seed, uint64_t index) {
  const PhiloxBlock out = philox4x32(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 2u, 0u}, key_of(seed));
  return (static_cast<uint64_t>(out[0]) << 32) | out[1];
}

uint64_t mul_high(uint64_t a, uint64_t b) {
  const uint64_t a_lo = a & 0xFFFFFFFFu, a_hi = a >> 32;
  const uint64_t b_lo = b & 0xFFFFFFFFu, b_hi = b >> 32;
  const uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi;
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFu) + lo_hi;
  return a_hi * b_hi + (hi_lo >> 32) + (cross >> 32);
}

double normal_at(uint64_t seed, uint64_t index) {
  const PhiloxBlock out = philox4x32(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 1u, 0u}, key_of(seed));
  // u1 in (0, 1] so the log is finite.
  const double u1 = 1.0 - to_unit(out[0], out[1], 53);
  const double u2 = to_unit(out[2], out[3], 53);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

uint64_t mix_seeds(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t draw_seed(uint64_t seed, uint64_t stream, uint64_t draw) {
  return mix_seeds(mix_seeds(seed, stream), draw);
}

Generator& Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  draws_ = 0;
  return *this;
}

uint64_t Generator::initial_seed() const {
  std::lock_guard lock(mutex_);
  return seed_;
}

uint64_t Generator::draws() const {
  std::lock_guard lock(mutex_);
  return draws_;
}

void Generator::set_state(uint64_t seed, uint64_t draws) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  draws_ = draws;
}

uint64_t Generator::next_seed() {
  std::lock_guard lock(mutex_);
  return draw_seed(seed_, 0, draws_++);
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace ein
