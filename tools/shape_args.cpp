// Hand-written scanners for `ein shape`'s small argument languages: integers in brackets.
// They are not PEGTL grammars because they are a few lines each and live in tools/.
#include "tools/shape_args.h"

#include <cctype>
#include <charconv>

#include <ein/diagnostic.h>
#include "dsl/pattern_messages.h"

namespace ein::cli {
namespace {

// A cursor over one argument that reports errors under the current character.
class Scanner {
 public:
  Scanner(const std::string& text, const std::string& label) : src_(make_source(label, text)) {}

  void skip_blanks() {
    while (pos_ < text().size() && std::isspace(static_cast<unsigned char>(text()[pos_])))
      ++pos_;
  }
  bool at_end() {
    skip_blanks();
    return pos_ >= text().size();
  }
  bool accept(char c) {
    skip_blanks();
    if (pos_ < text().size() && text()[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  char peek() {
    skip_blanks();
    return pos_ < text().size() ? text()[pos_] : '\0';
  }
  int64_t integer(bool allow_minus_one) {
    skip_blanks();
    const size_t begin = pos_;
    if (pos_ < text().size() && text()[pos_] == '-') ++pos_;
    while (pos_ < text().size() && std::isdigit(static_cast<unsigned char>(text()[pos_])))
      ++pos_;
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(text().data() + begin, text().data() + pos_, v);
    if (ec == std::errc::result_out_of_range)
      fail(fmt::format("the size {} is too large: a size is at most 2^63 - 1 "
                       "(9223372036854775807)",
                       text().substr(begin, pos_ - begin)),
           begin, pos_);
    if (ec != std::errc() || ptr != text().data() + pos_ || begin == pos_)
      fail("expected a non-negative integer", begin, std::max(pos_, begin + 1));
    if (v < 0 && !(allow_minus_one && v == -1))
      fail(allow_minus_one ? "a size is non-negative, or -1 to infer it" : "a size is non-negative",
           begin, pos_);
    return v;
  }
  [[noreturn]] void fail(const std::string& message) { fail(message, pos_, pos_ + 1); }
  [[noreturn]] void fail(const std::string& message, size_t b, size_t e) {
    e = std::min(e, text().size());
    throw UserError(message, src_,
                    {static_cast<uint32_t>(b), static_cast<uint32_t>(std::max(e, b))});
  }
  const std::string& text() const { return src_->text(); }

 private:
  SourcePtr src_;
  size_t pos_ = 0;
};

// One bracketed list of integers: `(2,3)`, `[2]`, `(5,)`, `()`; bare `2,3` when `bare`.
std::vector<int64_t> scan_dims(Scanner& s, bool bare, bool allow_minus_one) {
  char close = '\0';
  if (s.accept('('))
    close = ')';
  else if (s.accept('['))
    close = ']';
  else if (!bare)
    s.fail("expected '(' or '[' to start a shape");
  std::vector<int64_t> dims;
  while (close ? s.peek() != close : !s.at_end()) {
    if (s.at_end()) s.fail(std::string("expected '") + close + "' to close the shape");
    dims.push_back(s.integer(allow_minus_one));
    if (!s.accept(',')) break;
  }
  if (close && !s.accept(close)) s.fail(std::string("expected ',' or '") + close + "'");
  return dims;
}

}  // namespace

bool is_axis_size(const std::string& arg) {
  return arg.find('=') != std::string::npos;
}

Shape parse_shape_arg(const std::string& text, const std::string& label) {
  Scanner s(text, label);
  Shape shape = scan_dims(s, /*bare=*/true, /*allow_minus_one=*/false);
  if (!s.at_end()) s.fail("unexpected text after the shape; write a shape as (2,3,4)");
  return shape;
}

AxisSize parse_axis_size(const std::string& text, const std::string& label) {
  const size_t eq = text.find('=');
  Scanner s(text, label);
  const std::string name = text.substr(0, eq);
  if (name.empty())
    s.fail("missing axis name before '=': an axis size is written name=size, e.g. h=8", 0, 1);
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      s.fail("'" + printable(name) +
                 "' is not an axis name: an axis size is written name=size, e.g. h=8",
             0, eq);
  Scanner value(text.substr(eq + 1), label);
  if (value.at_end()) s.fail("missing size after '='", eq, eq + 1);
  try {
    const int64_t v = value.integer(false);
    if (!value.at_end())
      value.fail("unexpected text after the size: a size is a whole number written in digits "
                 "(12, not 1.2e1)");
    return {name, v};
  } catch (const UserError& e) {  // re-anchor the caret in the whole argument
    s.fail(e.message(), eq + 1 + e.range().begin, eq + 1 + e.range().end);
  }
}

std::vector<std::vector<int64_t>> parse_shape_list(const std::string& text,
                                                   const std::string& label) {
  Scanner s(text, label);
  if (!s.accept('[')) s.fail("expected '[' to start a list of shapes, e.g. [[2],[1],[2]]");
  std::vector<std::vector<int64_t>> out;
  while (s.peek() != ']') {
    if (s.at_end()) s.fail("expected ']' to close the list of shapes");
    out.push_back(scan_dims(s, /*bare=*/false, /*allow_minus_one=*/true));
    if (!s.accept(',') && !s.accept(';')) break;
  }
  if (!s.accept(']')) s.fail("expected ',' or ']'");
  if (!s.at_end()) s.fail("unexpected text after the list of shapes");
  return out;
}

ReductionArg parse_reduction_arg(const std::string& text) {
  Scanner s(text, "--reduction");
  ReductionArg out;
  const size_t paren = std::min(text.find('('), text.size());
  const std::string name = text.substr(0, paren);
  const auto r = parse_reduction(name);
  if (!r) s.fail(messages::unknown_reduction(printable(name)), 0, std::max<size_t>(paren, 1));
  out.reduction = *r;
  if (paren == text.size()) return out;
  const std::string prefix = name + "(ddof=";
  const auto malformed = [&] {
    s.fail("write the ddof as " + name + "(ddof=N), N a non-negative integer", paren, text.size());
  };
  if (text.rfind(prefix, 0) != 0 || text.back() != ')') malformed();
  int64_t v = 0;
  const char* b = text.data() + prefix.size();
  const char* e = text.data() + text.size() - 1;
  const auto [ptr, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || ptr != e || v < 0) malformed();
  if (out.reduction != Reduction::var && out.reduction != Reduction::std)
    s.fail("ddof applies to var and std only", paren, text.size());
  out.ddof = v;
  return out;
}

}  // namespace ein::cli
