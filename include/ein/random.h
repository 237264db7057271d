// Random streams like PyTorch's: a Generator is a seed and a count of draws, and every random
// factory called without an explicit seed takes the next draw of one (the process-wide
// default_generator(), or one passed in). So two consecutive randn({4}) differ, manual_seed(s)
// makes a program's draws reproducible, and a Generator object gives a stream of one's own.
//
//   ein::manual_seed(0);
//   ein::Tensor a = ein::randn({4}), b = ein::randn({4});    // different numbers
//   ein::Generator g(42);
//   ein::Tensor x = ein::randn({2, 3}, g);                   // g's first draw
//   ein::Tensor i = ein::randint(0, 10, {5});                // integers in [0, 10)
//   ein::Tensor c = ein::randn({4}, ein::DType::f32, ein::cpu(), 7);  // an explicit seed
//
// Draw k of a generator seeded s has the seed draw_seed(s, 0, k); within a draw, element i
// comes from (that seed, i) through the counter-based Philox generator (runtime/random.h), so
// values never depend on thread count or device. A `.ein` script run with `--seed s` draws the
// same way: call c of a function (0 for `ein run`) is stream c, and its k-th random call
// (rand, randn, dropout, in program order) uses draw_seed(s, c, k). So `manual_seed(s)` and
// the same calls in C++ give the tensors `ein run --seed s` gives.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include <ein/device.h>
#include <ein/dtype.h>
#include <ein/shape.h>

namespace ein {

class Tensor;

/// The seed of draw `draw` of stream `stream` of `seed` (SplitMix64-style mixes).
uint64_t draw_seed(uint64_t seed, uint64_t stream, uint64_t draw);

/// A random stream: a seed and how many draws were taken (torch.Generator).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  /// Restarts the stream at `seed` (torch.Generator.manual_seed).
  Generator& manual_seed(uint64_t seed);
  /// The seed the stream started from (torch.Generator.initial_seed).
  uint64_t initial_seed() const;
  /// Draws taken so far: with initial_seed(), the whole state (checkpoint both to resume).
  uint64_t draws() const;
  /// Restores a state saved from initial_seed() and draws().
  void set_state(uint64_t seed, uint64_t draws);
  /// The seed of the next draw, and one draw taken. Safe to call from several threads.
  uint64_t next_seed();

 private:
  mutable std::mutex mutex_;
  uint64_t seed_ = 0;
  uint64_t draws_ = 0;
};

/// The process-wide stream the factories draw from when given no seed or generator; it starts
/// at seed 0, so a program without manual_seed() is still reproducible run to run.
Generator& default_generator();
/// Restarts default_generator() at `seed` (torch.manual_seed).
void manual_seed(uint64_t seed);

/// Uniform numbers in [0, 1) from `generator`'s next draw.
Tensor rand(Shape sizes, Generator& generator, DType dtype = DType::f32, Device device = cpu());
/// Standard normal numbers from `generator`'s next draw.
Tensor randn(Shape sizes, Generator& generator, DType dtype = DType::f32, Device device = cpu());
/// Integers uniform in [low, high) (torch.randint), of an integer or float dtype; the seed
/// as rand()'s (none: default_generator()'s next draw).
Tensor randint(int64_t low, int64_t high, Shape sizes, DType dtype = DType::i64,
               Device device = cpu(), std::optional<uint64_t> seed = std::nullopt);
/// The same from `generator`'s next draw.
Tensor randint(int64_t low, int64_t high, Shape sizes, Generator& generator,
               DType dtype = DType::i64, Device device = cpu());

}  // namespace ein
