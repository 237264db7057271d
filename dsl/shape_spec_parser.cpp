// Builds the ShapeSpec AST from the PEGTL grammar in shape_spec_grammar.h. Actions collect
// each dim's prefixes, documentation name and core; when the dim ends they classify it the
// way jaxtyping 0.3.11 does (jaxtyping/_array_types.py) and reject the same combinations.
// Binding and comparing sizes is compiler/shape_check's job, not this file's.
#include <ein/shape_spec_parser.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <utility>
#include <vector>

#include <ein/diagnostic.h>
#include "dsl/shape_spec_grammar.h"
#include "dsl/shape_spec_messages.h"

namespace ein {
namespace {

namespace g = grammar::shape_spec;
namespace msg = detail::spec_msg;
namespace pegtl = tao::pegtl;

// What the actions have seen of the dim being parsed.
struct PendingDim {
  struct Prefix {
    char c;
    uint32_t at;
  };
  enum class Core { none, ellipsis, name, integer, symbolic };

  std::vector<Prefix> prefixes;
  std::string doc_name;
  Core core = Core::none;
  std::string text;  // name or integer literal
  int64_t size = 0;
  SizeExpr expr;
};

// A call whose arguments are being parsed: they sit on the stack above `depth`.
struct CallFrame {
  SizeFn fn;
  size_t depth;
};

// The parse state shared by all actions.
struct Builder {
  SourcePtr source;
  const char* base = nullptr;  // start of source->text(), for byte offsets
  ShapeSpec spec;
  PendingDim pending;
  std::vector<SizeExpr> stack;  // expression operands, innermost last
  std::vector<CallFrame> calls;
  uint32_t open_end = 0;  // just past `[`, where a scalar's dims_range points

  template <typename ActionInput>
  SourceRange range_of(const ActionInput& in) const {
    const auto begin = static_cast<uint32_t>(in.begin() - base);
    return {begin, begin + static_cast<uint32_t>(in.size())};
  }

  [[noreturn]] void fail(std::string message, SourceRange range) const {
    throw UserError(std::move(message), source, range);
  }

  int64_t parse_integer(std::string_view digits, SourceRange range) const {
    int64_t value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc() || end != digits.data() + digits.size())
      fail(fmt::format(msg::kIntegerTooLarge, digits), range);
    return value;
  }

  SizeExpr pop() {
    SizeExpr e = std::move(stack.back());
    stack.pop_back();
    return e;
  }

  // Folds the two top operands into a binary node; `text` starts with the operator.
  void fold_binary(std::string_view text) {
    const size_t i = text.find_first_not_of(" \t\n\r\v\f");
    SizeExpr rhs = pop();
    SizeExpr lhs = pop();
    SizeExpr node;
    node.kind = SizeExpr::Kind::binary;
    switch (text[i]) {
      case '+':
        node.op = SizeOp::add;
        break;
      case '-':
        node.op = SizeOp::sub;
        break;
      case '*':
        node.op = SizeOp::mul;
        break;
      default:
        node.op = SizeOp::floordiv;
        break;
    }
    node.range = lhs.range.merge(rhs.range);
    node.args.push_back(std::move(lhs));
    node.args.push_back(std::move(rhs));
    stack.push_back(std::move(node));
  }

  void finish_dim(SourceRange range);
};

// Classifies the pending dim like jaxtyping's prefix loop and appends it.
void Builder::finish_dim(SourceRange range) {
  PendingDim p = std::exchange(pending, PendingDim{});
  bool broadcastable = false, variadic = false, anonymous = false;
  bool* const flags[] = {&broadcastable, &variadic, &anonymous};
  constexpr const char* kTwice[] = {msg::kTwoHashes, msg::kTwoStars, msg::kTwoUnderscores};
  for (const PendingDim::Prefix& prefix : p.prefixes) {
    const SourceRange at{prefix.at, prefix.at + 1};
    if (prefix.c == '?') fail(msg::kTreePath, at);
    const int i = prefix.c == '#' ? 0 : prefix.c == '*' ? 1 : 2;
    if (*flags[i]) fail(kTwice[i], at);
    *flags[i] = true;
  }
  Dim dim;
  dim.range = range;
  dim.doc_name = std::move(p.doc_name);
  dim.broadcastable = broadcastable;
  switch (p.core) {
    case PendingDim::Core::ellipsis:
      if (!p.prefixes.empty() || !dim.doc_name.empty()) fail(msg::kEllipsisAlone, range);
      dim.kind = DimKind::anonymous_variadic;
      break;
    case PendingDim::Core::integer:
      if (variadic) fail(msg::kFixedVariadic, range);
      if (anonymous) fail(msg::kFixedAnonymous, range);
      dim.kind = DimKind::fixed;
      dim.size = p.size;
      break;
    case PendingDim::Core::none:
      if (!anonymous) fail(fmt::format(msg::kMissingCore, source->slice(range)), range);
      [[fallthrough]];
    case PendingDim::Core::name:
      if (anonymous && broadcastable) fail(msg::kAnonymousBroadcastable, range);
      if (anonymous)
        dim.kind = variadic ? DimKind::anonymous_variadic : DimKind::anonymous;
      else
        dim.kind = variadic ? DimKind::named_variadic : DimKind::named;
      dim.name = std::move(p.text);
      break;
    case PendingDim::Core::symbolic:
      if (anonymous) fail(msg::kSymbolicAnonymous, range);
      if (variadic) fail(msg::kSymbolicVariadic, range);
      dim.kind = DimKind::symbolic;
      dim.expr = std::move(p.expr);
      break;
  }
  spec.dims.push_back(std::move(dim));
}

template <typename Rule>
struct action : pegtl::nothing<Rule> {};

template <>
struct action<g::prefix_char> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    b.pending.prefixes.push_back({in.peek_char(), b.range_of(in).begin});
  }
};

template <>
struct action<g::doc_name> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    b.pending.doc_name = in.string().substr(0, in.size() - 1);  // without '='
  }
};

template <>
struct action<g::ellipsis> {
  template <typename ActionInput>
  static void apply(const ActionInput& /*in*/, Builder& b) {
    b.pending.core = PendingDim::Core::ellipsis;
  }
};

template <>
struct action<g::plain_name> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    b.pending.core = PendingDim::Core::name;
    b.pending.text = in.string();
  }
};

template <>
struct action<g::plain_int> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    b.pending.core = PendingDim::Core::integer;
    b.pending.size = b.parse_integer(in.string_view(), b.range_of(in));
  }
};

template <>
struct action<g::symbolic> {
  template <typename ActionInput>
  static void apply(const ActionInput& /*in*/, Builder& b) {
    b.pending.core = PendingDim::Core::symbolic;
    b.pending.expr = b.pop();
  }
};

template <>
struct action<g::dim> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    b.finish_dim(b.range_of(in));
  }
};

template <>
struct action<g::int_atom> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    SizeExpr e;
    e.kind = SizeExpr::Kind::integer;
    e.range = b.range_of(in);
    e.value = b.parse_integer(in.string_view(), e.range);
    b.stack.push_back(std::move(e));
  }
};

template <>
struct action<g::name_atom> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    SizeExpr e;
    e.kind = SizeExpr::Kind::name;
    e.name = in.string();
    e.range = b.range_of(in);
    b.stack.push_back(std::move(e));
  }
};

template <>
struct action<g::paren> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    b.stack.back().range = b.range_of(in);  // the parentheses belong to the subexpression
  }
};

template <>
struct action<g::call_head> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    const std::string_view name = in.string_view().substr(0, in.size() - 1);
    SourceRange range = b.range_of(in);
    range.end -= 1;
    if (name != "min" && name != "max") b.fail(fmt::format(msg::kUnknownFunction, name), range);
    b.calls.push_back({name == "min" ? SizeFn::min : SizeFn::max, b.stack.size()});
  }
};

template <>
struct action<g::call> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    const CallFrame frame = b.calls.back();
    b.calls.pop_back();
    SizeExpr e;
    e.kind = SizeExpr::Kind::call;
    e.fn = frame.fn;
    e.range = b.range_of(in);
    if (b.stack.size() - frame.depth < 2)
      b.fail(fmt::format(msg::kTooFewArguments, frame.fn == SizeFn::min ? "min" : "max"), e.range);
    for (size_t i = frame.depth; i < b.stack.size(); ++i)
      e.args.push_back(std::move(b.stack[i]));
    b.stack.resize(frame.depth);
    b.stack.push_back(std::move(e));
  }
};

template <bool Spaced>
struct action<g::mul_tail<Spaced>> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    b.fold_binary(in.string_view());
  }
};

template <bool Spaced>
struct action<g::add_tail<Spaced>> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    // The right operand may itself be a product: fold it first (done by mul_tail), then this.
    b.fold_binary(in.string_view());
  }
};

template <>
struct action<g::dtype_head> {
  template <typename ActionInput>
  static void apply(const ActionInput& in, Builder& b) {
    const std::string_view text = in.string_view();
    const size_t name_end = text.find_first_of(" \t\n\r\v\f[");
    const SourceRange all = b.range_of(in);
    DTypePart part;
    part.name = std::string(text.substr(0, name_end));
    part.range = {all.begin, all.begin + static_cast<uint32_t>(name_end)};
    const std::optional<DTypeSet> dtypes = dtype_category(part.name);
    if (!dtypes) {
      std::string known;
      for (const DTypeCategory& c : dtype_categories())
        known += (known.empty() ? "" : ", ") + std::string(c.name);
      throw UserError(fmt::format(msg::kUnknownDType, part.name), b.source, part.range)
          .note(fmt::format(msg::kKnownDTypesNote, known));
    }
    part.dtypes = *dtypes;
    b.spec.dtype = std::move(part);
    b.open_end = all.end;
  }
};

// Converts a grammar error into a UserError under the character it stopped at (a whole
// UTF-8 sequence, so the caret and the quoted text are never half a character).
UserError grammar_error(const SourcePtr& source, uint32_t offset, std::string_view message) {
  const std::string_view text = source->text();
  if (offset >= text.size())
    return UserError(fmt::format(msg::kGrammarError, msg::kUnexpectedEnd, message), source,
                     {offset, offset});
  const auto lead = static_cast<unsigned char>(text[offset]);
  uint32_t len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  len = std::min<uint32_t>(len, static_cast<uint32_t>(text.size() - offset));
  const std::string found = std::isspace(lead)
                                ? std::string(msg::kUnexpectedSpace)
                                : fmt::format(msg::kUnexpectedChar, text.substr(offset, len));
  return UserError(fmt::format(msg::kGrammarError, found, message), source, {offset, offset + len});
}

// Deeper nesting is refused before parsing: the grammar and every pass over expressions
// recurse, and no real size needs more than a few levels.
constexpr int kMaxNesting = 32;

void check_nesting(const SourcePtr& source) {
  int depth = 0;
  for (size_t i = 0; i < source->text().size(); ++i) {
    const char c = source->text()[i];
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (depth > kMaxNesting) {
      const auto at = static_cast<uint32_t>(i);
      throw UserError(fmt::format(msg::kTooDeep, kMaxNesting), source, {at, at + 1});
    }
  }
}

// Rules the parser enforces on the whole dim list: at most one variadic dim.
void validate(const ShapeSpec& spec) {
  const Dim* first_variadic = nullptr;
  for (const Dim& dim : spec.dims) {
    if (dim.kind != DimKind::anonymous_variadic && dim.kind != DimKind::named_variadic) continue;
    if (!first_variadic) {
      first_variadic = &dim;
      continue;
    }
    throw UserError(fmt::format(msg::kTwoVariadics, spec.source->slice(dim.range)), spec.source,
                    dim.range)
        .note_at(msg::kFirstVariadicNote, spec.source, first_variadic->range);
  }
}

}  // namespace

ShapeSpec parse_shape_spec(SourcePtr source) {
  Builder b;
  b.source = source;
  b.base = source->text().data();
  check_nesting(source);
  pegtl::memory_input in(source->text().data(), source->text().size(), source->name());
  try {
    pegtl::parse<g::spec, action, g::control>(in, b);
  } catch (const pegtl::parse_error& e) {
    throw grammar_error(source, static_cast<uint32_t>(e.positions().front().byte), e.message());
  }
  ShapeSpec spec = std::move(b.spec);
  spec.source = source;
  const std::string_view text = source->text();
  const size_t first = text.find_first_not_of(" \t\n\r\v\f");
  if (first != std::string_view::npos)
    spec.range = {static_cast<uint32_t>(first),
                  static_cast<uint32_t>(text.find_last_not_of(" \t\n\r\v\f") + 1)};
  if (!spec.dims.empty())
    spec.dims_range = spec.dims.front().range.merge(spec.dims.back().range);
  else
    spec.dims_range = {b.open_end, b.open_end};
  validate(spec);
  return spec;
}

ShapeSpec parse_shape_spec(std::string_view text) {
  return parse_shape_spec(make_source("shape spec", std::string(text)));
}

}  // namespace ein
