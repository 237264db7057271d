// The driver's CudaExecution (runtime/cuda/execution.h): NVRTC for the device's architecture,
// the module loaded once, launches on the thread's current stream, GEMMs through cuBLASLt.
#include "runtime/cuda/execution.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/cuda/launch.h"
#include "runtime/cuda/nvrtc.h"

namespace ein {
namespace {

class DriverFunction final : public CudaFunction {
 public:
  DriverFunction(std::string entry, CuFunction function)
      : entry_(std::move(entry)), function_(function) {}
  const std::string& entry() const override { return entry_; }
  CuFunction function() const { return function_; }

 private:
  std::string entry_;
  CuFunction function_;
};

class DriverExecution final : public CudaExecution {
 public:
  std::shared_ptr<const CudaFunction> prepare(int device, const CudaSource& kernel) override {
    CudaCompileOptions options;
    options.arch = cuda_device_properties(device).arch();
    options.arch_specific = kernel.arch_specific;
    const auto binary = CudaCompiler::instance().compile(kernel.source, kernel.entry, options);
    return std::make_shared<DriverFunction>(kernel.entry,
                                            load_cuda_function(*binary, kernel.entry, device));
  }
  void launch(int device, const CudaFunction& function, int64_t grid, int block,
              std::span<void* const> buffers, std::span<const double> params,
              int shared_bytes) override {
    const auto& f = static_cast<const DriverFunction&>(function);
    launch_cuda_function(f.function(), f.entry(), grid, block, buffers, params,
                         Stream::current(device), shared_bytes);
  }
  void gemm(int device, const GemmBatch& g, GemmMath math) override {
    cublaslt_gemm(g, math, Stream::current(device));
  }
  int arch(int device) override { return cuda_device_properties(device).arch(); }
};

struct Installed {
  std::mutex mutex;
  std::shared_ptr<CudaExecution> execution;
  std::atomic<uint64_t> generation{0};
};

Installed& installed() {
  static Installed* i = new Installed;  // never destroyed: kernels may run during exit
  return *i;
}

GemmMath initial_math() {
  const char* v = std::getenv("EIN_CUDA_TF32");
  return v && std::strcmp(v, "0") != 0 && *v ? GemmMath::tf32 : GemmMath::exact;
}

std::atomic<GemmMath>& gemm_math() {
  static std::atomic<GemmMath> math{initial_math()};
  return math;
}

}  // namespace

CudaExecution& cuda_execution() {
  Installed& i = installed();
  std::lock_guard lock(i.mutex);
  if (!i.execution) i.execution = std::make_shared<DriverExecution>();
  return *i.execution;
}

void set_cuda_execution(std::shared_ptr<CudaExecution> execution) {
  Installed& i = installed();
  std::lock_guard lock(i.mutex);
  i.execution = std::move(execution);
  ++i.generation;
}

uint64_t cuda_execution_generation() {
  return installed().generation.load();
}

GemmMath cuda_gemm_math() {
  return gemm_math().load();
}

void set_cuda_gemm_math(GemmMath math) {
  gemm_math().store(math);
}

}  // namespace ein
