// run_kernel(): device dispatch between the CPU and CUDA executors, and the total-store detour
// both share (run_kernel.h).
#include "exec/run_kernel.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "compiler/kernel/prepare.h"
#include "exec/cpu_executor.h"
#include "exec/cuda_executor.h"
#include "exec/tensor_kernels.h"

namespace ein {
namespace {

bool has_total_stores(const Kernel& k) {
  for (const KernelStore& st : k.stores)
    if (st.total != Combine::none) return true;
  return false;
}

Reduction reduction_of(Combine c) {
  switch (c) {
    case Combine::prod:
      return Reduction::prod;
    case Combine::max:
      return Reduction::max;
    case Combine::min:
      return Reduction::min;
    default:
      return Reduction::sum;
  }
}

/// Runs a kernel with total stores: each total goes to a scratch buffer with one value per
/// point of P (rewrite_total_stores), combined in double afterwards: by the host for CPU
/// tensors; on another device by a reduction kernel there, so that nothing waits for it (a
/// training step's mean loss comes here).
void run_with_totals(const Kernel& kernel, std::span<const Tensor> buffers) {
  Kernel k = to_general_form(kernel);
  const Shape rows(k.domain.begin(), k.domain.begin() + k.parallel_dims());
  std::vector<std::pair<int, Combine>> totals;  // (buffer, combine)
  for (const KernelStore& st : k.stores)
    if (st.total != Combine::none) totals.emplace_back(st.buffer, st.total);
  rewrite_total_stores(k);
  const Device device = buffers.front().device();
  std::vector<Tensor> bound(buffers.begin(), buffers.end());
  for (const auto& [b, combine] : totals) {
    if (device.kind != DeviceKind::cpu) k.buffers[b].dtype = DType::f64;  // the rows exactly
    bound[b] = empty(rows, k.buffers[b].dtype, device);
  }
  run_kernel(k, bound);
  for (const auto& [b, combine] : totals) {
    if (device.kind != DeviceKind::cpu) {
      buffers[b].copy_(reduce_dims(bound[b], std::vector<bool>(rows.size(), true),
                                   reduction_of(combine), std::nullopt));
      continue;
    }
    double acc = combine_identity(combine);
    for (double v : bound[b].to_vector<double>())
      acc = combine_values(combine, acc, v);
    buffers[b].fill_(acc);
  }
}

}  // namespace

namespace {

void check_buffers(const Kernel& kernel, std::span<const Tensor> buffers) {
  if (buffers.size() != kernel.buffers.size())
    throw std::logic_error(fmt::format("internal error: kernel {} takes {} buffers, got {}",
                                       kernel.name, kernel.buffers.size(), buffers.size()));
}

/// Runs `kernel` through its device's executor, with `memo` where there is one.
void dispatch(const Kernel& kernel, std::span<const Tensor> buffers, KernelMemo* memo) {
  check_buffers(kernel, buffers);
  if (has_total_stores(kernel)) return run_with_totals(kernel, buffers);
  switch (buffers.front().device().kind) {
    case DeviceKind::cuda:
      return run_kernel_cuda(kernel, buffers, memo);
    case DeviceKind::cpu:
      return run_kernel_cpu(kernel, buffers, memo);
  }
  throw std::logic_error("internal error: run_kernel on a device of no known kind");
}

}  // namespace

void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers) {
  dispatch(kernel, buffers, nullptr);
}

void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers, KernelMemo& memo) {
  dispatch(kernel, buffers, &memo);
}

namespace detail {

struct BuiltKernel {
  std::vector<int64_t> signature;
  std::string origin;
  Kernel kernel;
  KernelMemo memo;
  bool running = false;  // a launch of it is under way on this thread (re-entered: a copy runs)
};

namespace {

constexpr size_t kMaxBuilt = 1024;

struct BuiltKernels {
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<BuiltKernel>>> by_hash;
  size_t size = 0;
};

BuiltKernels& built_kernels() {
  thread_local BuiltKernels kept;
  return kept;
}

}  // namespace

std::shared_ptr<BuiltKernel> find_built(std::span<const int64_t> signature, std::string_view origin,
                                        uint64_t& hash) {
  uint64_t h = std::hash<std::string_view>{}(origin);
  for (int64_t v : signature)
    h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ULL ^ (h >> 29);
  hash = h;
  const BuiltKernels& kept = built_kernels();
  if (auto it = kept.by_hash.find(h); it != kept.by_hash.end())
    for (const std::shared_ptr<BuiltKernel>& b : it->second)
      if (std::ranges::equal(b->signature, signature) && b->origin == origin) return b;
  return nullptr;
}

std::shared_ptr<BuiltKernel> keep_built(uint64_t hash, std::span<const int64_t> signature,
                                        std::string_view origin, Kernel kernel) {
  BuiltKernels& kept = built_kernels();
  if (kept.size >= kMaxBuilt) {  // callers hold what they use: dropping frees nothing in use
    kept.by_hash.clear();
    kept.size = 0;
  }
  auto b = std::make_shared<BuiltKernel>();
  b->signature.assign(signature.begin(), signature.end());
  b->origin = origin;
  b->kernel = std::move(kernel);
  kept.by_hash[hash].push_back(b);
  ++kept.size;
  return b;
}

void run_built(BuiltKernel& built, std::span<const double> params,
               std::span<const Tensor> buffers) {
  if (params.size() != built.kernel.params.size())
    throw std::logic_error(fmt::format("internal error: kernel {} takes {} params, got {}",
                                       built.kernel.name, built.kernel.params.size(),
                                       params.size()));
  if (built.running) {  // its params are in use: run a copy
    Kernel k = built.kernel;
    std::ranges::copy(params, k.params.begin());
    return run_kernel(k, buffers);
  }
  std::ranges::copy(params, built.kernel.params.begin());
  built.running = true;
  struct Done {
    bool& running;
    ~Done() { running = false; }
  } done{built.running};
  run_kernel(built.kernel, buffers, built.memo);
}

}  // namespace detail

}  // namespace ein
