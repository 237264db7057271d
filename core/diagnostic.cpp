// Rendering of user errors: location header, the source line, a caret under the range,
// then notes. Rendering happens once, when the error is built or a note is added, so
// `what()` is cheap and never throws.
#include <ein/diagnostic.h>

#include <fmt/format.h>

#include <algorithm>

namespace ein {
namespace {

// Renders "name:line:col: kind: text", the source line and the caret line.
std::string located(const char* kind, const std::string& text, const Source& src, SourceRange r) {
  const LineCol lc = src.locate(r.begin);
  return fmt::format("{}:{}:{}: {}: {}\n {}\n{}", src.name(), lc.line, lc.column, kind, text,
                     src.line_of(r.begin), caret_line(src, r));
}

}  // namespace

std::string caret_line(const Source& source, SourceRange range) {
  const std::string_view line = source.line_of(range.begin);
  const uint32_t line_begin = static_cast<uint32_t>(line.data() - source.text().data());
  const uint32_t start = range.begin - line_begin;  // bytes into the line
  // Underline at most to the end of the line the range starts on, one mark per character.
  const uint32_t end =
      std::min<uint32_t>(range.end - line_begin, static_cast<uint32_t>(line.size()));
  std::string out = " ";  // the source line is printed indented by one space
  for (size_t i = 0; i < start && i < line.size(); i += utf8_char_size(line.substr(i)))
    out += line[i] == '\t' ? '\t' : ' ';  // keep tabs so the caret stays aligned
  const uint32_t width = end > start ? utf8_length(line.substr(start, end - start)) : 0;
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
  rendered_ = source_ ? located("error", message_, *source_, range_) : "error: " + message_;
  for (const auto& n : notes_) {
    rendered_ += '\n';
    rendered_ += n.source ? located("note", n.text, *n.source, n.range) : "note: " + n.text;
  }
}

}  // namespace ein
