// Kernel IR on CPU tensors. Steps for one launch:
//   1. coalesce the loop nest and serialise it into a thread-local byte key;
//   2. look the key up (shared lock); on a miss, verify, schedule, emit MLIR and JIT it;
//   3. call the kernel over [0, outer_iterations), split by parallel_for with a grain that
//      gives each task at least ~32K elements of work.
#include "compiler/cpu_executor.h"

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

#include "compiler/cuda_executor.h"
#include "compiler/emit_mlir.h"
#include "compiler/memo_cache.h"
#include "compiler/executed_cost.h"
#include "runtime/jit/cpu_jit.h"
#include "runtime/parallel.h"

namespace ein {
namespace {

struct Compiled {
  CpuKernelFn fn = nullptr;
};

std::atomic<int64_t> g_launches{0}, g_built{0};

std::shared_ptr<const Compiled> compile(const Kernel& kernel, const std::string& key) {
  verify(kernel);
  auto compiled = std::make_shared<Compiled>();
  const std::string symbol =
      fmt::format("ein_{}_{:016x}", kernel.name, XXH3_64bits(key.data(), key.size()));
  compiled->fn = CpuJit::instance().get(emit_mlir(kernel, schedule_cpu(kernel), symbol), symbol);
  ++g_built;
  return compiled;
}

std::shared_ptr<const Compiled> lookup(const Kernel& kernel) {
  static auto* cache = new MemoCache<Compiled>;
  thread_local std::string key;
  kernel_code_key(kernel, key);
  // Built outside the lock: the JIT dedups racing builds.
  return cache->get(key, [&] { return compile(kernel, key); });
}

}  // namespace

namespace {

/// Runs a kernel with total stores: each total goes to a scratch buffer with one value per
/// point of P (a row store), and the host combines those values in double afterwards.
void run_with_totals(Kernel k, std::span<const Tensor> buffers) {
  const int p = k.parallel_dims();
  const Shape rows(k.domain.begin(), k.domain.begin() + p);
  const Shape row_strides = contiguous_strides(rows);
  std::vector<Tensor> bound(buffers.begin(), buffers.end());
  std::vector<std::pair<size_t, Combine>> totals;  // (store, combine)
  for (size_t i = 0; i < k.stores.size(); ++i) {
    KernelStore& st = k.stores[i];
    if (st.total == Combine::none) continue;
    Shape strides(k.domain.size(), 0);
    std::copy(row_strides.begin(), row_strides.end(), strides.begin());
    k.buffers[st.buffer].strides = strides;
    k.buffers[st.buffer].dtype = k.compute;
    bound[st.buffer] = empty(rows, k.compute, buffers[st.buffer].device());
    totals.emplace_back(i, st.total);
    st.total = Combine::none;
  }
  run_kernel(k, bound);
  for (const auto& [i, combine] : totals) {
    const int b = k.stores[i].buffer;
    double acc = combine_identity(combine);
    for (double v : bound[b].to_vector<double>())
      acc = combine_values(combine, acc, v);
    buffers[b].fill_(acc);
  }
}

}  // namespace

void run_kernel(const Kernel& kernel_in, std::span<const Tensor> buffers) {
  if (buffers.size() != kernel_in.buffers.size())
    throw std::logic_error(fmt::format("internal error: kernel {} takes {} buffers, got {}",
                                       kernel_in.name, kernel_in.buffers.size(), buffers.size()));
  // On a GPU the kernel as given is the memo key (its general form and coalescing happen once,
  // when it is emitted); only totals take the scratch-and-combine path below first.
  if (buffers.front().device().kind == DeviceKind::cuda) {
    bool totals = false;
    for (const KernelStore& st : kernel_in.stores)
      totals = totals || st.total != Combine::none;
    if (!totals) return run_kernel_cuda(kernel_in, buffers);
  }
  // Nothing to do when a parallel dim is empty, or the row is empty and nothing is stored per
  // row (a row store over an empty row still writes the stages' identities).
  Kernel general = to_general_form(kernel_in);
  for (const KernelStore& st : general.stores)
    if (st.total != Combine::none) return run_with_totals(std::move(general), buffers);
  for (int d = 0; d < general.parallel_dims(); ++d)
    if (general.domain[d] == 0) return;
  bool empty_row = false, row_stores = false;
  for (int d = general.parallel_dims(); d < static_cast<int>(general.domain.size()); ++d)
    empty_row = empty_row || general.domain[d] == 0;
  for (const KernelStore& st : general.stores)
    row_stores = row_stores || (general.reduced > 0 && general.row_buffer(st.buffer));
  if (empty_row && !row_stores) return;
  const Kernel kernel = coalesce(std::move(general));
  const auto compiled = lookup(kernel);
  const CpuSchedule s = schedule_cpu(kernel);
  std::vector<int64_t> params = kernel_parameters(kernel, s);
  void* pointers[18];
  std::vector<void*> many;
  void** ptrs = pointers;
  if (buffers.size() + 2 > 18) {
    many.resize(buffers.size() + 2);
    ptrs = many.data();
  }
  for (size_t i = 0; i < buffers.size(); ++i)
    ptrs[i] = buffers[i].data_ptr();
  ptrs[buffers.size()] = params.data();
  ptrs[buffers.size() + 1] = const_cast<double*>(kernel.params.data());
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.work_per_iteration));
  CpuKernelFn fn = compiled->fn;
  ++g_launches;
  count_kernel_launch(kernel_in, buffers);  // charge the live FlopCounters (executed_cost.h)
  if (s.outer_iterations <= grain) {
    fn(ptrs, 0, s.outer_iterations);
    return;
  }
  parallel_for(0, s.outer_iterations, grain, [&](int64_t lo, int64_t hi) { fn(ptrs, lo, hi); });
}

std::string kernel_mlir(const Kernel& kernel_in) {
  const Kernel kernel = coalesce(kernel_in);
  verify(kernel);
  return emit_mlir(kernel, schedule_cpu(kernel), "ein_" + kernel.name);
}

ExecutorStats executor_stats() {
  return {g_launches.load(), g_built.load()};
}

}  // namespace ein
