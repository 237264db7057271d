// ein::FlopCounter: the totals, the derived rates (FLOP/s, MFU, HFU) and the text report.
#include <ein/flop_counter.h>

#include <array>
#include <cstdarg>
#include <cstdio>

#include "runtime/counters.h"

namespace ein {
namespace {

constexpr std::array<std::string_view, kCostPhaseCount> kPhaseNames{"forward", "recompute",
                                                                    "input_grad", "weight_grad"};

/// printf into a std::string (the runtime does not link fmt).
std::string format(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* f, ...) {
  char buf[512];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof(buf), f, args);
  va_end(args);
  return buf;
}

/// 1234567 → "1.23M"; keeps the table narrow without hiding the magnitude.
std::string si(double v) {
  constexpr std::array<const char*, 6> kUnits{"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (v >= 1000 && u + 1 < static_cast<int>(kUnits.size()))
    v /= 1000, ++u;
  return u == 0 ? format("%.0f", v) : format("%.3g%s", v, kUnits[u]);
}

std::string row(std::string_view name, const CostTotals& c) {
  const double bytes = static_cast<double>(c.bytes_read + c.bytes_written);
  const std::string intensity =
      bytes > 0 ? format("%.2f", static_cast<double>(c.flops) / bytes) : std::string("-");
  return format("  %-40.*s %10s %10s %10s %10s %8lld %8s\n", static_cast<int>(name.size()),
                name.data(), si(static_cast<double>(c.flops)).c_str(),
                si(static_cast<double>(c.matmul_flops)).c_str(),
                si(static_cast<double>(c.bytes_read)).c_str(),
                si(static_cast<double>(c.bytes_written)).c_str(), static_cast<long long>(c.kernels),
                intensity.c_str());
}

}  // namespace

std::string_view cost_phase_name(CostPhase phase) {
  return kPhaseNames[static_cast<int>(phase)];
}

CostTotals& CostTotals::operator+=(const CostTotals& o) {
  flops += o.flops;
  matmul_flops += o.matmul_flops;
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  kernels += o.kernels;
  return *this;
}

MathMode math_mode_of(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return MathMode::fp64;
    case DType::bf16:
      return MathMode::bf16;
    case DType::f16:
      return MathMode::fp16;
    case DType::f8e4m3:
    case DType::f8e5m2:
      return MathMode::fp8;
    default:
      return MathMode::fp32;
  }
}

FlopCounter::FlopCounter() : start_(std::chrono::steady_clock::now()) {
  detail::push_counter(this);
}

FlopCounter::~FlopCounter() {
  detail::pop_counter(this);
}

void FlopCounter::add(std::string_view origin, CostPhase phase, const CostTotals& cost) {
  totals_ += cost;
  phases_[static_cast<int>(phase)] += cost;
  auto it = origins_.find(origin);
  if (it == origins_.end()) it = origins_.emplace(std::string(origin), CostTotals{}).first;
  it->second += cost;
}

double FlopCounter::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double FlopCounter::flops_per_second() const {
  const double s = seconds();
  return s > 0 ? static_cast<double>(totals_.flops) / s : 0;
}

double utilization(double flops, double seconds, const HardwareProfile& hw, DType dtype) {
  const double peak = hw.peak(math_mode_of(dtype));
  return peak > 0 && seconds > 0 ? flops / seconds / peak : 0;
}

double FlopCounter::mfu(const HardwareProfile& hw, DType dtype) const {
  const auto model_flops = totals_.flops - phase(CostPhase::recompute).flops;
  return utilization(static_cast<double>(model_flops), seconds(), hw, dtype);
}

double FlopCounter::hfu(const HardwareProfile& hw, DType dtype) const {
  return utilization(static_cast<double>(totals_.flops), seconds(), hw, dtype);
}

void FlopCounter::reset() {
  totals_ = {};
  phases_ = {};
  origins_.clear();
  start_ = std::chrono::steady_clock::now();
}

std::string FlopCounter::report() const {
  std::string out = format("%s; bytes: each tensor read or written once; %.6f s, %s FLOP/s\n",
                           kFlopConvention.data(), seconds(), si(flops_per_second()).c_str());
  out += format("  %-40s %10s %10s %10s %10s %8s %8s\n", "", "FLOPs", "matmul", "read B",
                "written B", "kernels", "FLOP/B");
  out += row("total", totals_);
  for (int p = 0; p < kCostPhaseCount; ++p)
    if (phases_[p] != CostTotals{}) out += row("phase " + std::string(kPhaseNames[p]), phases_[p]);
  for (const auto& [origin, c] : origins_)
    out += row(origin.empty() ? "(unnamed graph)" : origin, c);
  return out;
}

}  // namespace ein
