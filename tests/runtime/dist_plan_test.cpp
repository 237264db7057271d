// The plans data parallelism follows (runtime/dist/gradient_sync.h), which `ein report` uses
// too: who owns which parameter, which gradient bucket each falls in, and the bytes a step
// sends; and a lane (runtime/dist/lane.h) running tasks in order on its own thread.
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/dist/communicator.h"
#include "runtime/dist/gradient_sync.h"
#include "runtime/dist/lane.h"

namespace ein::dist {
namespace {

TEST(DistPlan, PartitionKeepsRunsConsecutiveAndBalanced) {
  const std::vector<int64_t> numels = {10, 10, 10, 10};
  EXPECT_EQ(partition_parameters(numels, 2), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(partition_parameters(numels, 1), (std::vector<int>{0, 0, 0, 0}));
  // A large parameter goes to the rank whose share holds its middle element.
  EXPECT_EQ(partition_parameters({1, 100, 1}, 2), (std::vector<int>{0, 1, 1}));
}

TEST(DistPlan, GradientBucketsRunBackwardsAndCutAtTheCap) {
  // Reverse order: the last parameter is in bucket 0 (the backward finishes it first).
  EXPECT_EQ(gradient_buckets({4, 4, 4, 4}, 8), (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(gradient_buckets({4, 4, 4, 4}, 100), (std::vector<int>{0, 0, 0, 0}));
  // A parameter larger than the cap goes alone; nothing joins it.
  EXPECT_EQ(gradient_buckets({4, 20, 4}, 8), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(gradient_buckets({}, 8), (std::vector<int>{}));
}

TEST(DistPlan, StepBytesAtTwoRanksAreTheParametersOnce) {
  EXPECT_EQ(step_bytes({10, 10, 10}, {40, 40, 40}, 2, 0), 120);
  EXPECT_EQ(step_bytes({10, 10, 10}, {40, 40, 40}, 2, 1), 120);
  EXPECT_EQ(step_bytes({10, 10, 10}, {40, 40, 40}, 1, 0), 0);
}

/// A group of one: a lane over it runs tasks without any other process.
class One final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string_view backend() const override { return "test"; }
  void all_to_all_v(const void*, const std::vector<int64_t>&, const std::vector<int64_t>&, void*,
                    const std::vector<int64_t>&, const std::vector<int64_t>&,
                    std::string_view) override {}
  void all_gather_v(const void*, void*, const std::vector<int64_t>&, const std::vector<int64_t>&,
                    std::string_view) override {}
  void broadcast(void*, int64_t bytes, int, std::string_view) override { stats.sent_bytes += bytes; }
  void barrier(std::string_view) override {}
  [[noreturn]] void abort(const std::string& why) override { throw std::runtime_error(why); }
};

TEST(Lane, RunsTasksInOrderOnItsOwnThreadAndCountsTheirBytes) {
  Lane lane(std::make_unique<One>());
  std::vector<int> order;
  std::thread::id where;
  uint64_t last = 0;
  for (int k = 0; k < 50; ++k)
    last = lane.submit([&, k](Communicator& comm) {
      order.push_back(k);
      where = std::this_thread::get_id();
      comm.broadcast(nullptr, 10, 0, "test");
    });
  lane.wait(last);
  ASSERT_EQ(order.size(), 50u);
  for (int k = 0; k < 50; ++k)
    EXPECT_EQ(order[static_cast<size_t>(k)], k);
  EXPECT_NE(where, std::this_thread::get_id());
  EXPECT_EQ(lane.sent_bytes(), 500);
}

TEST(Lane, AFailureReachesTheWaiterAndStopsTheLane) {
  Lane lane(std::make_unique<One>());
  int ran = 0;
  lane.submit([&](Communicator&) { ++ran; });
  const uint64_t bad = lane.submit([](Communicator&) { throw std::runtime_error("collective failed"); });
  const uint64_t after = lane.submit([&](Communicator&) { ++ran; });
  EXPECT_THROW(lane.wait(bad), std::runtime_error);
  EXPECT_THROW(lane.wait(after), std::runtime_error);  // a failed group cannot line up again
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace ein::dist
