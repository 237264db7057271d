// Rendering of user errors: location header, the source line, a caret under the range,
// then notes. Rendering happens once, when the error is built or a note is added, so
// `what()` is cheap and never throws. User text never reaches the terminal raw: control
// characters in the quoted line, the source name and the message are shown as `\xNN`
// escapes (a tab stays a tab, a message's own line breaks stay), and the caret line is
// computed from the same per-character rendering so it still sits under the culprit.
#include <ein/diagnostic.h>

#include <fmt/format.h>

#include <algorithm>

namespace ein {
namespace {

/// One character of a quoted source line as shown: a tab stays a tab (the caret line copies
/// it), a control character or an invalid byte becomes its printable() escape.
std::string shown(std::string_view ch) {
  return ch == "\t" ? std::string(ch) : printable(ch);
}

/// Columns `ch` takes once shown: 1 for a character kept as is, the escape's length otherwise.
uint32_t shown_width(std::string_view ch) {
  const std::string s = shown(ch);
  return s == ch ? 1 : static_cast<uint32_t>(s.size());
}

/// `line` as quoted under the location header, character by character through shown().
std::string quoted_line(std::string_view line) {
  std::string out;
  for (size_t i = 0; i < line.size();) {
    const uint32_t n = utf8_char_size(line.substr(i));
    out += shown(line.substr(i, n));
    i += n;
  }
  return out;
}

/// Free text (a message, a note, a source name) with every control character escaped but the
/// line breaks and tabs the text means, so nothing in it drives the terminal. Invalid UTF-8
/// bytes pass: they are no commands, and messages quote user tokens through printable().
std::string safe_text(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const uint32_t n = utf8_char_size(text.substr(i));
    const std::string_view ch = text.substr(i, n);
    const bool invalid = n == 1 && static_cast<unsigned char>(ch[0]) >= 0x80;
    out += ch == "\n" || ch == "\t" || invalid ? std::string(ch) : printable(ch);
    i += n;
  }
  return out;
}

// Renders "name:line:col: kind: text", the source line and the caret line.
std::string located(const char* kind, const std::string& text, const Source& src, SourceRange r) {
  const LineCol lc = src.locate(r.begin);
  return fmt::format("{}:{}:{}: {}: {}\n {}\n{}", safe_text(src.name()), lc.line, lc.column, kind,
                     safe_text(text), quoted_line(src.line_of(r.begin)), caret_line(src, r));
}

}  // namespace

std::string caret_line(const Source& source, SourceRange range) {
  const std::string_view line = source.line_of(range.begin);
  const uint32_t line_begin = static_cast<uint32_t>(line.data() - source.text().data());
  const uint32_t start = range.begin - line_begin;  // bytes into the line
  // Underline at most to the end of the line the range starts on, one mark per column of the
  // quoted line (quoted_line(): an escaped character takes as many columns as its escape).
  const uint32_t end =
      std::min<uint32_t>(range.end - line_begin, static_cast<uint32_t>(line.size()));
  std::string out = " ";  // the source line is printed indented by one space
  uint32_t width = 0;
  for (size_t i = 0; i < line.size() && i < std::max(start, end);) {
    const uint32_t n = utf8_char_size(line.substr(i));
    const std::string_view ch = line.substr(i, n);
    if (i < start)
      out += ch == "\t" ? std::string("\t") : std::string(shown_width(ch), ' ');  // tabs align
    else
      width += shown_width(ch);
    i += n;
  }
  out += '^';
  if (width > 1) out.append(width - 1, '~');
  return out;
}

UserError::UserError(std::string message) : message_(std::move(message)) {
  render();
}

UserError::UserError(std::string message, SourcePtr source, SourceRange range)
    : message_(std::move(message)), source_(std::move(source)), range_(range) {
  render();
}

UserError& UserError::note(std::string text) {
  notes_.push_back({std::move(text), nullptr, {}});
  render();
  return *this;
}

UserError& UserError::note_at(std::string text, SourcePtr source, SourceRange range) {
  notes_.push_back({std::move(text), std::move(source), range});
  render();
  return *this;
}

uint32_t UserError::column() const {
  return source_ ? source_->locate(range_.begin).column : 0;
}

void UserError::render() {
  rendered_ =
      source_ ? located("error", message_, *source_, range_) : "error: " + safe_text(message_);
  for (const auto& n : notes_) {
    rendered_ += '\n';
    rendered_ +=
        n.source ? located("note", n.text, *n.source, n.range) : "note: " + safe_text(n.text);
  }
}

}  // namespace ein
