// Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011), the generator PyTorch and JAX use. Element i of a
// random tensor depends only on (seed, i), never on thread count or device. This file has
// scalar functions only; rand()/randn() tensors are built from them in factories.cpp.
#pragma once

#include <array>
#include <cstdint>

namespace ein {

/// High 64 bits of the 128-bit product a · b (no __int128 under -pedantic): with a uniform 64-bit
/// a, an integer uniform in [0, b) up to a bias of b / 2^64.
uint64_t mul_high(uint64_t a, uint64_t b);

/// A SplitMix64-style mix of two words into a seed (draw_seed() of ein/random.h is two).
uint64_t mix_seeds(uint64_t a, uint64_t b);

/// Four 32-bit words: a Philox counter or output block.
using PhiloxBlock = std::array<uint32_t, 4>;
/// Two 32-bit words: a Philox key.
using PhiloxKey = std::array<uint32_t, 2>;

/// Philox4x32 with 10 rounds: a bijection of `counter` keyed by `key`.
PhiloxBlock philox4x32(PhiloxBlock counter, PhiloxKey key);

/// A uniform number in [0, 1) with `bits` random bits (1..53): k * 2^-bits for a uniform
/// integer k. Choose bits <= the target format's significand so rounding never gives 1.0.
/// Stream 0 of the seed: counter = (index / 2, 0, 0), two 32-bit words per value.
double uniform_at(uint64_t seed, uint64_t index, int bits = 53);

/// 64 uniform random bits. Stream 2 of the seed: counter = (index, 2, 0), two words per value.
uint64_t bits_at(uint64_t seed, uint64_t index);
/// A standard normal number by Box-Muller (Box & Muller 1958) from two 53-bit uniforms.
/// Stream 1 of the seed: counter = (index, 1, 0), one Philox block per value.
double normal_at(uint64_t seed, uint64_t index);

}  // namespace ein
