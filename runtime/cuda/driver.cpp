// The CUDA driver through dlopen (runtime/cuda/driver.h). Steps of cuda_driver_info():
//   1. dlopen libcuda.so.1, or report that no driver is installed;
//   2. dlsym every entry point of CudaDriverApi, or report the ones this driver lacks;
//   3. cuInit(0) and cuDeviceGetCount, or report the CUresult (no device, a stub library);
// then the primary contexts are retained lazily, one per device, and set current per thread.
#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <array>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/dynamic_library.h"

namespace ein {
namespace {

// The CUresult names for when cuGetErrorName itself fails (the toolkit's stub libcuda answers
// every call, this one included, with CUDA_ERROR_STUB_LIBRARY). From cuda.h (CUDA 13).
struct ResultName {
  int code;
  const char* name;
  const char* text;
};
constexpr ResultName kResultNames[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

CudaDriverApi g_api;  // filled once, by load_cuda_driver() under cuda_driver_info()'s init

// Device attributes (cuda.h's CUdevice_attribute).
constexpr int kAttrMaxGridX = 5;
constexpr int kAttrSmCount = 16;
constexpr int kAttrMajor = 75;
constexpr int kAttrMinor = 76;
constexpr int kMaxDevices = 64;

struct Contexts {
  std::mutex mutex;
  std::array<CuContext, kMaxDevices> primary{};
  std::array<std::unique_ptr<CudaDeviceProperties>, kMaxDevices> properties;
};

Contexts& contexts() {
  static Contexts c;
  return c;
}

void check_index(int index) {
  const CudaDriverInfo& info = cuda_driver_info();
  if (!info.available) throw DeviceError(info.reason);
  if (index < 0 || index >= info.device_count || index >= kMaxDevices)
    throw DeviceError("cuda:" + std::to_string(index) + " does not exist: the driver sees " +
                      std::to_string(info.device_count) + " CUDA device(s)");
}

}  // namespace

namespace detail {

CudaDriverInfo load_cuda_driver(const std::vector<std::string>& candidates, CudaDriverApi& api) {
  CudaDriverInfo info;
  DynamicLibrary lib = DynamicLibrary::open(candidates);
  if (!lib.handle) {
    info.reason = "no CUDA driver: libcuda.so.1 not found (the CUDA backend needs an NVIDIA "
                  "driver; everything on ein::cpu() works without one); tried:" + lib.tried;
    return info;
  }
  info.library = lib.name;
  CudaDriverApi loaded;
  const auto sym = [&](auto& fn, const char* name) { lib.bind(fn, name); };
  sym(loaded.init, "cuInit");
  sym(loaded.driver_get_version, "cuDriverGetVersion");
  sym(loaded.get_error_name, "cuGetErrorName");
  sym(loaded.get_error_string, "cuGetErrorString");
  sym(loaded.device_get_count, "cuDeviceGetCount");
  sym(loaded.device_get, "cuDeviceGet");
  sym(loaded.device_get_name, "cuDeviceGetName");
  sym(loaded.device_get_attribute, "cuDeviceGetAttribute");
  sym(loaded.device_total_mem, "cuDeviceTotalMem_v2");
  sym(loaded.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
  sym(loaded.ctx_set_current, "cuCtxSetCurrent");
  sym(loaded.ctx_synchronize, "cuCtxSynchronize");
  sym(loaded.mem_alloc, "cuMemAlloc_v2");
  sym(loaded.mem_free, "cuMemFree_v2");
  sym(loaded.mem_get_info, "cuMemGetInfo_v2");
  sym(loaded.memcpy_htod, "cuMemcpyHtoD_v2");
  sym(loaded.memcpy_dtoh, "cuMemcpyDtoH_v2");
  sym(loaded.memcpy_dtod, "cuMemcpyDtoD_v2");
  sym(loaded.memcpy_htod_async, "cuMemcpyHtoDAsync_v2");
  sym(loaded.memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2");
  sym(loaded.memcpy_dtod_async, "cuMemcpyDtoDAsync_v2");
  sym(loaded.mem_host_alloc, "cuMemHostAlloc");
  sym(loaded.mem_free_host, "cuMemFreeHost");
  sym(loaded.stream_create, "cuStreamCreate");
  sym(loaded.stream_destroy, "cuStreamDestroy_v2");
  sym(loaded.stream_synchronize, "cuStreamSynchronize");
  sym(loaded.module_load_data, "cuModuleLoadData");
  sym(loaded.module_unload, "cuModuleUnload");
  sym(loaded.module_get_function, "cuModuleGetFunction");
  sym(loaded.func_set_attribute, "cuFuncSetAttribute");
  sym(loaded.launch_kernel, "cuLaunchKernel");
  // A driver that cannot be used is unloaded, so a later dlopen of its soname does not find
  // it already loaded (the toolkit's stub is named libcuda.so.1 too).
  auto unusable = [&](std::string reason) {
    info.reason = std::move(reason);
    ::dlclose(lib.handle);
    return info;
  };
  if (!lib.missing.empty())
    return unusable("the CUDA driver " + info.library + " lacks " + lib.missing +
                    " (a driver older than CUDA 11?)");
  // Until the table is installed, cuda_result_text() must read names through `loaded`.
  auto text = [&](int result) {
    const char* name = nullptr;
    const char* what = nullptr;
    if (loaded.get_error_name(result, &name) == 0 && name &&
        loaded.get_error_string(result, &what) == 0 && what)
      return std::string(name) + " (" + std::to_string(result) + "): " + what;
    return cuda_result_text(result);
  };
  if (int r = loaded.init(0); r != 0)
    return unusable("the CUDA driver " + info.library +
                    " could not start: cuInit failed: " + text(r));
  loaded.driver_get_version(&info.version);
  if (int r = loaded.device_get_count(&info.device_count); r != 0)
    return unusable("the CUDA driver " + info.library + ": cuDeviceGetCount failed: " + text(r));
  if (info.device_count == 0)
    return unusable("the CUDA driver " + info.library + " sees no CUDA device");
  api = loaded;
  info.available = true;
  return info;
}

}  // namespace detail

const CudaDriverInfo& cuda_driver_info() {
  static const CudaDriverInfo info = detail::load_cuda_driver({"libcuda.so.1"}, g_api);
  return info;
}

bool cuda_is_available() {
  return cuda_driver_info().available;
}

const CudaDriverApi& cuda_driver() {
  const CudaDriverInfo& info = cuda_driver_info();
  if (!info.available) throw DeviceError(info.reason);
  return g_api;
}

std::string cuda_result_text(int result) {
  if (g_api.get_error_name) {
    const char* name = nullptr;
    const char* what = nullptr;
    if (g_api.get_error_name(result, &name) == 0 && name &&
        g_api.get_error_string(result, &what) == 0 && what)
      return std::string(name) + " (" + std::to_string(result) + "): " + what;
  }
  for (const ResultName& r : kResultNames)
    if (r.code == result)
      return std::string(r.name) + " (" + std::to_string(result) + "): " + r.text;
  return "CUresult " + std::to_string(result);
}

void check_cuda(int result, std::string_view call) {
  if (result != 0) throw DeviceError(std::string(call) + " failed: " + cuda_result_text(result));
}

const CudaDeviceProperties& cuda_device_properties(int index) {
  check_index(index);
  Contexts& c = contexts();
  std::lock_guard lock(c.mutex);
  if (!c.properties[index]) {
    const CudaDriverApi& api = g_api;
    auto props = std::make_unique<CudaDeviceProperties>();
    int device = 0;
    check_cuda(api.device_get(&device, index), "cuDeviceGet");
    char name[256] = {};
    check_cuda(api.device_get_name(name, sizeof name, device), "cuDeviceGetName");
    props->name = name;
    check_cuda(api.device_get_attribute(&props->major, kAttrMajor, device), "cuDeviceGetAttribute");
    check_cuda(api.device_get_attribute(&props->minor, kAttrMinor, device), "cuDeviceGetAttribute");
    check_cuda(api.device_get_attribute(&props->sm_count, kAttrSmCount, device),
               "cuDeviceGetAttribute");
    check_cuda(api.device_get_attribute(&props->max_grid_x, kAttrMaxGridX, device),
               "cuDeviceGetAttribute");
    size_t bytes = 0;
    check_cuda(api.device_total_mem(&bytes, device), "cuDeviceTotalMem");
    props->total_memory = static_cast<int64_t>(bytes);
    c.properties[index] = std::move(props);
  }
  return *c.properties[index];
}

void make_cuda_context_current(int index) {
  // The context last made current on this thread, so the common case makes no driver call.
  // Only ein and libraries using the same primary contexts (cudart, cuBLASLt) set it here.
  thread_local int current = -1;
  if (current == index) return;
  check_index(index);
  CuContext context = nullptr;
  {
    Contexts& c = contexts();
    std::lock_guard lock(c.mutex);
    if (!c.primary[index]) {
      int device = 0;
      check_cuda(g_api.device_get(&device, index), "cuDeviceGet");
      // Retained for the life of the process: contexts are never released, as in PyTorch.
      check_cuda(g_api.primary_ctx_retain(&c.primary[index], device),
                 "cuDevicePrimaryCtxRetain(cuda:" + std::to_string(index) + ")");
    }
    context = c.primary[index];
  }
  check_cuda(g_api.ctx_set_current(context), "cuCtxSetCurrent");
  current = index;
}

}  // namespace ein
