// Source text bookkeeping: slicing and line/column lookup for diagnostics.
#include <ein/source.h>

#include <algorithm>

#include <fmt/format.h>

namespace ein {

SourceRange SourceRange::merge(SourceRange other) const {
  return {std::min(begin, other.begin), std::max(end, other.end)};
}

Source::Source(std::string name, std::string text)
    : name_(std::move(name)), text_(std::move(text)) {}

std::string_view Source::slice(SourceRange r) const {
  const auto n = static_cast<uint32_t>(text_.size());
  const uint32_t b = std::min(r.begin, n);
  const uint32_t e = std::clamp(r.end, b, n);
  return std::string_view(text_).substr(b, e - b);
}

LineCol Source::locate(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  LineCol lc;
  uint32_t line_start = 0;
  for (uint32_t i = 0; i < offset; ++i) {
    if (text_[i] == '\n') {
      ++lc.line;
      line_start = i + 1;
    }
  }
  lc.column = 1 + utf8_length(std::string_view(text_).substr(line_start, offset - line_start));
  return lc;
}

std::string_view Source::line_of(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  size_t b = 0;
  if (offset > 0) {
    const size_t nl = text_.rfind('\n', offset - 1);
    b = nl == std::string::npos ? 0 : nl + 1;
  }
  const size_t e = text_.find('\n', b);
  return std::string_view(text_).substr(b, (e == std::string::npos ? text_.size() : e) - b);
}

uint32_t utf8_char_size(std::string_view text) {
  if (text.empty()) return 0;
  const auto c = static_cast<unsigned char>(text[0]);
  const uint32_t n = c < 0x80           ? 1
                     : (c >> 5) == 0x6  ? 2
                     : (c >> 4) == 0xE  ? 3
                     : (c >> 3) == 0x1E ? 4
                                        : 0;
  if (n == 0 || n > text.size()) return 1;  // a stray continuation byte, or truncated
  for (uint32_t i = 1; i < n; ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) return 1;
  // Well-formed only (Unicode's table 3-7): no overlong forms (C0, C1, E0 80..9F, F0 80..8F),
  // no surrogates (ED A0..BF) and nothing above U+10FFFF (F4 90.., F5..).
  const auto c1 = static_cast<unsigned char>(text[1 % text.size()]);
  if (c == 0xC0 || c == 0xC1 || c > 0xF4 || (c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) ||
      (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
    return 1;
  return n;
}

uint32_t utf8_length(std::string_view text) {
  uint32_t count = 0;
  for (size_t i = 0; i < text.size(); i += utf8_char_size(text.substr(i)))
    ++count;
  return count;
}

std::string printable(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const uint32_t n = utf8_char_size(text.substr(i));
    const auto c = static_cast<unsigned char>(text[i]);
    // C0 controls, DEL, invalid bytes, and the C1 controls U+0080..U+009F (0xC2 0x80..0x9F),
    // which some terminals obey as escape sequences even in UTF-8.
    const bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0;
    if ((n == 1 && (c < 0x20 || c == 0x7F || c >= 0x80)) || c1) {
      for (uint32_t j = 0; j < n; ++j)
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + j]));
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

SourcePtr make_source(std::string name, std::string text) {
  return std::make_shared<const Source>(std::move(name), std::move(text));
}

}  // namespace ein
