// Pattern AST → canonical text.
#include <ein/pattern_printer.h>

namespace ein {
namespace {

std::string print_token(const AxisToken& t) {
  switch (t.kind) {
    case AxisToken::Kind::named:
      return t.name;
    case AxisToken::Kind::number:
      return std::to_string(t.value);
    case AxisToken::Kind::ellipsis:
      return "...";
    case AxisToken::Kind::star:
      return "*";
  }
  return {};
}

}  // namespace

std::string print(const AxisTerm& term) {
  if (!term.is_group) return print_token(term.tokens.front());
  std::string out = "(";
  for (size_t i = 0; i < term.tokens.size(); ++i) {
    if (i) out += ' ';
    out += print_token(term.tokens[i]);
  }
  return out + ")";
}

std::string print(const PatternSide& side) {
  std::string out;
  for (size_t i = 0; i < side.terms.size(); ++i) {
    if (i) out += ' ';
    out += print(side.terms[i]);
  }
  return out;
}

std::string print(const Pattern& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.inputs.size(); ++i) {
    if (i) out += ", ";
    out += print(pattern.inputs[i]);
  }
  if (pattern.output) {
    out += pattern.inputs.size() == 1 && pattern.inputs[0].terms.empty() ? "-> " : " -> ";
    out += print(*pattern.output);
  }
  return out;
}

}  // namespace ein
