// Where a Trainer runs: the device a `--device` spec names, checked against the CUDA driver
// (a missing driver or GPU is the user's to fix, so a UserError with the driver's reason), and
// the GPU's name for the hardware table. It selects; it does not initialise kernels or memory.
#include <string>

#include <ein/diagnostic.h>
#include <ein/errors.h>
#include <ein/trainer.h>
#include <fmt/format.h>

#include "runtime/cuda/driver.h"

namespace ein {

Device select_device(std::string_view spec) {
  Device device;
  try {
    // auto: the GPU when there is one (the same command uses it), else the CPU.
    device = spec == "auto" ? (cuda_is_available() ? cuda(0) : cpu()) : parse_device(spec);
  } catch (const RuntimeError&) {
    throw UserError(fmt::format("--device {}: expected auto, cpu, cuda or cuda:N", spec));
  }
  if (device.kind == DeviceKind::cuda) {
    if (!cuda_is_available())
      throw UserError(fmt::format("--device {}: {}", spec, cuda_driver_info().reason));
    if (device.index >= cuda_driver_info().device_count)
      throw UserError(fmt::format("--device {}: the driver sees {} GPU(s)", spec,
                                  cuda_driver_info().device_count));
  }
  return device;
}

std::string device_name(Device device) {
  if (device.kind != DeviceKind::cuda) return "cpu";
  return cuda_device_properties(device.index).name;
}

}  // namespace ein
