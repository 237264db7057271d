// Parallel loops over an index range on oneTBB's thread pool. Only the range splitting lives
// here; what runs in each chunk (and whether results depend on the split) is the caller's.
#pragma once

#include <cstdint>
#include <functional>

namespace ein {

/// Calls body(lo, hi) on disjoint chunks covering [begin, end), in parallel; chunks hold at
/// least `grain` indices where the range allows. Runs inline when end - begin <= grain.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& body);

/// The number of threads parallel_for may use here (honours tbb::global_control).
int num_threads();

}  // namespace ein
