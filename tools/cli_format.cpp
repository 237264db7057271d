// Number formatting shared by the `ein` subcommands (tools/cli_format.h). The FLOP counts,
// byte sizes and rates of `ein estimate` and `ein report` go through here, so both spell the
// same number the same way.
#include "tools/cli_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace ein::cli {

std::string si(double value, std::string_view unit, int digits) {
  static constexpr const char* kPrefixes[] = {"", "k", "M", "G", "T", "P", "E", "Z", "Y"};
  // The first magnitude at which `digits` significant digits round up to 1000: 999.95 for 4.
  const double step_up = 1000 * (1 - 0.5 * std::pow(10.0, -digits));
  int p = 0;
  while (std::fabs(value) >= step_up && p < 8) {
    value /= 1000;
    ++p;
  }
  const std::string_view sep = (!unit.empty() || p > 0) ? " " : "";
  return fmt::format("{:.{}g}{}{}{}", value, digits, sep, kPrefixes[p], unit);
}

std::string si_aligned(double value, std::string_view unit) {
  std::string s = si(value, unit);
  if (s.find(' ') == std::string::npos) s += ' ';
  return s;
}

std::string grouped(double value) {
  const std::string digits = fmt::format("{:.0f}", std::fabs(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return (value < 0 ? "-" : "") + out;
}

std::string exact(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e16) return grouped(value);
  std::string s = fmt::format("{}", value);
  if (const size_t e = s.find("e+"); e != std::string::npos) s.erase(e + 1, 1);
  return s;
}

std::string percent(double part, double whole) {
  return whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-";
}

std::string seconds_text(double seconds) {
  if (seconds >= 1) return fmt::format("{:.3g} s", seconds);
  if (seconds >= 1e-3) return fmt::format("{:.3g} ms", seconds * 1e3);
  return fmt::format("{:.3g} us", seconds * 1e6);
}

std::string fixed(double value, int digits, int decimals) {
  if (std::isfinite(value) && value != 0)
    decimals = std::clamp(digits - 1 - static_cast<int>(std::floor(std::log10(std::fabs(value)))),
                          decimals, 12);
  return fmt::format("{:.{}f}", value, decimals);
}

}  // namespace ein::cli
