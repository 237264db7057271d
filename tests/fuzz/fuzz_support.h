// What the fuzz targets share: splitting an input into fields, bounded scanners for the
// shapes and sizes the inputs carry (the same forms as the conformance tables: `(2,3);(4,)`,
// `h=2,w=3`), a scratch file for the readers that take a path, and the check that a printed
// AST parses back to the same text. Nothing here throws but the code under test: a scanner
// that cannot read a field returns nullopt, and the target then skips that part.
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ein::fuzz {

/// Operands, dims per operand and given sizes a target builds from one input: enough for
/// every pattern in the tables, small enough that no input does quadratic work on them.
inline constexpr size_t kMaxItems = 16;

/// `text` cut at every `sep` (empty fields kept).
inline std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  for (size_t at; (at = text.find(sep, begin)) != std::string_view::npos; begin = at + 1)
    out.push_back(text.substr(begin, at - begin));
  out.push_back(text.substr(begin));
  return out;
}

/// `text` without leading and trailing spaces.
inline std::string_view trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

/// A decimal integer >= `min` filling `text`, or nullopt.
inline std::optional<int64_t> integer(std::string_view text, int64_t min = 0) {
  text = trim(text);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min) return std::nullopt;
  return v;
}

/// `(2,3,4)`, `(5,)`, `()` (sizes >= `min`); nullopt for anything else.
inline std::optional<std::vector<int64_t>> tuple(std::string_view text, int64_t min = 0) {
  text = trim(text);
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return std::nullopt;
  text = text.substr(1, text.size() - 2);
  std::vector<int64_t> out;
  if (trim(text).empty()) return out;
  std::vector<std::string_view> parts = split(text, ',');
  if (parts.size() > 1 && trim(parts.back()).empty()) parts.pop_back();  // `(5,)`
  if (parts.size() > kMaxItems) return std::nullopt;
  for (std::string_view p : parts) {
    const auto v = integer(p, min);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

/// `(2,3);(4,)`: one tuple per `;`-separated item; `-` or empty for none.
inline std::optional<std::vector<std::vector<int64_t>>> tuples(std::string_view text,
                                                              int64_t min = 0) {
  std::vector<std::vector<int64_t>> out;
  text = trim(text);
  if (text.empty() || text == "-") return out;
  const std::vector<std::string_view> items = split(text, ';');
  if (items.size() > kMaxItems) return std::nullopt;
  for (std::string_view item : items) {
    auto t = tuple(item, min);
    if (!t) return std::nullopt;
    out.push_back(std::move(*t));
  }
  return out;
}

/// A file with the bytes of one input, at `name` (which may name subfolders) in a folder of
/// this process's own (removed at exit), for readers that take a path. Returns the path.
inline std::string scratch_file(std::string_view name, const uint8_t* data, size_t size) {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                              ("ein-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    static const std::filesystem::path to_remove = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(to_remove, ec);
    });
    return d;
  }();
  const std::filesystem::path path = dir / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

/// Aborts (a finding) unless printing what `parse` returns for `text`, then parsing and
/// printing that again, gives the same text: the printers' round-trip promise.
template <class Parse, class Print>
void check_round_trip(std::string_view text, Parse parse, Print print) {
  const std::string once = print(parse(text));
  std::string twice;
  try {
    twice = print(parse(once));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "round trip: %s\nprinted as: %s\ndoes not parse back:\n%s\n",
                 std::string(text).c_str(), once.c_str(), e.what());
    std::abort();
  }
  if (once != twice) {
    std::fprintf(stderr, "round trip: %s\nprinted as: %s\nreprinted:  %s\n",
                 std::string(text).c_str(), once.c_str(), twice.c_str());
    std::abort();
  }
}

}  // namespace ein::fuzz
