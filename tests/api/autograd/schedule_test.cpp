// Learning-rate schedules (include/ein/schedule.h) against values computed by hand from
// nanoGPT's get_lr, at the boundaries of each phase.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <ein/errors.h>
#include <ein/schedule.h>

namespace ein::optim {
namespace {

TEST(Schedule, Constant) {
  EXPECT_EQ(constant_lr(0, 3e-4), 3e-4);
  EXPECT_EQ(constant_lr(1000000, 3e-4), 3e-4);
  EXPECT_THROW(constant_lr(-1, 3e-4), RuntimeError);
}

// lr 1.0, min 0.1, warmup 4, decay until 14: warmup gives (it + 1) / 5; the cosine starts at
// the peak at it = 4, is halfway (0.55) at it = 9, reaches 0.1 at it = 14 and stays there.
TEST(Schedule, CosineWithWarmupAtTheBoundaries) {
  const CosineSchedule s{.lr = 1.0, .min_lr = 0.1, .warmup_iters = 4, .lr_decay_iters = 14};
  EXPECT_DOUBLE_EQ(cosine_lr(0, s), 0.2);
  EXPECT_DOUBLE_EQ(cosine_lr(1, s), 0.4);
  EXPECT_DOUBLE_EQ(cosine_lr(3, s), 0.8);
  EXPECT_DOUBLE_EQ(cosine_lr(4, s), 1.0);
  EXPECT_DOUBLE_EQ(cosine_lr(9, s), 0.55);
  // r = 0.2: 0.1 + 0.5 (1 + cos(0.2 π)) · 0.9 = 0.1 + 0.45 (1 + 0.80901699437494745).
  EXPECT_DOUBLE_EQ(cosine_lr(6, s), 0.1 + 0.45 * (1 + 0.80901699437494745));
  EXPECT_NEAR(cosine_lr(14, s), 0.1, 1e-15);
  EXPECT_EQ(cosine_lr(15, s), 0.1);
  EXPECT_EQ(cosine_lr(1000, s), 0.1);
  for (int64_t it = 4; it < 14; ++it)
    EXPECT_GT(cosine_lr(it, s), cosine_lr(it + 1, s)) << it;
}

TEST(Schedule, CosineWithoutWarmupOrDecaySpan) {
  const CosineSchedule none{.lr = 2.0, .min_lr = 0.0, .warmup_iters = 0, .lr_decay_iters = 10};
  EXPECT_DOUBLE_EQ(cosine_lr(0, none), 2.0);
  EXPECT_DOUBLE_EQ(cosine_lr(5, none), 1.0);
  const CosineSchedule flat{.lr = 2.0, .min_lr = 0.5, .warmup_iters = 3, .lr_decay_iters = 3};
  EXPECT_DOUBLE_EQ(cosine_lr(2, flat), 1.5);
  EXPECT_DOUBLE_EQ(cosine_lr(3, flat), 2.0);
  EXPECT_EQ(cosine_lr(4, flat), 0.5);
}

TEST(Schedule, CosineRejectsInconsistentSettings) {
  EXPECT_THROW(cosine_lr(0, {.warmup_iters = 10, .lr_decay_iters = 5}), RuntimeError);
  EXPECT_THROW(cosine_lr(-1, {}), RuntimeError);
  EXPECT_THROW(cosine_lr(0, {.warmup_iters = -1}), RuntimeError);
}

}  // namespace
}  // namespace ein::optim
