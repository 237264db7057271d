// The fake CUDA device (tests/support/fake_cuda.h).
#include "support/fake_cuda.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include <ein/device.h>
#include <ein/scalar_convert.h>
#include "runtime/blas/gemm.h"
#include "runtime/cuda/execution.h"
#include "runtime/cuda/nvrtc.h"
#include "support/fake_device_memory.h"
#include "support/host_cuda.h"

namespace ein::testing {

namespace {

/// The fake's one stream: launches, GEMMs and blocking copies run when called (the stream has
/// caught up with them), but an asynchronous copy is put off as long as a GPU may put it off,
/// so that code that does not wait for one sees what it would see on a GPU at worst: a copy to
/// the device reads its (pinned) source only when the next operation needs the stream to have
/// reached it, and a copy to the host lands (its destination reads as NaN until then) only when
/// the host waits: synchronize(), a blocking copy, or freeing pinned memory.
class FakeStream {
 public:
  void upload(void* dst, const void* src, int64_t n) {
    std::lock_guard lock(mutex_);
    queue_.push_back({dst, src, static_cast<size_t>(n), {}});
  }
  void download(void* dst, const void* src, int64_t n) {
    std::lock_guard lock(mutex_);
    run_uploads();  // queued before it
    Copy c{dst, nullptr, static_cast<size_t>(n), {}};
    {
      const DeviceMemoryAccess access("an asynchronous copy to the host", {src});
      c.bytes.assign(static_cast<const unsigned char*>(src),
                     static_cast<const unsigned char*>(src) + n);
    }
    std::memset(dst, 0xff, c.n);  // not there yet: NaN in every float type
    queue_.push_back(std::move(c));
  }
  /// Before an operation the stream runs after what is queued.
  void catch_up() {
    std::lock_guard lock(mutex_);
    run_uploads();
  }
  /// The host waits for the stream.
  void drain() {
    std::lock_guard lock(mutex_);
    run_uploads();
    for (const Copy& c : queue_)
      std::memcpy(c.dst, c.bytes.data(), c.n);
    queue_.clear();
  }

 private:
  struct Copy {
    void* dst;
    const void* src;  // an upload's source, read when it runs
    size_t n;
    std::vector<unsigned char> bytes;  // a download's bytes, read when it was queued
  };
  void run_uploads() {
    for (Copy& c : queue_)
      if (c.src) {
        const DeviceMemoryAccess access("an asynchronous copy to the device", {c.dst});
        std::memcpy(c.dst, c.src, c.n);
        c.src = nullptr;
        c.dst = nullptr;
      }
    std::erase_if(queue_, [](const Copy& c) { return c.dst == nullptr; });
  }

  std::mutex mutex_;
  std::vector<Copy> queue_;  // in the order queued
};

}  // namespace

struct FakeCudaDevice::State {
  std::atomic<int64_t> prepared{0}, launches{0}, gemms{0}, bytes{0}, f64_spilling{0};
  std::atomic<int64_t> pinned_bytes{0}, async_copies{0}, bytes_to_device{0}, bytes_to_host{0};
  std::shared_ptr<DeviceBackend> backend;
  FakeStream stream;
  FakeCudaDevice::Work work = FakeCudaDevice::Work::run;
};

namespace {

int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

/// The CPU time the calling thread spent in the fake's operations, of nested ones (a launch
/// landing queued copies, a free catching up) the outermost alone.
thread_local int64_t t_operation_ns = 0;

class OperationTime {
 public:
  OperationTime() : outer_(depth_++ == 0), start_(outer_ ? thread_cpu_ns() : 0) {}
  ~OperationTime() {
    --depth_;
    if (outer_) t_operation_ns += thread_cpu_ns() - start_;
  }
  OperationTime(const OperationTime&) = delete;
  OperationTime& operator=(const OperationTime&) = delete;

 private:
  static thread_local int depth_;
  bool outer_;
  int64_t start_;
};
thread_local int OperationTime::depth_ = 0;

/// Blocks an emulated launch runs at most (the grid-stride loops cover the rest).
constexpr int64_t kMaxBlocks = 2;
/// Dynamic shared memory a block may ask for on sm_90 (227 KB; sm_80 allows 163 KB).
constexpr int kMaxSharedBytes = 227 * 1024;

class HostMemory final : public DeviceBackend {
 public:
  explicit HostMemory(std::shared_ptr<FakeCudaDevice::State> s) : state_(std::move(s)) {}
  std::string name() const override { return "fake cuda"; }
  void* allocate(Device, int64_t nbytes) override {
    const OperationTime timed;
    void* p = allocate_device_memory(nbytes);
    if (p) state_->bytes += nbytes;
    return p;
  }
  void free(Device, void* ptr, int64_t nbytes) override {
    const OperationTime timed;
    state_->stream.catch_up();  // a queued copy into it lands first
    state_->bytes -= nbytes;
    free_device_memory(ptr);
  }
  void copy_from_host(Device, void* dst, const void* src, int64_t n) override {
    const OperationTime timed;
    state_->stream.drain();
    state_->bytes_to_device += n;
    const DeviceMemoryAccess access("a copy to the device", {dst});
    std::memcpy(dst, src, static_cast<size_t>(n));
  }
  void copy_to_host(Device, void* dst, const void* src, int64_t n) override {
    const OperationTime timed;
    state_->stream.drain();
    state_->bytes_to_host += n;
    const DeviceMemoryAccess access("a copy to the host", {src});
    std::memcpy(dst, src, static_cast<size_t>(n));
  }
  void copy_on_device(Device, void* dst, const void* src, int64_t n) override {
    const OperationTime timed;
    state_->stream.catch_up();
    const DeviceMemoryAccess access("a copy on the device", {dst, src});
    std::memmove(dst, src, static_cast<size_t>(n));
  }
  void synchronize(Device) override {
    const OperationTime timed;
    state_->stream.drain();
  }
  // Pinned host memory is ordinary host memory here; both it and the asynchronous copies are
  // counted for the tests.
  void* allocate_pinned(int64_t nbytes) override {
    const OperationTime timed;
    state_->pinned_bytes += nbytes;
    return std::aligned_alloc(64, static_cast<size_t>((std::max<int64_t>(nbytes, 1) + 63) / 64 * 64));
  }
  void free_pinned(void* ptr, int64_t nbytes) override {
    const OperationTime timed;
    state_->stream.drain();  // cuMemFreeHost waits for the device
    state_->pinned_bytes -= nbytes;
    std::free(ptr);
  }
  void copy_from_host_async(Device, void* dst, const void* src, int64_t n) override {
    const OperationTime timed;
    ++state_->async_copies;
    state_->bytes_to_device += n;
    state_->stream.upload(dst, src, n);
  }
  void copy_to_host_async(Device, void* dst, const void* src, int64_t n) override {
    const OperationTime timed;
    ++state_->async_copies;
    state_->bytes_to_host += n;
    state_->stream.download(dst, src, n);
  }

 private:
  std::shared_ptr<FakeCudaDevice::State> state_;
};

class EmulatedFunction final : public CudaFunction {
 public:
  EmulatedFunction(std::string entry, EmulatedLaunch launch, size_t pointers, int64_t static_shared)
      : entry_(std::move(entry)),
        run_(launch),
        pointers_(pointers),
        static_shared_(static_shared) {}
  const std::string& entry() const override { return entry_; }
  EmulatedLaunch run() const { return run_; }
  size_t pointers() const { return pointers_; }
  /// Bytes of __shared__ arrays a block has on sm_90 (ptxas' smem; 0 without NVRTC).
  int64_t static_shared() const { return static_shared_; }

 private:
  std::string entry_;
  EmulatedLaunch run_;
  size_t pointers_;
  int64_t static_shared_;
};

DType dtype_of(int cuda_data_type) {
  switch (cuda_data_type) {
    case 0: return DType::f32;
    case 1: return DType::f64;
    case 2: return DType::f16;
    case 14: return DType::bf16;
  }
  throw std::logic_error("fake cuda: unknown cudaDataType " + std::to_string(cuda_data_type));
}

/// Multiply-adds above which a fake GEMM runs as large_product (the naive loop would take
/// minutes: an LM head's logits are 10^11).
constexpr int64_t kLargeGemm = int64_t{1} << 26;

/// The same sums as the naive loop for one matrix of a large GEMM, in another order: op(A) and
/// op(B) gathered densely in f64 (as cuBLASLt's plan reads them: `op_a(i, l)`, `op_b(l, j)`),
/// multiplied by the host's f64 GEMM a panel of rows at a time, and each sum handed to
/// `store(i, j, sum)`.
template <class OpA, class OpB, class Store>
void large_product(int64_t rows, int64_t cols, int64_t inner, const OpA& op_a, const OpB& op_b,
                   const Store& store) {
  std::vector<double> a(static_cast<size_t>(rows * inner)), b(static_cast<size_t>(inner * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t l = 0; l < inner; ++l)
      a[i * inner + l] = op_a(i, l);
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t l = 0; l < inner; ++l)
      b[l * cols + j] = op_b(l, j);
  const int64_t panel =
      std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(cols, 1), 1, rows);
  std::vector<double> sums(static_cast<size_t>(panel * cols));
  for (int64_t i0 = 0; i0 < rows; i0 += panel) {
    GemmBatch h;
    h.dtype = DType::f64;
    h.m = std::min(panel, rows - i0);
    h.n = cols;
    h.k = inner;
    h.a = a.data() + i0 * inner;
    h.lda = std::max<int64_t>(inner, 1);
    h.b = b.data();
    h.ldb = std::max<int64_t>(cols, 1);
    h.c = sums.data();
    h.ldc = std::max<int64_t>(cols, 1);
    gemm_batched(h);
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < h.m; ++i)
        store(i0 + i, j, sums[i * cols + j]);
  }
}

class EmulatedExecution final : public CudaExecution {
 public:
  explicit EmulatedExecution(std::shared_ptr<FakeCudaDevice::State> s) : state_(std::move(s)) {}

  std::shared_ptr<const CudaFunction> prepare(int, const CudaSource& kernel) override {
    const OperationTime timed;
    const std::string& source = kernel.source;
    const std::string& entry = kernel.entry;
    const int64_t static_shared = check_with_nvrtc(kernel);
    size_t pointers = 0;
    for (const std::string& p : cuda_entry_parameters(source, entry))
      pointers += p.find('*') != std::string::npos;
    ++state_->prepared;
    return std::make_shared<EmulatedFunction>(entry, build_emulated(source, entry), pointers,
                                              static_shared);
  }

  void launch(int, const CudaFunction& function, int64_t grid, int block,
              std::span<void* const> buffers, std::span<const double> params,
              int shared_bytes) override {
    const OperationTime timed;
    if (grid == 0) return;
    const auto& f = static_cast<const EmulatedFunction&>(function);
    // as cuLaunchKernel refuses it: the __shared__ arrays count towards the limit
    if (shared_bytes < 0 || f.static_shared() + shared_bytes > kMaxSharedBytes)
      throw DeviceError("fake cuda: " + f.entry() + " asks for " + std::to_string(shared_bytes) +
                        " bytes of dynamic shared memory a block beside " +
                        std::to_string(f.static_shared()) +
                        " of __shared__ arrays; an sm_90 block takes at most " +
                        std::to_string(kMaxSharedBytes) + " in all");
    if (buffers.size() != f.pointers())
      throw std::logic_error("fake cuda: " + f.entry() + " takes " +
                             std::to_string(f.pointers()) + " pointers, the launch passed " +
                             std::to_string(buffers.size()));
    std::vector<void*> args(buffers.begin(), buffers.end());
    for (const double& p : params)
      args.push_back(const_cast<double*>(&p));
    ++state_->launches;
    // fills run (FakeCudaDevice::Work): the device checks' flags must read as clear
    if (state_->work == FakeCudaDevice::Work::count && buffers.size() > 1) return;
    state_->stream.catch_up();
    const DeviceMemoryAccess access("kernel " + f.entry(),
                                    std::vector<const void*>(buffers.begin(), buffers.end()));
    f.run()(args.data(), static_cast<unsigned>(std::min(grid, kMaxBlocks)),
            static_cast<unsigned>(block), static_cast<unsigned>(shared_bytes));
  }

  /// What a GPU would compile: NVRTC for sm_80 and sm_90, or sm_90a alone for an
  /// architecture-specific kernel (when NVRTC loads), failing on a
  /// compile error or any local memory (ptxas' stack frame or spills), as the corpus test does
  /// for its kernels; so every kernel a fake run prepares is also checked to compile cleanly.
  /// Exception: kernels computing in f64 (a CPU dtype; no GPU training runs in it), whose rows
  /// kept in registers spill a few bytes on sm_90 (softmax over 100 f64 values: 24 bytes);
  /// those are counted (FakeCudaDevice::f64_kernels_spilling) instead. Also exempt: a stack
  /// frame without spills in a kernel calling sin or cos, whose accurate range reduction
  /// (Payne-Hanek, taken only for |x| beyond ~1e5) keeps its 2/pi digits in local memory.
  /// Returns the kernel's static shared memory on sm_90 (0 when NVRTC is not there).
  int64_t check_with_nvrtc(const CudaSource& kernel) {
    const std::string& source = kernel.source;
    const std::string& entry = kernel.entry;
    int64_t static_shared = 0;
    bool f64_counted = false;
    if (!nvrtc_info().available) return static_shared;
    for (int arch : kernel.arch_specific ? std::vector<int>{90} : std::vector<int>{80, 90}) {
      const auto binary = CudaCompiler::instance().compile(
          source, entry + ".cu", {arch, true, {}, kernel.arch_specific});
      const auto usage = parse_ptxas_usage(binary->log, entry);
      if (!usage) {
        // Seen once on a GPU machine (H200, 2026-11-30) and never reproduced here: say all
        // that tells a cache entry, a PTX fallback and an empty log apart.
        const NvrtcInfo& nvrtc = nvrtc_info();
        const NvrtcStats stats = CudaCompiler::instance().stats();
        throw std::logic_error(
            "fake cuda: no ptxas report for " + entry + " on sm_" + std::to_string(arch) +
            " (NVRTC " + std::to_string(nvrtc.major) + "." + std::to_string(nvrtc.minor) +
            " from " + nvrtc.library + "; the binary: " + (binary->ptx ? "PTX" : "cubin") +
            " for " + std::to_string(binary->arch) + ", " + std::to_string(binary->log.size()) +
            "-byte log; compiler so far: " + std::to_string(stats.compiled) + " compiled, " +
            std::to_string(stats.memory_hits) + " memory hits, " +
            std::to_string(stats.disk_hits) + " disk hits, disk cache " +
            CudaCompiler::instance().disk_cache_dir().string() + "):\n" + binary->log +
            "\n--- source ---\n" + source);
      }
      if (arch == 90) static_shared = usage->shared_bytes;
      if (!usage->stack_frame && !usage->spill_stores && !usage->spill_loads) continue;
      bool calls_sin_or_cos = false;
      for (const char* fn : {"sinf(", "cosf(", "sin(", "cos("})
        for (size_t at = source.find(fn); at != std::string::npos; at = source.find(fn, at + 1))
          if (at > 0 && !std::isalnum(static_cast<unsigned char>(source[at - 1])) &&
              source[at - 1] != '_')
            calls_sin_or_cos = true;
      if (calls_sin_or_cos && !usage->spill_stores && !usage->spill_loads) continue;
      if (source.find(", compute f64\n") != std::string::npos) {
        if (!f64_counted) ++state_->f64_spilling;  // a kernel once, whichever spills
        f64_counted = true;
        continue;
      }
      throw std::logic_error("fake cuda: " + entry + " uses local memory on sm_" +
                               std::to_string(arch) + ":\n" + binary->log + source);
    }
    return static_shared;
  }

  // The architectures its kernels are checked to compile for are sm_80 and sm_90.
  int arch(int) override { return 90; }

  // cuBLASLt's semantics on the plan: D[i] = alpha·op(A[i])·op(B[i]) + beta·C[i], column-major,
  // sums accumulated in f64 and rounded once into C's type.
  void gemm(int, const GemmBatch& g, GemmMath math) override {
    const OperationTime timed;
    const CublasLtPlan p = plan_cublaslt_gemm(g, math);
    ++state_->gemms;
    if (p.empty || state_->work == FakeCudaDevice::Work::count) return;
    state_->stream.catch_up();
    const DeviceMemoryAccess access("a cuBLASLt GEMM", {p.a_ptr, p.b_ptr, p.c_ptr});
    const DType ta = dtype_of(p.a.data_type), tb = dtype_of(p.b.data_type),
                tc = dtype_of(p.c.data_type);
    const size_t sa = element_size(ta), sb = element_size(tb), sc = element_size(tc);
    auto at = [](const void* base, DType t, size_t size, const CublasLtLayout& l, int64_t batch,
                 int64_t r, int64_t c) {
      const int64_t i = batch * l.batch_stride + r + c * l.ld;
      return load_as_double(static_cast<const char*>(base) + i * static_cast<int64_t>(size), t);
    };
    const auto rows = static_cast<int64_t>(p.c.rows), cols = static_cast<int64_t>(p.c.cols);
    const auto inner = static_cast<int64_t>(p.trans_a ? p.a.rows : p.a.cols);
    // op(A)(i, l) and op(B)(l, j) of matrix t, as cuBLASLt reads them
    const auto op_a = [&](int64_t t, int64_t i, int64_t l) {
      return p.trans_a ? at(p.a_ptr, ta, sa, p.a, t, l, i) : at(p.a_ptr, ta, sa, p.a, t, i, l);
    };
    const auto op_b = [&](int64_t t, int64_t l, int64_t j) {
      return p.trans_b ? at(p.b_ptr, tb, sb, p.b, t, j, l) : at(p.b_ptr, tb, sb, p.b, t, l, j);
    };
    const auto store = [&](int64_t t, int64_t i, int64_t j, double sum) {
      char* d = static_cast<char*>(p.c_ptr) +
                (t * p.c.batch_stride + i + j * p.c.ld) * static_cast<int64_t>(sc);
      const double old = g.beta == 0 ? 0 : g.beta * load_as_double(d, tc);
      store_from_double(d, tc, g.alpha * sum + old);
    };
    for (int64_t t = 0; t < p.c.batch_count; ++t) {
      if (rows * cols * inner > kLargeGemm) {
        large_product(
            rows, cols, inner, [&](int64_t i, int64_t l) { return op_a(t, i, l); },
            [&](int64_t l, int64_t j) { return op_b(t, l, j); },
            [&](int64_t i, int64_t j, double sum) { store(t, i, j, sum); });
        continue;
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          double sum = 0;
          for (int64_t l = 0; l < inner; ++l)
            sum += op_a(t, i, l) * op_b(t, l, j);
          store(t, i, j, sum);
        }
    }
  }

 private:
  std::shared_ptr<FakeCudaDevice::State> state_;
};

}  // namespace

bool FakeCudaDevice::available(std::string* why) {
  return host_cuda_available(why);
}

FakeCudaDevice::FakeCudaDevice(Work work) : state_(std::make_shared<State>()) {
  state_->work = work;
  state_->backend = std::make_shared<HostMemory>(state_);
  register_backend(DeviceKind::cuda, state_->backend);
  set_cuda_execution(std::make_shared<EmulatedExecution>(state_));
}

FakeCudaDevice::~FakeCudaDevice() {
  set_cuda_execution(nullptr);
  // A tensor that outlives the fake still frees into its backend: keep the backends.
  static std::vector<std::shared_ptr<DeviceBackend>>* retired =
      new std::vector<std::shared_ptr<DeviceBackend>>;
  retired->push_back(std::move(state_->backend));
  register_backend(DeviceKind::cuda, nullptr);
}

int64_t FakeCudaDevice::kernels_prepared() const { return state_->prepared; }
int64_t FakeCudaDevice::launches() const { return state_->launches; }
int64_t FakeCudaDevice::gemms() const { return state_->gemms; }
int64_t FakeCudaDevice::bytes_in_use() const { return state_->bytes; }
int64_t FakeCudaDevice::pinned_bytes() const { return state_->pinned_bytes; }
int64_t FakeCudaDevice::async_copies() const { return state_->async_copies; }
int64_t FakeCudaDevice::bytes_to_device() const {
  return state_->bytes_to_device;
}
int64_t FakeCudaDevice::bytes_to_host() const {
  return state_->bytes_to_host;
}
int64_t FakeCudaDevice::f64_kernels_spilling() const { return state_->f64_spilling; }
double FakeCudaDevice::thread_cpu_seconds_in_operations() {
  return 1e-9 * t_operation_ns;
}
double FakeCudaDevice::thread_cpu_seconds() {
  return 1e-9 * thread_cpu_ns();
}

std::string wmma_unavailable_reason() {
  const NvrtcInfo& nvrtc = nvrtc_info();
  if (!nvrtc.available || nvrtc.mma_headers) return "";
  return "NVRTC's CUDA headers (" + (nvrtc.include_dir.empty() ? "none" : nvrtc.include_dir) +
         ") lack crt/mma.h: the tensor-core attention kernels cannot compile";
}

}  // namespace ein::testing
