// The CUDA driver API, loaded with dlopen("libcuda.so.1") at first use, so the same binary
// runs where no NVIDIA driver is installed and only asking for a GPU fails. The handful of
// driver types and entry points ein calls are declared here (nothing includes cuda.h or links
// libcuda); every failing call becomes a DeviceError naming the call and the driver's
// CUresult name and text. It also owns each device's primary context, made current per
// thread. It allocates nothing and launches nothing (cuda_backend.h, cuda_launch.h do).
//
// The entry points are looked up by their exported names, the versioned ones the CUDA 12/13
// headers select (cuMemAlloc_v2, cuStreamDestroy_v2, ...), which every driver since CUDA 11
// exports; the per-thread-default-stream variants (_ptds) are not used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <ein/errors.h>

namespace ein {

/// Opaque driver handles, ABI-compatible with cuda.h's CUcontext, CUstream, CUmodule and
/// CUfunction (pointers to incomplete structs) but distinct types, so cuda.h is never needed.
using CuContext = struct CuContextOpaque*;
using CuStream = struct CuStreamOpaque*;  ///< nullptr: the legacy default stream
using CuModule = struct CuModuleOpaque*;
using CuFunction = struct CuFunctionOpaque*;
/// A device address (cuda.h's CUdeviceptr).
using CuDevicePtr = unsigned long long;

/// The driver entry points ein calls, as cuda.h declares them; each returns a CUresult
/// (0 = CUDA_SUCCESS). Devices are CUdevice ordinals (int).
struct CudaDriverApi {
  int (*init)(unsigned flags) = nullptr;
  int (*driver_get_version)(int* version) = nullptr;
  int (*get_error_name)(int result, const char** name) = nullptr;
  int (*get_error_string)(int result, const char** text) = nullptr;
  int (*device_get_count)(int* count) = nullptr;
  int (*device_get)(int* device, int ordinal) = nullptr;
  int (*device_get_name)(char* name, int length, int device) = nullptr;
  int (*device_get_attribute)(int* value, int attribute, int device) = nullptr;
  int (*device_total_mem)(size_t* bytes, int device) = nullptr;
  int (*primary_ctx_retain)(CuContext* context, int device) = nullptr;
  int (*ctx_set_current)(CuContext context) = nullptr;
  int (*ctx_synchronize)() = nullptr;
  int (*mem_alloc)(CuDevicePtr* ptr, size_t bytes) = nullptr;
  int (*mem_free)(CuDevicePtr ptr) = nullptr;
  int (*mem_get_info)(size_t* free, size_t* total) = nullptr;
  int (*memcpy_htod)(CuDevicePtr dst, const void* src, size_t bytes) = nullptr;
  int (*memcpy_dtoh)(void* dst, CuDevicePtr src, size_t bytes) = nullptr;
  int (*memcpy_dtod)(CuDevicePtr dst, CuDevicePtr src, size_t bytes) = nullptr;
  int (*memcpy_htod_async)(CuDevicePtr dst, const void* src, size_t bytes, CuStream) = nullptr;
  int (*memcpy_dtoh_async)(void* dst, CuDevicePtr src, size_t bytes, CuStream) = nullptr;
  int (*memcpy_dtod_async)(CuDevicePtr dst, CuDevicePtr src, size_t bytes, CuStream) = nullptr;
  int (*mem_host_alloc)(void** ptr, size_t bytes, unsigned flags) = nullptr;
  int (*mem_free_host)(void* ptr) = nullptr;
  int (*stream_create)(CuStream* stream, unsigned flags) = nullptr;
  int (*stream_destroy)(CuStream stream) = nullptr;
  int (*stream_synchronize)(CuStream stream) = nullptr;
  int (*module_load_data)(CuModule* module, const void* image) = nullptr;
  int (*module_unload)(CuModule module) = nullptr;
  int (*module_get_function)(CuFunction* function, CuModule module, const char* name) = nullptr;
  int (*func_set_attribute)(CuFunction f, int attribute, int value) = nullptr;
  int (*launch_kernel)(CuFunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                       unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                       CuStream stream, void** params, void** extra) = nullptr;
};

/// Where the driver was found and what it offers, or why it cannot be used.
struct CudaDriverInfo {
  bool available = false;  ///< loaded, cuInit succeeded and at least one device exists
  std::string reason;      ///< when not available: what was tried and what failed
  std::string library;     ///< the file that was loaded ("" when none)
  int version = 0;         ///< cuDriverGetVersion: 13000 for CUDA 13.0
  int device_count = 0;    ///< devices the driver sees
};

/// The driver, loaded and initialised on the first call (thread-safe; the same object after).
const CudaDriverInfo& cuda_driver_info();

/// Whether a CUDA driver with at least one device is present (like torch.cuda.is_available()).
bool cuda_is_available();

/// The loaded entry points; throws DeviceError with cuda_driver_info().reason when there are none.
const CudaDriverApi& cuda_driver();

/// "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory": the driver's name and text for a CUresult,
/// from a built-in table of the common codes when the driver cannot say (a stub library).
std::string cuda_result_text(int result);

/// Throws DeviceError("<call> failed: <cuda_result_text>") unless `result` is CUDA_SUCCESS.
void check_cuda(int result, std::string_view call);

/// Facts about one device, queried once.
struct CudaDeviceProperties {
  std::string name;                                ///< "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;                        ///< compute capability
  int sm_count = 0;                                ///< streaming multiprocessors
  int max_grid_x = 0;                              ///< the largest gridDim.x
  int64_t total_memory = 0;                        ///< bytes of device memory
  int arch() const { return major * 10 + minor; }  ///< 90 for sm_90, as NVRTC's options take it
};

/// The properties of device `index` (DeviceError when it does not exist or there is no driver).
const CudaDeviceProperties& cuda_device_properties(int index);

/// Makes device `index`'s primary context (retained on first use, kept for the process, the
/// context the CUDA runtime and cuBLASLt use too) current on the calling thread. Every
/// function that calls the driver for a device calls this first.
void make_cuda_context_current(int index);

namespace detail {
/// Loads and initialises the driver from the first of `candidates` dlopen accepts, filling
/// `api` on success; cuda_driver_info() calls it with {"libcuda.so.1"}. Exposed so tests can
/// see the reports for a missing library and for a driver that cannot start.
CudaDriverInfo load_cuda_driver(const std::vector<std::string>& candidates, CudaDriverApi& api);
}  // namespace detail

}  // namespace ein
