// Hardware profiles for napkin math: the dense peak FLOP/s per math mode, memory size and
// memory bandwidth of the data-centre GPUs that `ein estimate` knows. The figures are copied
// from NVIDIA's datasheets, never the 2:4 structured-sparsity ones; this file describes
// devices, it does not detect or query them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ein {

/// The arithmetic a peak figure is for; tf32 and fp8 are tensor-core modes, not storage dtypes.
enum class MathMode : uint8_t { fp64, fp32, tf32, bf16, fp16, fp8 };
/// How many MathMode values there are (the size of a profile's peak table).
inline constexpr int kMathModeCount = 6;

/// "fp64", "fp32", "tf32", "bf16", "fp16" or "fp8".
std::string_view math_mode_name(MathMode mode);
/// Parses a math mode name; also accepts "f32", "float32", "bfloat16", "half", "f8" and so on.
std::optional<MathMode> parse_math_mode(std::string_view name);

/// One device. Bytes are decimal as datasheets print them (80 GB = 80e9 bytes, 3.35 TB/s =
/// 3.35e12 bytes/s); the physical HBM of an "80GB" part is 80 GiB, about 7% more.
struct HardwareProfile {
  std::string_view name;                          ///< display name, e.g. "H100 SXM"
  std::string_view key;                           ///< canonical lookup name, e.g. "h100-sxm"
  std::array<double, kMathModeCount> peak_flops;  ///< dense FLOP/s by MathMode; 0 = unsupported
  double memory_bytes;                            ///< device memory in bytes (decimal GB)
  double memory_bandwidth;                        ///< memory bandwidth in bytes per second
  std::string_view source;                        ///< the datasheet the numbers come from

  /// The dense peak for `mode`, or 0 when the device has no such arithmetic.
  double peak(MathMode mode) const { return peak_flops[static_cast<int>(mode)]; }
};

/// Every known profile, in table order.
std::span<const HardwareProfile> hardware_profiles();
/// The profile for a name or alias (case-insensitive; '_' and ' ' read as '-'), or nullptr.
const HardwareProfile* find_hardware(std::string_view name);
/// Like find_hardware, but an unknown name throws RuntimeError listing the known names.
const HardwareProfile& hardware(std::string_view name);
/// The profile of a GPU from the name its driver reports ("NVIDIA H100 80GB HBM3" → H100 SXM,
/// "NVIDIA H100 PCIe" → H100 PCIe, "NVIDIA H200" → H200 SXM, "NVIDIA A100-SXM4-80GB" → A100),
/// or nullptr for a GPU the table does not have.
const HardwareProfile* hardware_for_gpu(std::string_view driver_name);
/// The accepted names, one entry per device: "a100, a100-sxm, a100-80gb (A100 SXM 80GB); ...".
std::string known_hardware_names();

}  // namespace ein
