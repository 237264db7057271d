// Numbers in the `ein` subcommands' flags, read by one rule: a finite decimal number (`0.5`,
// `70e9`, `1.4E12`) with an optional SI suffix, so `70e9`, `70B` and `70G` are the same. Shapes
// and axis sizes are not read here: they are plain integers (tools/shape_args.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ein::cli {

/// The suffix rule, case as written: `k` or `K` = 1e3, `M` = 1e6, `B` or `G` = 1e9 (billions,
/// as in "70B parameters"), `T` = 1e12, `P` = 1e15. Lower-case m, b, g, t, p are not suffixes
/// (m would read as milli). The multiplier of `suffix`, or nullopt when it is no suffix.
std::optional<double> si_suffix_scale(char suffix);
/// `text` read by the rule above; nullopt when it is not a finite number.
std::optional<double> try_parse_number(std::string_view text);
/// As try_parse_number(); a RuntimeError "FLAG: expected a number such as 70e9, 70B or 0.5,
/// got 'TEXT'" when it is not one.
double parse_number(const std::string& text, std::string_view flag);
/// A number > 0; a RuntimeError "FLAG: must be positive, got 'TEXT'" otherwise.
double parse_positive(const std::string& text, std::string_view flag);
/// A whole number > 0 (at most 9e15, where doubles stop being exact); a RuntimeError
/// "FLAG: must be a whole number, got 'TEXT'" otherwise.
double parse_count(const std::string& text, std::string_view flag);
/// A fraction in (0, 1], e.g. an MFU; a RuntimeError "FLAG: a fraction in (0, 1], got 'TEXT'".
double parse_fraction(const std::string& text, std::string_view flag);
/// `text` with an SI suffix spelled out (`8k` -> `8000`, `1.5M` -> `1500000`) for readers that
/// take plain numbers (a script's --set); any other text is returned as it is.
std::string expand_si_suffix(const std::string& text);

}  // namespace ein::cli
