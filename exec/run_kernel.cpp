// run_kernel(): device dispatch between the CPU and CUDA executors, and the total-store detour
// both share (run_kernel.h).
#include "exec/run_kernel.h"

#include <stdexcept>
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

}  // namespace

void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers) {
  check_buffers(kernel, buffers);
  if (has_total_stores(kernel)) return run_with_totals(kernel, buffers);
  switch (buffers.front().device().kind) {
    case DeviceKind::cuda:
      return run_kernel_cuda(kernel, buffers);
    case DeviceKind::cpu:
      return run_kernel_cpu(kernel, buffers);
  }
  throw std::logic_error("internal error: run_kernel on a device of no known kind");
}

void run_kernel(const Kernel& kernel, std::span<const Tensor> buffers, KernelMemo& memo) {
  check_buffers(kernel, buffers);
  if (has_total_stores(kernel)) return run_with_totals(kernel, buffers);
  switch (buffers.front().device().kind) {
    case DeviceKind::cuda:
      return run_kernel_cuda(kernel, buffers, &memo);
    case DeviceKind::cpu:
      return run_kernel_cpu(kernel, buffers, &memo);
  }
  throw std::logic_error("internal error: run_kernel on a device of no known kind");
}

}  // namespace ein
