// The one number rule of the `ein` flags (tools/cli_numbers.h): std::from_chars for the
// decimal part (locale-free, exact round trip), then the suffix's power of ten.
#include "tools/cli_numbers.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include <ein/errors.h>

namespace ein::cli {

std::optional<double> si_suffix_scale(char suffix) {
  switch (suffix) {
    case 'k':
    case 'K':
      return 1e3;
    case 'M':
      return 1e6;
    case 'B':
    case 'G':
      return 1e9;
    case 'T':
      return 1e12;
    case 'P':
      return 1e15;
    default:
      return std::nullopt;
  }
}

std::optional<double> try_parse_number(std::string_view text) {
  double scale = 1;
  if (!text.empty())
    if (const std::optional<double> s = si_suffix_scale(text.back())) {
      scale = *s;
      text.remove_suffix(1);
    }
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value * scale))
    return std::nullopt;
  return value * scale;
}

double parse_number(const std::string& text, std::string_view flag) {
  const std::optional<double> v = try_parse_number(text);
  if (!v)
    throw RuntimeError(
        fmt::format("{}: expected a number such as 70e9, 70B or 0.5, got '{}'", flag, text));
  return *v;
}

double parse_positive(const std::string& text, std::string_view flag) {
  const double v = parse_number(text, flag);
  if (!(v > 0)) throw RuntimeError(fmt::format("{}: must be positive, got '{}'", flag, text));
  return v;
}

double parse_count(const std::string& text, std::string_view flag) {
  const double v = parse_positive(text, flag);
  if (v != std::floor(v) || v > 9.0e15)
    throw RuntimeError(fmt::format("{}: must be a whole number, got '{}'", flag, text));
  return v;
}

double parse_fraction(const std::string& text, std::string_view flag) {
  const double v = parse_positive(text, flag);
  if (v > 1) throw RuntimeError(fmt::format("{}: a fraction in (0, 1], got '{}'", flag, text));
  return v;
}

std::string expand_si_suffix(const std::string& text) {
  if (text.empty() || !si_suffix_scale(text.back())) return text;
  const std::optional<double> v = try_parse_number(text);
  if (!v) return text;
  // Whole values as integers, so that a dim set to `8k` is read as the integer 8000.
  if (*v == std::floor(*v) && std::fabs(*v) < 9.0e15) return fmt::format("{:.0f}", *v);
  return fmt::format("{}", *v);
}

}  // namespace ein::cli
