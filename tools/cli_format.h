// Numbers as the `ein` subcommands print them: SI-prefixed with 4 significant digits
// (`1.73 TFLOP`, `65.2 GFLOP/s`), thousands-grouped integers, the shortest exact text,
// percentages and short durations. Prefixes are powers of 1000 (1 GB = 1e9 B), never 1024.
#pragma once

#include <string>
#include <string_view>

namespace ein::cli {

/// `value` with `digits` significant digits and an SI prefix (k M G T P E Z Y), a space
/// before the prefix and unit: si(1.244e8, "B") == "124.4 MB", si(5e11) == "500 G",
/// si(42) == "42". The prefix steps up once the rounded value would read 1000.
std::string si(double value, std::string_view unit = "", int digits = 4);
/// As si(), but a bare number (no prefix, no unit) keeps a trailing space, so that in a
/// right-aligned column its digits line up with prefixed ones: "500 " over "70 G".
std::string si_aligned(double value, std::string_view unit = "");
/// The integer nearest `value` with thousands separators: 1234567 -> "1,234,567".
std::string grouped(double value);
/// The shortest text that reads back as the same double; whole numbers (below 1e16) grouped
/// as grouped() does, exponents without '+': 1.5e+20 -> "1.5e20".
std::string exact(double value);
/// `part / whole` as a percentage with one decimal ("12.5%"); "-" when `whole` is not > 0.
std::string percent(double part, double whole);
/// Seconds with 3 significant digits in s, ms or us: 0.0123 -> "12.3 ms".
std::string seconds_text(double seconds);
/// `value` in fixed notation with at least `decimals` decimals and `digits` significant
/// digits, so that a small value keeps its precision: (0.0251, 3, 3) -> "0.0251",
/// (12.3456, 3, 3) -> "12.346", (0, 3, 3) -> "0.000".
std::string fixed(double value, int digits, int decimals);

}  // namespace ein::cli
