// Pattern text → AST with PEGTL. Actions append tokens and terms to a Builder; the control
// class turns a failed `must<>` into a UserError under the offending character, with the
// message chosen in dsl/pattern_messages.h.
#include <ein/pattern_parser.h>

#include <charconv>

#include <ein/diagnostic.h>
#include "dsl/pattern_grammar.h"
#include "dsl/pattern_messages.h"

namespace ein {
namespace {

namespace g = grammar::pattern;
namespace pegtl = tao::pegtl;

// Parse state: the pattern so far, the side being read, and the tokens of an open group.
struct Builder {
  SourcePtr source;
  const char* base = nullptr;  // start of the text: offsets are pointer differences
  Pattern pattern;
  PatternSide side;
  std::vector<AxisToken> group_tokens;
  bool in_group = false;
  uint32_t group_begin = 0;

  template <typename Input>
  SourceRange range_of(const Input& in) const {
    const auto b = static_cast<uint32_t>(in.begin() - base);
    return {b, b + static_cast<uint32_t>(in.size())};
  }

  void add_token(AxisToken token) {
    if (in_group) {
      group_tokens.push_back(std::move(token));
      return;
    }
    const SourceRange r = token.range;
    side.terms.push_back({false, {std::move(token)}, r});
  }

  PatternSide take_side(uint32_t at) {
    PatternSide s = std::move(side);
    side = {};
    s.range =
        s.terms.empty() ? SourceRange{at, at} : s.terms.front().range.merge(s.terms.back().range);
    return s;
  }
};

template <typename Rule>
struct action : pegtl::nothing<Rule> {};

template <>
struct action<g::name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.add_token({AxisToken::Kind::named, in.string(), 0, b.range_of(in)});
  }
};

template <>
struct action<g::number> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(in.begin(), in.end(), value);
    if (ec != std::errc() || ptr != in.end())
      throw UserError(messages::number_too_large(in.string()), b.source, b.range_of(in));
    b.add_token({AxisToken::Kind::number, {}, value, b.range_of(in)});
  }
};

template <>
struct action<g::ellipsis> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.add_token({AxisToken::Kind::ellipsis, {}, 0, b.range_of(in)});
  }
};

template <>
struct action<g::star_axis> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.add_token({AxisToken::Kind::star, {}, 0, b.range_of(in)});
  }
};

template <>
struct action<g::open_paren> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.in_group = true;
    b.group_begin = b.range_of(in).begin;
  }
};

template <>
struct action<g::group> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.in_group = false;
    b.side.terms.push_back({true, std::move(b.group_tokens), b.range_of(in)});
    b.group_tokens.clear();
  }
};

template <>
struct action<g::input_side> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.pattern.inputs.push_back(b.take_side(b.range_of(in).end));
  }
};

template <>
struct action<g::output_side> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.pattern.output = b.take_side(b.range_of(in).end);
  }
};

template <>
struct action<g::arrow> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.pattern.arrow = b.range_of(in);
  }
};

// The character at the failure point, for messages ("" at the end of input).
template <typename Input>
std::string_view current(const Input& in) {
  if (in.empty()) return {};
  return std::string_view(in.current(), utf8_char_size(std::string_view(in.current(), in.size())));
}

// Turns a failed must<Rule> into a UserError. Every parse message is chosen here.
template <typename Rule>
struct control : pegtl::normal<Rule> {
  template <typename Input, typename... States>
  [[noreturn]] static void raise(const Input& in, Builder& b, States&&...) {
    const auto at = static_cast<uint32_t>(in.current() - b.base);
    const SourceRange here{at, at + static_cast<uint32_t>(current(in).size())};
    // The glued token runs back to the start of the token and on to the end of the glue.
    const auto glued = [&](uint32_t token_begin) {
      uint32_t e = at;
      const std::string& t = b.source->text();
      while (e < t.size() && (std::isalnum(static_cast<unsigned char>(t[e])) || t[e] == '_' ||
                              t[e] == '.' || static_cast<unsigned char>(t[e]) >= 0x80))
        ++e;
      return SourceRange{token_begin, e};
    };
    const auto token_begin = [&] {
      uint32_t s = at;
      const std::string& t = b.source->text();
      while (s > 0 && (std::isalnum(static_cast<unsigned char>(t[s - 1])) || t[s - 1] == '_' ||
                       t[s - 1] == '.' || static_cast<unsigned char>(t[s - 1]) >= 0x80))
        --s;
      return s;
    };
    if constexpr (std::is_same_v<Rule, g::ellipsis_end> || std::is_same_v<Rule, g::name_end> ||
                  std::is_same_v<Rule, g::number_end>) {
      const SourceRange r = glued(token_begin());
      throw UserError(messages::glued_token(printable(b.source->slice(r))), b.source, r);
    } else if constexpr (std::is_same_v<Rule, g::close_paren>) {
      if (current(in) == "(") throw UserError(messages::nested_group(), b.source, here);
      if (in.empty() || current(in) == "-" || current(in) == ",") {
        throw UserError(messages::unclosed_group(), b.source, {b.group_begin, b.group_begin + 1});
      }
      throw UserError(messages::unexpected_character(printable(current(in))), b.source, here);
    } else if constexpr (std::is_same_v<Rule, g::end>) {
      const std::string_view rest(in.current(), in.size());
      if (rest.starts_with(")")) throw UserError(messages::unopened_group(), b.source, here);
      if (rest.starts_with("->")) throw UserError(messages::second_arrow(), b.source, {at, at + 2});
      if (rest.starts_with(",")) throw UserError(messages::comma_in_output(), b.source, here);
      const uint32_t len = utf8_char_size(rest);  // a whole character, or one invalid byte
      throw UserError(messages::unexpected_character(printable(rest.substr(0, len))), b.source,
                      {at, at + len});
    } else {
      throw UserError(messages::unexpected_character(printable(current(in))), b.source, here);
    }
  }
};

}  // namespace

Pattern parse_pattern(SourcePtr source) {
  Builder b;
  b.source = source;
  b.base = source->text().data();
  b.pattern.source = source;
  pegtl::memory_input<pegtl::tracking_mode::lazy> in(source->text(), source->name());
  pegtl::parse<g::grammar, action, control>(in, b);
  return std::move(b.pattern);
}

Pattern parse_pattern(std::string_view text) {
  return parse_pattern(make_source("pattern", std::string(text)));
}

}  // namespace ein
