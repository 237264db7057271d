// Kernel IR on CUDA tensors (exec/cuda_executor.h). Steps for one launch:
//   1. key the kernel by its code and exact layout (kernel_ir.h's kernel_code_key) and device;
//   2. on a miss, emit CUDA C++ (emit_cuda.h) and prepare it (NVRTC, module load);
//   3. launch with the buffers' device addresses and the kernel's params.
// A column reduction over few points and many rows (a bias or LayerNorm weight gradient)
// runs as the two kernels of compiler/kernel/split_rows.h instead, through a scratch buffer per
// stage, so that thousands of threads share its rows rather than one thread per point.
// Like PyTorch, launches are asynchronous: nothing here waits for the device.
#include "exec/cuda_executor.h"

#include <atomic>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

#include <ein/errors.h>
#include <fmt/format.h>

#include "compiler/emit/emit_cuda.h"
#include "compiler/kernel/split_rows.h"
#include "exec/executed_cost.h"
#include "exec/memo_cache.h"
#include "exec/run_kernel.h"
#include "exec/tensor_kernels.h"
#include "runtime/cuda/execution.h"

namespace ein {
namespace {

struct Prepared {
  CudaLaunch launch;
  std::shared_ptr<const CudaFunction> function;
};

std::atomic<int64_t> g_launches{0}, g_prepared{0};

struct Made {
  std::string source, entry;
  CudaLaunch launch;
  bool arch_specific = false;  // CudaSource::arch_specific
};

/// A prepared kernel for `key` on `device`, made by `make` (a Made) on a miss. `key` is
/// scratch: the device and the installed CudaExecution are appended to it.
template <class Make>
std::shared_ptr<const Prepared> prepared(std::string& key, int device, Make&& make) {
  static auto* cache = new MemoCache<Prepared>;  // never destroyed: functions outlive exit
  const uint64_t generation = cuda_execution_generation();  // prepared by the installed one
  key.append(reinterpret_cast<const char*>(&device), sizeof device);
  key.append(reinterpret_cast<const char*>(&generation), sizeof generation);
  return cache->get(key, [&] {
    auto p = std::make_shared<Prepared>();
    const Made m = make();
    p->launch = m.launch;
    p->function = cuda_execution().prepare(device, {m.source, m.entry, m.arch_specific});
    ++g_prepared;
    return std::shared_ptr<const Prepared>(std::move(p));
  });
}

void launch(const Prepared& p, int device, std::span<void* const> buffers,
            std::span<const double> params) {
  ++g_launches;
  cuda_execution().launch(device, *p.function, p.launch.grid, p.launch.block, buffers, params, 0);
}

/// The CUDA device the launch's tensors share; RuntimeError when they are elsewhere.
int device_of(std::span<const Tensor> buffers, std::string_view kernel) {
  const Device d = buffers.front().device();
  for (const Tensor& t : buffers)
    if (t.device() != d)
      throw RuntimeError(fmt::format("kernel {}: tensors on {} and {} in one kernel; move them "
                                     "to one device first (.to(...))",
                                     kernel, d.str(), t.device().str()));
  return d.index;
}

// ---- gather and scatter-add: small hand-written kernels with sizes as run-time params ----

/// The C type that moves a row of `row_bytes` in the widest whole words (`row_bytes` also
/// divided by the table's address alignment: a sliced table need not start on 16 bytes).
std::pair<const char*, int64_t> word_for(int64_t row_bytes) {
  if (row_bytes % 16 == 0) return {"uint4", 16};
  if (row_bytes % 8 == 0) return {"unsigned long long", 8};
  if (row_bytes % 4 == 0) return {"unsigned int", 4};
  if (row_bytes % 2 == 0) return {"unsigned short", 2};
  return {"unsigned char", 1};
}

constexpr int kBlock = 256;

/// The C type of an index tensor's elements as the row kernels read them.
const char* index_type(DType dtype) {
  return dtype == DType::i32 ? "int" : "long long";
}

// What the row kernels do with an index out of range (`bad` is null when the host checked the
// indices first).
constexpr const char* kIndexComment =
    "// An index out of range is skipped and its flat position stored into *bad (the first),\n"
    "// which the host reads when it next waits for the device (runtime/device_checks.h).\n";

Made gather_source(const char* word, const char* index) {
  Made m;
  m.entry = "ein_gather_rows";
  m.source = fmt::format(
      "// Row gather (exec/cuda_executor.cpp): out[i, :] = table[idx[i], :], rows moved as\n"
      "// `words` words of {0}; a negative index counts from the end.\n{4}"
      "typedef {0} ein_word;\n"
      "extern \"C\" __global__ void __launch_bounds__({1}) {2}(const {3}* idx,\n"
      "    const ein_word* table, ein_word* out, unsigned long long* bad, double count_,\n"
      "    double words_, double rows_) {{\n"
      "  const long long count = (long long)count_, words = (long long)words_;\n"
      "  const long long rows = (long long)rows_, total = count * words;\n"
      "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;\n"
      "       i += (long long)gridDim.x * blockDim.x) {{\n"
      "    const long long r = i / words, c = i - r * words;\n"
      "    long long k = (long long)idx[r];\n"
      "    if (k < 0) k += rows;\n"
      "    if (k < 0 || k >= rows) {{\n"
      "      if (c == 0 && bad) atomicMin(bad, (unsigned long long)r);\n"
      "      out[i] = ein_word();\n"
      "      continue;\n"
      "    }}\n"
      "    out[i] = table[k * words + c];\n"
      "  }}\n"
      "}}\n",
      word, kBlock, m.entry, index, kIndexComment);
  return m;
}

Made scatter_source(const char* type, const char* index) {
  Made m;
  m.entry = "ein_scatter_add_rows";
  m.source = fmt::format(
      "// Row scatter-add (exec/cuda_executor.cpp): out[idx[i], c] += values[i, c]. One\n"
      "// thread per column walks the indices in order, so repeated indices never race and\n"
      "// every sum has one order (deterministic, as on the CPU). A negative index counts\n"
      "// from the end.\n{4}"
      "extern \"C\" __global__ void __launch_bounds__({1}) {2}(const {3}* idx,\n"
      "    const {0}* values, {0}* out, unsigned long long* bad, double count_,\n"
      "    double width_, double rows_) {{\n"
      "  const long long count = (long long)count_, width = (long long)width_;\n"
      "  const long long rows = (long long)rows_;\n"
      "  for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < width;\n"
      "       c += (long long)gridDim.x * blockDim.x)\n"
      "    for (long long i = 0; i < count; ++i) {{\n"
      "      long long k = (long long)idx[i];\n"
      "      if (k < 0) k += rows;\n"
      "      if (k < 0 || k >= rows) {{\n"
      "        if (c == 0 && bad) atomicMin(bad, (unsigned long long)i);\n"
      "        continue;\n"
      "      }}\n"
      "      out[k * width + c] += values[i * width + c];\n"
      "    }}\n"
      "}}\n",
      type, kBlock, m.entry, index, kIndexComment);
  return m;
}

int64_t blocks_for(int64_t work) {
  return std::min<int64_t>((work + kBlock - 1) / kBlock, int64_t{1} << 20);
}

/// Launches the row kernel `source(type, index type)` (gather or scatter-add, prepared once
/// per pair) with `indices` (copied to the device when checked on the host), `data` and `out`,
/// and params (index count, `width`, the rows the indices address), over `work` threads.
void launch_indexed(Made (*source)(const char*, const char*), const char* type,
                    const RowIndices& indices, const Tensor& data, const Tensor& out, int64_t width,
                    int64_t rows, int64_t work) {
  const Device dev = data.device();
  const Tensor idx = indices.on_device.defined()
                         ? indices.on_device
                         : from_data(indices.checked, {indices.count()}, dev);
  const char* index = index_type(idx.dtype());
  std::string key =
      fmt::format("{} {} {}", source == gather_source ? "gather" : "scatter_add", type, index);
  const auto p = prepared(key, dev.index, [&] {
    Made m = source(type, index);
    m.launch = {1, kBlock, 0};
    return m;
  });
  void* ptrs[] = {idx.device_ptr(), data.device_ptr(), out.device_ptr(), indices.bad};
  const double params[] = {static_cast<double>(indices.count()), static_cast<double>(width),
                           static_cast<double>(rows)};
  ++g_launches;
  cuda_execution().launch(dev.index, *p->function, blocks_for(work), kBlock, ptrs, params, 0);
}

/// The strided copy the runtime's Tensor::copy_ runs on CUDA tensors: a Kernel IR copy.
void copy_on_cuda(const Tensor& dst, const Tensor& src) {
  copy_into(dst, src, "copy");
}

void fill_on_cuda(const Tensor& dst, double value) {
  fill_into(dst, value);
}

[[maybe_unused]] const bool g_copy_installed = [] {
  set_device_copy(DeviceKind::cuda, copy_on_cuda);
  set_device_fill(DeviceKind::cuda, fill_on_cuda);
  return true;
}();

/// Fills the launch's device pointers and launches `p`.
void launch_prepared(const Prepared& p, int device, std::span<const Tensor> buffers,
                     std::span<const double> params) {
  void* pointers[18];
  std::vector<void*> many;
  void** ptrs = pointers;
  if (buffers.size() > 18) {
    many.resize(buffers.size());
    ptrs = many.data();
  }
  for (size_t i = 0; i < buffers.size(); ++i)
    ptrs[i] = buffers[i].device_ptr();
  launch(p, device, std::span<void* const>(ptrs, buffers.size()), params);
}

/// `kernel` prepared on `device`; `key` holds its exact-layout code key (kernel_code_key).
std::shared_ptr<const Prepared> prepare_kernel(const Kernel& kernel, int device, std::string& key) {
  return prepared(key, device, [&] {
    CudaKernel k = emit_cuda(kernel);
    return Made{std::move(k.source), std::move(k.entry), k.launch};
  });
}

/// One kernel launched as it is (no split, not counted: run_kernel_cuda counts), with the
/// run-time `params` given; `key` holds its exact-layout code key (kernel_code_key).
void launch_kernel(const Kernel& kernel, std::span<const Tensor> buffers,
                   std::span<const double> params, std::string& key) {
  const int device = device_of(buffers, kernel.name);
  launch_prepared(*prepare_kernel(kernel, device, key), device, buffers, params);
}

/// Whether a reduction of this exact layout splits (split_rows.h), decided once per key.
std::shared_ptr<const std::optional<RowSplit>> split_of(const Kernel& kernel,
                                                        const std::string& key) {
  static auto* splits = new MemoCache<std::optional<RowSplit>>;
  return splits->get(
      key, [&] { return std::make_shared<const std::optional<RowSplit>>(split_for_gpu(kernel)); });
}

/// What a KernelMemo holds for a kernel that launches as it is (no split).
struct MemoizedLaunch {
  std::shared_ptr<const Prepared> prepared;
};

}  // namespace

void run_kernel_cuda(const Kernel& kernel, std::span<const Tensor> buffers, KernelMemo* memo) {
  count_kernel_launch(kernel, buffers);  // charge the live FlopCounters (executed_cost.h)
  const int device = device_of(buffers, kernel.name);
  // a memo's launch serves while the device and the installed CudaExecution are the same (odd
  // stamps: CUDA's, run_kernel.h)
  const uint64_t stamp = (cuda_execution_generation() * 64 + static_cast<uint64_t>(device)) * 2 + 1;
  if (memo && memo->prepared && memo->stamp == stamp) {
    const auto& m = *std::static_pointer_cast<const MemoizedLaunch>(memo->prepared);
    return launch_prepared(*m.prepared, device, buffers, kernel.params);
  }
  thread_local std::string scratch;
  std::string& key = memo ? memo->key : scratch;
  kernel_code_key(kernel, key, /*exact_layout=*/true);
  if (kernel.reduced > 0) {
    // Split or not depends on the exact layout only: decided once per key, the split kernels
    // kept (their params are this launch's: the split copies the param slots, not values).
    const auto split = split_of(kernel, key);
    if (split->has_value()) {
      const RowSplit& s = **split;
      std::vector<Tensor> scratch_rows;
      for (size_t i = 0; i < s.partial.stages.size(); ++i)
        scratch_rows.push_back(empty(s.scratch_shape, s.partial.compute, buffers.front().device()));
      auto bind = [&](const std::vector<int>& which) {
        std::vector<Tensor> bound;
        for (int w : which)
          bound.push_back(w >= 0 ? buffers[static_cast<size_t>(w)]
                                 : scratch_rows[static_cast<size_t>(-1 - w)]);
        return bound;
      };
      std::string part_key;  // the memo (if any) keeps the whole kernel's key
      for (const auto& [part, which] : {std::pair{&s.partial, &s.partial_buffers},
                                        std::pair{&s.combine, &s.combine_buffers}}) {
        kernel_code_key(*part, part_key, /*exact_layout=*/true);
        launch_kernel(*part, bind(*which), kernel.params, part_key);
      }
      return;
    }
  }
  if (!memo)
    return launch_prepared(*prepare_kernel(kernel, device, key), device, buffers, kernel.params);
  std::string prepared_key = key;  // prepared() appends the device and the execution to it
  auto m = std::make_shared<MemoizedLaunch>();
  m->prepared = prepare_kernel(kernel, device, prepared_key);
  memo->prepared = m;
  memo->stamp = stamp;
  launch_prepared(*m->prepared, device, buffers, kernel.params);
}

int64_t RowIndices::count() const {
  return on_device.defined() ? on_device.numel() : static_cast<int64_t>(checked.size());
}

Tensor gather_rows_cuda(const Tensor& table_in, const RowIndices& indices, const Shape& out_shape) {
  const Tensor table = table_in.detach().contiguous();
  const Device dev = table.device();
  Tensor out = empty(out_shape, table.dtype(), dev);
  const int64_t rows = table.size(0);
  const Shape row(table.shape().begin() + 1, table.shape().end());
  const int64_t row_bytes = checked_numel(row) * table.element_size();  // (of 0 rows too)
  if (out.numel() == 0) return out;
  const auto address = static_cast<int64_t>(reinterpret_cast<uintptr_t>(table.device_ptr()));
  const auto [word, word_bytes] = word_for(std::gcd(row_bytes, address & -address));
  launch_indexed(gather_source, word, indices, table, out, row_bytes / word_bytes, rows,
                 indices.count() * (row_bytes / word_bytes));
  return out;
}

Tensor scatter_add_rows_cuda(const Tensor& values_in, const RowIndices& indices,
                             const Shape& out_shape) {
  const Tensor values = values_in.detach().contiguous();
  const Device dev = values.device();
  const DType dtype = values.dtype();
  if (dtype != DType::f32 && dtype != DType::f64)
    throw std::logic_error("internal error: scatter_add on CUDA takes f32 or f64 values");
  Tensor out = zeros(out_shape, dtype, dev);
  const int64_t width = out_shape.empty() || out_shape[0] == 0
                            ? 0
                            : checked_numel(out_shape) / out_shape[0];
  if (indices.count() == 0 || width == 0) return out;
  launch_indexed(scatter_source, dtype == DType::f64 ? "double" : "float", indices, values, out,
                 width, out_shape[0], width);
  return out;
}

void launch_cuda_source(std::string key, int device,
                        const std::function<CudaSource()>& make, int64_t grid, int block,
                        std::span<void* const> buffers, std::span<const double> params,
                        int shared_bytes) {
  key.insert(0, "source ");  // apart from Kernel IR keys
  const auto p = prepared(key, device, [&] {
    CudaSource k = make();
    return Made{std::move(k.source), std::move(k.entry), {}, k.arch_specific};
  });
  ++g_launches;
  cuda_execution().launch(device, *p->function, grid, block, buffers, params, shared_bytes);
}

CudaExecutorStats cuda_executor_stats() {
  return {g_launches.load(), g_prepared.load()};
}

}  // namespace ein
