// The one user-facing error type. A UserError is a mistake in what the user wrote (a
// pattern, a shape, a script); it renders like a compiler diagnostic, with the source line
// and a `^~~~` under the range that broke a rule. Internal bugs and device failures are
// other types: nothing here is for them.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include <ein/source.h>

namespace ein {

/// A located remark attached to an error: sizes bound so far, the other end of a mismatch.
struct DiagnosticNote {
  std::string text;   ///< one line, no trailing newline
  SourcePtr source;   ///< may be null: an unlocated note
  SourceRange range;  ///< where the note points, when source is set
};

/// A mistake in user input. Never aborts the process; `what()` is the rendered diagnostic.
///
/// Rendered form (clang style):
///   pattern:1:3: error: cannot split axis of length 10 into (h w) with h=3: ...
///    b (h w) c -> b h w c
///      ^~~~~
///   note: sizes bound so far: h=3
class UserError : public std::exception {
 public:
  /// An error with no location (e.g. a bad command-line value).
  explicit UserError(std::string message);
  /// An error that points at `range` in `source`.
  UserError(std::string message, SourcePtr source, SourceRange range);

  /// Adds an unlocated note line; returns *this so notes chain.
  UserError& note(std::string text);
  /// Adds a note that points at another place (the declaration, the other operand).
  UserError& note_at(std::string text, SourcePtr source, SourceRange range);

  /// The one-line statement of the broken rule, without location or notes.
  const std::string& message() const { return message_; }
  /// The source the error points into; null for unlocated errors.
  const SourcePtr& source() const { return source_; }
  /// The range underlined.
  SourceRange range() const { return range_; }
  /// 1-based column of the caret, 0 for unlocated errors.
  uint32_t column() const;
  /// The notes, in the order added.
  const std::vector<DiagnosticNote>& notes() const { return notes_; }
  /// The full multi-line diagnostic (what `ein` prints on stderr).
  const char* what() const noexcept override { return rendered_.c_str(); }

 private:
  void render();

  std::string message_;
  SourcePtr source_;
  SourceRange range_;
  std::vector<DiagnosticNote> notes_;
  std::string rendered_;
};

/// Renders `^~~~` for `range` under the line it starts on (the caret line alone).
std::string caret_line(const Source& source, SourceRange range);

}  // namespace ein
