// Source text and ranges into it. Every AST node carries a SourceRange so that an error
// found late (in sema, or in a pass over the IR) still underlines what the user wrote.
// Offsets are in bytes; lines and columns are 1-based, columns counted in characters
// (UTF-8 code points), so a caret lands under the right character of `a … b`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ein {

/// A half-open byte range [begin, end) into one Source's text.
struct SourceRange {
  uint32_t begin = 0;  ///< first byte
  uint32_t end = 0;    ///< one past the last byte; end == begin marks a point (e.g. end of input)

  /// Number of bytes covered.
  uint32_t size() const { return end - begin; }
  /// The smallest range covering both.
  SourceRange merge(SourceRange other) const;
  bool operator==(const SourceRange&) const = default;
};

/// A 1-based line and column, as printed in `name:line:col`.
struct LineCol {
  uint32_t line = 1;    ///< 1-based line number
  uint32_t column = 1;  ///< 1-based column in characters (UTF-8 code points)
};

/// A named piece of text: a pattern string, a shape spec, or a .ein file.
class Source {
 public:
  /// `name` is what diagnostics print before `:line:col` ("pattern", "model.ein", ...).
  Source(std::string name, std::string text);

  /// The name printed in diagnostics.
  const std::string& name() const { return name_; }
  /// The whole text.
  const std::string& text() const { return text_; }
  /// The text a range covers.
  std::string_view slice(SourceRange r) const;
  /// Line and column of a byte offset.
  LineCol locate(uint32_t offset) const;
  /// The full line holding a byte offset, without its newline.
  std::string_view line_of(uint32_t offset) const;

 private:
  std::string name_;
  std::string text_;
};

using SourcePtr = std::shared_ptr<const Source>;

/// Number of UTF-8 code points in `text` (each invalid byte counts as one).
uint32_t utf8_length(std::string_view text);
/// Byte length of the UTF-8 character starting `text`: 1 to 4, or 1 for an invalid byte.
uint32_t utf8_char_size(std::string_view text);
/// `text` with control characters and invalid UTF-8 bytes escaped as `\xNN`, for messages.
std::string printable(std::string_view text);

/// Makes a shared Source; patterns are parsed from these so ranges outlive the parser.
SourcePtr make_source(std::string name, std::string text);

}  // namespace ein
