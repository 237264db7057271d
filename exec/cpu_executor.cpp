// Kernel IR on CPU tensors (run_kernel() in run_kernel.h dispatches CPU launches here). Steps:
//   1. prepare the kernel (compiler/kernel/prepare.h) and serialise it into a thread-local key;
//   2. look the key up (shared lock); on a miss, verify, schedule, emit MLIR and JIT it;
//   3. call the kernel over [0, outer_iterations), split by parallel_for with a grain that
//      gives each task at least ~32K elements of work; a row-block schedule then runs its
//      combining iteration, outer_iterations, alone.
#include "exec/cpu_executor.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/emit_mlir.h"
#include "compiler/kernel/prepare.h"
#include "compiler/pipeline.h"
#include "exec/executed_cost.h"
#include "exec/memo_cache.h"
#include "exec/run_kernel.h"
#include "runtime/jit/cpu_jit.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

struct Compiled {
  CpuKernelFn fn = nullptr;
};

std::atomic<int64_t> g_launches{0}, g_built{0}, g_planned{0};

std::shared_ptr<const Compiled> compile(const Kernel& kernel, const std::string& key) {
  verify(kernel);
  auto compiled = std::make_shared<Compiled>();
  const std::string symbol =
      fmt::format("ein_{}_{:016x}", kernel.name, XXH3_64bits(key.data(), key.size()));
  compiled->fn = CpuJit::instance().get(emit_kernel(kernel, Target::mlir, symbol), symbol);
  ++g_built;
  return compiled;
}

std::shared_ptr<const Compiled> lookup(const Kernel& kernel, const CpuSchedule& s) {
  static auto* cache = new MemoCache<Compiled>;
  thread_local std::string key;
  kernel_code_key(kernel, key);
  // Column sums in row blocks, in panels or in registers (schedule_cpu).
  key += s.row_block > 0 ? 'b' : s.panel > 0 ? 'p' : 'r';
  // Built outside the lock: the JIT dedups racing builds.
  return cache->get(key, [&] { return compile(kernel, key); });
}

/// What a launch of a kernel takes besides its buffers and its params' values, all of it
/// decided by the kernel's code, its exact layout and the thread count: the prepared kernel's
/// compiled code, schedule, run-time sizes and strides, and its row-block scratch.
struct Launch {
  bool empty = false;  ///< nothing runs: an empty parallel dim, or an empty row and no row store
  CpuSchedule schedule;
  std::vector<int64_t> parameters;  ///< kernel_parameters()
  size_t scratch_bytes = 0;
  std::shared_ptr<const Compiled> compiled;
};

std::shared_ptr<const Launch> plan_launch(const Kernel& kernel_in) {
  ++g_planned;
  auto launch = std::make_shared<Launch>();
  Kernel general = to_general_form(kernel_in);
  for (int d = 0; d < general.parallel_dims(); ++d)
    launch->empty = launch->empty || general.domain[d] == 0;
  bool empty_row = false, row_stores = false;
  for (int d = general.parallel_dims(); d < static_cast<int>(general.domain.size()); ++d)
    empty_row = empty_row || general.domain[d] == 0;
  for (const KernelStore& st : general.stores)
    row_stores = row_stores || (general.reduced > 0 && general.row_buffer(st.buffer));
  launch->empty = launch->empty || (empty_row && !row_stores);
  if (launch->empty) return launch;
  const Kernel kernel = prepare_kernel(std::move(general));
  const CpuSchedule& s = launch->schedule = schedule_cpu(kernel, num_threads());
  launch->compiled = lookup(kernel, s);
  launch->parameters = kernel_parameters(kernel, s);
  if (s.row_block > 0)
    launch->scratch_bytes =
        static_cast<size_t>(scratch_elements(kernel, s)) * element_size(scratch_dtype(kernel));
  return launch;
}

}  // namespace

void run_kernel_cpu(const Kernel& kernel_in, std::span<const Tensor> buffers, KernelMemo* memo) {
  // The launch is planned once per code, exact layout and thread count (a few hundred bytes
  // each, the memo bounded as shapes vary); a repeated launch only looks it up, and one with
  // a KernelMemo that has it not even that.
  static auto* plans = new MemoCache<Launch>(4096);
  const int threads = num_threads();
  const auto stamp = static_cast<uint64_t>(threads) * 2;  // even: the CPU's (run_kernel.h)
  std::shared_ptr<const Launch> plan;
  if (memo && memo->prepared && memo->stamp == stamp) {
    plan = std::static_pointer_cast<const Launch>(memo->prepared);
  } else {
    thread_local std::string scratch;
    std::string& key = memo ? memo->key : scratch;
    kernel_code_key(kernel_in, key, /*exact_layout=*/true);
    key.append(reinterpret_cast<const char*>(&threads), sizeof threads);
    plan = plans->get(key, [&] { return plan_launch(kernel_in); });
    if (memo) {
      memo->prepared = plan;
      memo->stamp = stamp;
    }
  }
  if (plan->empty) return;
  const CpuSchedule& s = plan->schedule;
  const auto& compiled = plan->compiled;
  void* pointers[18];
  std::vector<void*> many;
  void** ptrs = pointers;
  if (buffers.size() + 3 > 18) {
    many.resize(buffers.size() + 3);
    ptrs = many.data();
  }
  for (size_t i = 0; i < buffers.size(); ++i)
    ptrs[i] = buffers[i].data_ptr();
  // The kernel only reads its sizes, strides and params (emit_mlir loads them), so the memo's
  // own array serves every launch.
  ptrs[buffers.size()] = const_cast<int64_t*>(plan->parameters.data());
  ptrs[buffers.size() + 1] = const_cast<double*>(kernel_in.params.data());
  // Row blocks write their sums here; the iteration after the last block combines them. The
  // thread's cached area, unless a kernel of this thread is using it already (a task stolen
  // while waiting in a nested parallel_for): then one of this call's own.
  thread_local std::vector<double> cached;
  thread_local bool cached_busy = false;
  std::vector<double> own;
  struct Claim {
    bool& busy;
    bool was;
    ~Claim() { busy = was; }
  } claim{cached_busy, cached_busy};
  const int64_t extra = s.row_block > 0 ? 1 : 0;
  if (extra) {
    std::vector<double>& scratch = claim.was ? own : cached;
    cached_busy = true;
    const size_t bytes = plan->scratch_bytes;
    scratch.resize(std::max(scratch.size(), (bytes + sizeof(double) - 1) / sizeof(double)));
    ptrs[buffers.size() + 2] = scratch.data();
  }
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.work_per_iteration));
  CpuKernelFn fn = compiled->fn;
  ++g_launches;
  count_kernel_launch(kernel_in, buffers);  // charge the live FlopCounters (executed_cost.h)
  if (s.outer_iterations <= grain) {
    fn(ptrs, 0, s.outer_iterations + extra);
    return;
  }
  parallel_for(0, s.outer_iterations, grain, [&](int64_t lo, int64_t hi) { fn(ptrs, lo, hi); });
  if (extra) fn(ptrs, s.outer_iterations, s.outer_iterations + 1);
}

ExecutorStats executor_stats() {
  return {g_launches.load(), g_built.load(), g_planned.load()};
}

}  // namespace ein
