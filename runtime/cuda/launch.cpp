// Module loading and kernel launches (runtime/cuda/launch.h). Modules are cached per (device,
// image bytes) and functions per (module, entry); both live as long as the process. Graph
// execution loads each function once (runtime/cuda/execution.cpp) and launches the handle.
#include "runtime/cuda/launch.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ein {
namespace {

struct Loaded {
  std::mutex mutex;
  std::map<std::pair<int, std::string>, CuModule> modules;
  std::map<std::pair<CuModule, std::string>, CuFunction> functions;
  std::map<CuFunction, int> shared_allowed;  // dynamic shared bytes each function may take
};

Loaded& loaded() {
  static Loaded* l = new Loaded;  // never destroyed: modules outlive static destruction
  return *l;
}

}  // namespace

CuFunction load_cuda_function(const CudaBinary& binary, std::string_view entry, int device) {
  const CudaDriverApi& api = cuda_driver();
  Loaded& l = loaded();
  std::lock_guard lock(l.mutex);
  CuModule& module = l.modules[{device, binary.image}];
  if (!module) {
    // cuModuleLoadData reads a cubin, or PTX text up to its NUL (std::string keeps one).
    const int r = api.module_load_data(&module, binary.image.c_str());
    if (r != 0) {
      l.modules.erase({device, binary.image});
      check_cuda(r, std::string("cuModuleLoadData(") + (binary.ptx ? "PTX" : "cubin") + " for " +
                        (binary.ptx ? "compute_" : "sm_") + std::to_string(binary.arch) +
                        " on cuda:" + std::to_string(device) + ", device sm_" +
                        std::to_string(cuda_device_properties(device).arch()) + ")");
    }
  }
  CuFunction& function = l.functions[{module, std::string(entry)}];
  if (!function) {
    const int r = api.module_get_function(&function, module, std::string(entry).c_str());
    if (r != 0) {
      l.functions.erase({module, std::string(entry)});
      check_cuda(r, "cuModuleGetFunction(" + std::string(entry) + ")");
    }
  }
  return function;
}

void launch_cuda_kernel(const CudaBinary& binary, std::string_view entry, int64_t grid, int block,
                        std::span<void* const> buffers, std::span<const double> params,
                        const Stream& stream) {
  if (grid == 0) return;
  make_cuda_context_current(stream.device());
  launch_cuda_function(load_cuda_function(binary, entry, stream.device()), entry, grid, block,
                       buffers, params, stream);
}

void launch_cuda_function(CuFunction f, std::string_view entry, int64_t grid, int block,
                          std::span<void* const> buffers, std::span<const double> params,
                          const Stream& stream, int shared_bytes) {
  if (grid == 0) return;
  const int device = stream.device();
  make_cuda_context_current(device);
  const int64_t max_grid = cuda_device_properties(device).max_grid_x;
  const auto blocks = static_cast<unsigned>(std::min(grid, max_grid));
  // cuLaunchKernel takes the address of each argument's value.
  std::vector<void*> values(buffers.begin(), buffers.end());
  std::vector<double> scalars(params.begin(), params.end());
  std::vector<void*> args;
  for (void*& v : values)
    args.push_back(&v);
  for (double& s : scalars)
    args.push_back(&s);
  // Above the 48 KB every kernel may take, a function must be allowed its dynamic shared
  // memory first (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), once for the most it asks.
  constexpr int kMaxDynamicSharedSizeBytes = 8, kDefaultShared = 48 * 1024;
  if (shared_bytes > kDefaultShared) {
    Loaded& l = loaded();
    std::lock_guard lock(l.mutex);
    int& allowed = l.shared_allowed[f];
    if (shared_bytes > allowed) {
      check_cuda(cuda_driver().func_set_attribute(f, kMaxDynamicSharedSizeBytes, shared_bytes),
                 "cuFuncSetAttribute(" + std::string(entry) + ", " +
                     std::to_string(shared_bytes) + " bytes of dynamic shared memory)");
      allowed = shared_bytes;
    }
  }
  check_cuda(cuda_driver().launch_kernel(f, blocks, 1, 1, static_cast<unsigned>(block), 1, 1,
                                         static_cast<unsigned>(shared_bytes), stream.handle(),
                                         args.data(), nullptr),
             "cuLaunchKernel(" + std::string(entry) + ", grid " + std::to_string(blocks) +
                 ", block " + std::to_string(block) +
                 (shared_bytes ? ", " + std::to_string(shared_bytes) + " shared bytes" : "") + ")");
}

}  // namespace ein
