// The hardware table behind ein/runtime/hardware.h, with the datasheet each row comes from.
// Every peak is the dense figure: NVIDIA prints tensor-core peaks "with sparsity" (2:4
// structured sparsity), and the dense peak is half of that printed number.
#include <ein/hardware.h>

#include <algorithm>
#include <cctype>

#include "ein/errors.h"

namespace ein {
namespace {

// Order of each peak array: fp64, fp32, tf32, bf16, fp16, fp8 (MathMode).
// fp64 is the FP64 Tensor Core figure (what a DGEMM can reach); fp32 is the non-tensor
// FP32 figure (the tensor-core path for fp32 inputs is tf32, its own column).
constexpr std::array<HardwareProfile, 4> kProfiles{{
    // NVIDIA A100 Tensor Core GPU datasheet (2021), "A100 80GB SXM" column: FP64 TC 19.5,
    // FP32 19.5, TF32 TC 156 (312 sparse), BF16/FP16 TC 312 (624 sparse) TFLOPS; no FP8;
    // 80GB HBM2e at 2,039 GB/s.
    {"A100 SXM 80GB",
     "a100-sxm-80gb",
     {19.5e12, 19.5e12, 156e12, 312e12, 312e12, 0},
     80e9,
     2039e9,
     "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM)"},
    // NVIDIA H100 Tensor Core GPU datasheet, "H100 SXM" column: FP64 TC 67, FP32 67, TF32 TC
    // 989*, BF16/FP16 TC 1,979*, FP8 TC 3,958* TFLOPS (* = with sparsity, halved here);
    // 80GB at 3.35 TB/s. (Stanford CS336 writes the fp32 peak as 67.5e12; the datasheet: 67.)
    {"H100 SXM",
     "h100-sxm",
     {67e12, 67e12, 494.5e12, 989.5e12, 989.5e12, 1979e12},
     80e9,
     3.35e12,
     "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM)"},
    // Same datasheet, "H100 PCIe" column: FP64 TC 51, FP32 51, TF32 TC 756*, BF16/FP16 TC
    // 1,513*, FP8 TC 3,026* TFLOPS; 80GB at 2 TB/s.
    {"H100 PCIe",
     "h100-pcie",
     {51e12, 51e12, 378e12, 756.5e12, 756.5e12, 1513e12},
     80e9,
     2e12,
     "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe)"},
    // NVIDIA H200 Tensor Core GPU datasheet, "H200 SXM" column: the H100 SXM's compute
    // (FP64 TC 67, FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958*); 141GB HBM3e at 4.8 TB/s.
    {"H200 SXM",
     "h200-sxm",
     {67e12, 67e12, 494.5e12, 989.5e12, 989.5e12, 1979e12},
     141e9,
     4.8e12,
     "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)"},
}};

struct Alias {
  std::string_view alias;
  std::string_view key;
};

// The short names people type; a bare model name means its SXM part, as in the lecture.
constexpr std::array<Alias, 10> kAliases{{
    {"a100", "a100-sxm-80gb"},
    {"a100-sxm", "a100-sxm-80gb"},
    {"a100-80gb", "a100-sxm-80gb"},
    {"h100", "h100-sxm"},
    {"h100-sxm5", "h100-sxm"},
    {"h100-80gb", "h100-sxm"},
    {"h100pcie", "h100-pcie"},
    {"h200", "h200-sxm"},
    {"h200-141gb", "h200-sxm"},
    {"h200sxm", "h200-sxm"},
}};

std::string normalize(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '_' || c == ' ') c = '-';
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

constexpr std::array<std::string_view, kMathModeCount> kModeNames{"fp64", "fp32", "tf32",
                                                                  "bf16", "fp16", "fp8"};

}  // namespace

std::string_view math_mode_name(MathMode mode) {
  return kModeNames[static_cast<int>(mode)];
}

std::optional<MathMode> parse_math_mode(std::string_view name) {
  const std::string n = normalize(name);
  for (int i = 0; i < kMathModeCount; ++i)
    if (n == kModeNames[i]) return static_cast<MathMode>(i);
  if (n == "f64" || n == "float64" || n == "double") return MathMode::fp64;
  if (n == "f32" || n == "float32" || n == "float") return MathMode::fp32;
  if (n == "bfloat16") return MathMode::bf16;
  if (n == "f16" || n == "float16" || n == "half") return MathMode::fp16;
  if (n == "f8" || n == "f8e4m3" || n == "f8e5m2" || n == "float8") return MathMode::fp8;
  return std::nullopt;
}

std::span<const HardwareProfile> hardware_profiles() {
  return kProfiles;
}

const HardwareProfile* find_hardware(std::string_view name) {
  std::string n = normalize(name);
  for (const Alias& a : kAliases)
    if (n == a.alias) n = std::string(a.key);
  for (const HardwareProfile& p : kProfiles)
    if (n == p.key) return &p;
  return nullptr;
}

const HardwareProfile& hardware(std::string_view name) {
  if (const HardwareProfile* p = find_hardware(name)) return *p;
  throw RuntimeError("unknown hardware '" + std::string(name) +
                     "'; known: " + known_hardware_names());
}

std::string known_hardware_names() {
  std::string out;
  for (const HardwareProfile& p : kProfiles) {
    if (!out.empty()) out += "; ";
    for (const Alias& a : kAliases)
      if (a.key == p.key) out += std::string(a.alias) + ", ";
    out += std::string(p.key) + " (" + std::string(p.name) + ")";
  }
  return out;
}

const HardwareProfile* hardware_for_gpu(std::string_view driver_name) {
  std::string n(driver_name);
  for (char& c : n)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool pcie = n.find("pcie") != std::string::npos;
  for (const char* model : {"h200", "h100", "a100"})
    if (n.find(model) != std::string::npos)
      return find_hardware(std::string(model) + (pcie && std::string(model) == "h100" ? "pcie" : ""));
  return nullptr;
}

}  // namespace ein
