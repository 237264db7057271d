// parallel_for over tbb::parallel_for with a blocked_range; inline below the grain so small
// tensors pay no scheduling cost.
#include "runtime/parallel.h"

#include <algorithm>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace ein {

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  if (end - begin <= grain || num_threads() == 1) {
    body(begin, end);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(begin, end, static_cast<size_t>(grain)),
                    [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
}

int num_threads() {
  const auto limit =
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return std::min(tbb::this_task_arena::max_concurrency(), static_cast<int>(limit));
}

}  // namespace ein
