// Map-expression text → AST with PEGTL. The operators are folded by the actions shared with
// the script parser (dsl/expr_builder.h); this file builds the inputs and the atoms
// (numbers, names, parentheses, calls). The control class turns a
// failed `must<>` into a UserError under the offending token, with the message chosen in
// dsl/map_messages.h.
#include "dsl/map_parser.h"

#include <cctype>
#include <charconv>
#include <limits>

#include <ein/diagnostic.h>
#include "dsl/expr_builder.h"
#include "dsl/limits.h"
#include "dsl/map_grammar.h"
#include "dsl/map_messages.h"

namespace ein {
namespace {

namespace g = grammar::map;
namespace pegtl = tao::pegtl;
namespace msg = messages::map;

// A call whose arguments are being parsed: they sit on the operand stack above `depth`.
struct CallFrame {
  std::string name;
  SourceRange name_range;
  size_t depth = 0;
};

// How the shared operator folding (dsl/expr_builder.h) makes map nodes.
struct MapNodes {
  using Ptr = ExprPtr;

  static Ptr node(auto n, SourceRange range) {
    return std::make_unique<Expr>(Expr{std::move(n), range});
  }
  static Ptr unary(std::string_view, SourceRange op_range, Ptr operand, SourceRange range) {
    return node(Unary{UnaryOp::neg, op_range, std::move(operand)}, range);  // `-`: the only one
  }
  static Ptr binary(std::string_view op, SourceRange op_range, Ptr lhs, Ptr rhs,
                    SourceRange range) {
    return node(Binary{binary_op(op), op_range, std::move(lhs), std::move(rhs)}, range);
  }
  static BinaryOp binary_op(std::string_view text) {
    for (BinaryOp op :
         {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::pow, BinaryOp::lt,
          BinaryOp::le, BinaryOp::gt, BinaryOp::ge, BinaryOp::eq, BinaryOp::ne})
      if (spelling(op) == text) return op;
    return BinaryOp::add;  // unreachable: the grammar matches only these spellings
  }
  static std::string too_deep(uint32_t limit) { return msg::expression_too_deep(limit); }
};

// Parse state: the map so far, the input being read, and the expression stacks.
struct Builder : detail::ExprBuilder<MapNodes> {
  MapExpr map;
  MapInput input;
  uint32_t bracket_begin = 0;
  uint32_t number_begin = 0;
  std::vector<CallFrame> calls;
  std::vector<uint32_t> open_parens;  // offsets of the '(' not yet closed, innermost last

  void add(auto node, SourceRange range) { push(MapNodes::node(std::move(node), range)); }

  // Bounds what the grammar recurses on (limits::kMaxNesting): parentheses, calls, and the
  // operators waiting for their right operand (prefix '-', '**' chains).
  void check_nesting(SourceRange at) const {
    if (open_parens.size() + ops.size() >= static_cast<size_t>(limits::kMaxNesting))
      throw UserError(msg::too_deep(limits::kMaxNesting), source, at);
  }
  // Hides ExprBuilder's: every operator counts towards the nesting bound.
  void on_operator(SourceRange at) const { check_nesting(at); }

  // The checks that need no meaning: distinct input names, distinct axes per input.
  void check_input() const {
    if (input.name == "inf") throw UserError(msg::reserved_input_name(), source, input.name_range);
    for (const MapInput& other : map.inputs)
      if (other.name == input.name)
        throw UserError(msg::duplicate_input(input.name), source, input.name_range)
            .note_at(msg::first_declared(other.name), source, other.name_range);
    for (size_t i = 0; i < input.axes.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (input.axes[i].name == input.axes[j].name)
          throw UserError(msg::duplicate_axis(input.axes[i].name, input.name), source,
                          input.axes[i].range)
              .note_at(msg::first_declared(input.axes[j].name), source, input.axes[j].range);
  }
};

template <typename Rule>
struct action : detail::expr_action<Rule> {};

// ---- inputs ----

template <>
struct action<g::input_name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.input = {};
    b.input.name = in.string();
    b.input.name_range = b.range_of(in);
  }
};

template <>
struct action<g::open_bracket> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.bracket_begin = b.range_of(in).begin;
  }
};

template <>
struct action<g::axis_name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.input.axes.push_back({in.string(), b.range_of(in)});
  }
};

template <>
struct action<g::input> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.input.range = b.range_of(in);
    b.check_input();
    b.map.inputs.push_back(std::move(b.input));
  }
};
template <>
struct action<g::first_input> : action<g::input> {};
template <>
struct action<g::next_input> : action<g::input> {};

template <>
struct action<g::arrow> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.map.arrow = b.range_of(in);
  }
};

// ---- operands ----

template <>
struct action<g::mantissa> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.number_begin = b.range_of(in).begin;
  }
};

template <>
struct action<g::number> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    double value = 0;
    const auto [ptr, ec] = std::from_chars(in.begin(), in.end(), value);
    if (ec != std::errc() || ptr != in.end())
      throw UserError(msg::number_out_of_range(in.string()), b.source, b.range_of(in));
    b.add(Number{value, in.string()}, b.range_of(in));
  }
};

template <>
struct action<g::inf_literal> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.add(Number{std::numeric_limits<double>::infinity(), "inf"}, b.range_of(in));
  }
};

template <>
struct action<g::name_ref> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.add(Name{in.string()}, b.range_of(in));
  }
};

template <>
struct action<g::open_paren> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.check_nesting(b.range_of(in));
    b.open_parens.push_back(b.range_of(in).begin);
  }
};

template <>
struct action<g::paren> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.open_parens.pop_back();
    b.operands.back()->range = b.range_of(in);  // the parentheses belong to the subexpression
  }
};

template <>
struct action<g::call_head> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    const SourceRange r = b.range_of(in);
    const std::string_view text = in.string_view();
    size_t n = 0;
    while (n < text.size() && (std::isalnum(static_cast<unsigned char>(text[n])) || text[n] == '_'))
      ++n;
    b.check_nesting({r.end - 1, r.end});
    b.calls.push_back({std::string(text.substr(0, n)),
                       {r.begin, r.begin + static_cast<uint32_t>(n)},
                       b.operands.size()});
    b.open_parens.push_back(r.end - 1);
  }
};

template <>
struct action<g::call> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    CallFrame frame = std::move(b.calls.back());
    b.calls.pop_back();
    b.open_parens.pop_back();
    Call call{std::move(frame.name), frame.name_range, {}};
    const uint32_t height = b.take_items(frame.depth, call.args) + 1;
    b.push(MapNodes::node(std::move(call), b.range_of(in)), height, frame.name_range);
  }
};

template <>
struct action<g::body> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.map.body = std::move(*b.pop());
  }
};

// ---- errors ----

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

// The token at `at`: a run of name/number characters, or one (UTF-8) character; a point at
// the end of the text.
SourceRange token_at(const std::string& text, uint32_t at) {
  if (at >= text.size()) return {at, at};
  if (!is_word_char(text[at])) return {at, at + utf8_char_size(std::string_view(text).substr(at))};
  uint32_t e = at;
  while (e < text.size() && is_word_char(text[e]))
    ++e;
  return {at, e};
}

template <typename Rule>
inline constexpr bool expects_operand = grammar::expr::is_operand<Rule> ||
                                        std::is_same_v<Rule, g::paren_body> ||
                                        std::is_same_v<Rule, g::call_arg>;

[[noreturn]] void fail(const Builder& b, std::string message, SourceRange range) {
  throw UserError(std::move(message), b.source, range);
}

// What went wrong after a complete operand, where an operator, ')' or the end was due.
[[noreturn]] void after_operand(const Builder& b, uint32_t at) {
  const std::string& text = b.source->text();
  const std::string_view rest = std::string_view(text).substr(at);
  const SourceRange token = token_at(text, at);
  if (rest.empty())
    fail(b, msg::unclosed_paren(), {b.open_parens.back(), b.open_parens.back() + 1});
  if (rest.starts_with(")")) fail(b, msg::unopened_paren(), token);
  if (rest.starts_with("//")) fail(b, msg::floor_division(), {at, at + 2});
  if (rest.starts_with(",")) fail(b, msg::comma_in_expression(), token);
  if (rest.starts_with("^")) fail(b, msg::caret_operator(), token);
  if (rest.starts_with("=")) fail(b, msg::single_equals(), token);
  if (rest.starts_with("[")) fail(b, msg::indexing(), token);
  if (is_word_char(rest[0]) || rest[0] == '(')
    fail(b, msg::missing_operator(printable(b.source->slice(token))), token);
  fail(b, msg::unexpected_character(printable(b.source->slice(token))), token);
}

// Turns a failed must<Rule> into a UserError. Every parse message is chosen here.
template <typename Rule>
struct control : pegtl::normal<Rule> {
  template <typename Input, typename... States>
  [[noreturn]] static void raise(const Input& in, Builder& b, States&&...) {
    const std::string& text = b.source->text();
    const auto at = static_cast<uint32_t>(in.current() - b.base);
    const SourceRange token = token_at(text, at);
    const std::string found = printable(b.source->slice(token));
    if constexpr (std::is_same_v<Rule, g::number_end> || std::is_same_v<Rule, g::exponent_digits>) {
      // From the number's first character through whatever is glued to it.
      uint32_t e = at;
      while (e < text.size() && is_word_char(text[e]))
        ++e;
      const SourceRange r{b.number_begin, e};
      fail(b, msg::bad_number(printable(b.source->slice(r))), r);
    } else if constexpr (expects_operand<Rule> || std::is_same_v<Rule, g::body>) {
      if (std::is_same_v<Rule, g::body> && at == text.size())
        fail(b, msg::empty_expression(), b.map.arrow);
      if (at > 0 && text[at - 1] == '-' && text.substr(at).starts_with(">"))
        fail(b, msg::second_arrow(), {at - 1, at + 1});
      fail(b, msg::expected_operand(found), token);
    } else if constexpr (grammar::expr::is_not_chained<Rule>) {
      const uint32_t width = detail::comparison_width(text, at);
      fail(b, msg::chained_comparison(text.substr(at, width)), {at, at + width});
    } else if constexpr (std::is_same_v<Rule, g::close_paren> ||
                         std::is_same_v<Rule, g::call_close> || std::is_same_v<Rule, g::end>) {
      after_operand(b, at);
    } else if constexpr (std::is_same_v<Rule, g::first_input> ||
                         std::is_same_v<Rule, g::next_input>) {
      fail(b, msg::expected_input(found), token);
    } else if constexpr (std::is_same_v<Rule, g::open_bracket>) {
      fail(b, msg::input_needs_brackets(b.input.name), b.input.name_range);
    } else if constexpr (std::is_same_v<Rule, g::close_bracket>) {
      const std::string_view rest = std::string_view(text).substr(at);
      if (rest.empty() || rest.starts_with("->"))
        fail(b, msg::unclosed_bracket(), {b.bracket_begin, b.bracket_begin + 1});
      fail(b, msg::bad_axis(found), token);
    } else if constexpr (std::is_same_v<Rule, g::arrow>) {
      fail(b, msg::missing_arrow(found), token);
    } else {
      fail(b, msg::unexpected_character(found), token);
    }
  }
};

}  // namespace

MapExpr parse_map(SourcePtr source) {
  Builder b;
  b.source = source;
  b.base = source->text().data();
  b.map.source = source;
  pegtl::memory_input<pegtl::tracking_mode::lazy> in(source->text(), source->name());
  pegtl::parse<g::grammar, action, control>(in, b);
  return std::move(b.map);
}

MapExpr parse_map(std::string_view text) {
  return parse_map(make_source("map", std::string(text)));
}

}  // namespace ein
