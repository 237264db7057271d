// Source text bookkeeping: slicing and line/column lookup for diagnostics.
#include "dsl/source.h"

#include <algorithm>

namespace ein {

SourceRange SourceRange::merge(SourceRange other) const {
  return {std::min(begin, other.begin), std::max(end, other.end)};
}

Source::Source(std::string name, std::string text) : name_(std::move(name)), text_(std::move(text)) {}

std::string_view Source::slice(SourceRange r) const {
  const auto n = static_cast<uint32_t>(text_.size());
  const uint32_t b = std::min(r.begin, n);
  const uint32_t e = std::clamp(r.end, b, n);
  return std::string_view(text_).substr(b, e - b);
}

LineCol Source::locate(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  LineCol lc;
  for (uint32_t i = 0; i < offset; ++i) {
    if (text_[i] == '\n') {
      ++lc.line;
      lc.column = 1;
    } else {
      ++lc.column;
    }
  }
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

SourcePtr make_source(std::string name, std::string text) {
  return std::make_shared<const Source>(std::move(name), std::move(text));
}

}  // namespace ein
