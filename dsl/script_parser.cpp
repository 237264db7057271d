// `.ein` script text → AST with PEGTL (grammar in dsl/script_grammar.h). Actions push
// operands on a stack and fold each operator when its right operand is complete; brackets,
// declarations and statements being built sit on their own stacks. The control class turns a
// failed `must<>` into a UserError under the offending token; every message is in the
// `msg` namespace below so they can be reviewed together. No semantic checks happen here.
#include "dsl/script_parser.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <string_view>
#include <type_traits>
#include <utility>

#include <ein/diagnostic.h>
#include "dsl/script_grammar.h"
#include "dsl/script_messages.h"
#include <ein/shape_spec_parser.h>

namespace ein::script {
namespace {

namespace g = grammar::script;
namespace pegtl = tao::pegtl;

namespace msg = ein::messages::script;

constexpr int kMaxNesting = 100;

using MutExpr = std::shared_ptr<Expr>;

// A bracketed expression construct being parsed: its operands sit above `depth`.
struct Frame {
  enum class Kind : uint8_t { paren, list, call, index };
  Kind kind = Kind::paren;
  size_t depth = 0;
  bool comma = false;          // paren: `(a,)` is a tuple
  bool comprehension = false;  // list
  std::string var;             // list: the comprehension variable
  std::string keyword;         // call: the keyword of the argument being parsed
  SourceRange keyword_range;
  std::vector<Arg> args;             // call
  std::vector<IndexItem> indices;    // index
  bool colon = false;                // index: the item being parsed has a ':'
  size_t before_colon = 0;           // index: operands of the item before the ':'
};

// An operator whose right operand is being parsed.
struct PendingOp {
  std::string text;
  SourceRange range;
};

// An open '{' and what it opens, for "expected '}' to close ...".
struct OpenBlock {
  uint32_t at = 0;
  std::string what;
};

// Parse state shared by all actions.
struct Builder {
  SourcePtr source;
  const char* base = nullptr;
  Script script;
  int bracket_depth = 0;  // read by the grammar's `sp` rule
  std::vector<uint32_t> open_brackets;
  std::vector<MutExpr> operands;
  std::vector<PendingOp> ops;
  std::vector<Frame> frames;
  std::vector<Decl> decls;  // being built, innermost last
  std::vector<Stmt> stmts;  // being built, innermost last
  std::vector<OpenBlock> blocks;
  uint32_t quote_at = 0;
  uint32_t number_begin = 0;
  uint32_t type_open_at = 0;

  template <typename Input>
  SourceRange range_of(const Input& in) const {
    const auto b = static_cast<uint32_t>(in.begin() - base);
    return {b, b + static_cast<uint32_t>(in.size())};
  }

  [[noreturn]] void fail(std::string message, SourceRange range) const {
    throw UserError(std::move(message), source, range);
  }

  void check_nesting(SourceRange at) const {
    const size_t n = ops.size() + frames.size() + stmts.size();
    if (n > static_cast<size_t>(kMaxNesting)) fail(msg::too_deep(kMaxNesting), at);
  }

  std::string where(uint32_t offset) const {
    const LineCol lc = source->locate(offset);
    return fmt::format("{}:{}", lc.line, lc.column);
  }

  MutExpr make(ExprKind kind, SourceRange range) const {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->range = range;
    return e;
  }

  MutExpr pop() {
    MutExpr e = std::move(operands.back());
    operands.pop_back();
    return e;
  }

  // Moves the operands above `depth` into `items`.
  void take_items(size_t depth, std::vector<ExprPtr>& items) {
    for (size_t i = depth; i < operands.size(); ++i)
      items.push_back(std::move(operands[i]));
    operands.resize(depth);
  }

  void open_bracket(SourceRange at) {
    check_nesting(at);
    open_brackets.push_back(at.begin);
    ++bracket_depth;
  }
  void close_bracket() {
    open_brackets.pop_back();
    --bracket_depth;
  }

  void fold_unary() {
    PendingOp op = std::move(ops.back());
    ops.pop_back();
    MutExpr operand = pop();
    MutExpr e = make(ExprKind::unary, op.range.merge(operand->range));
    e->text = std::move(op.text);
    e->items = {std::move(operand)};
    operands.push_back(std::move(e));
  }

  void fold_binary() {
    PendingOp op = std::move(ops.back());
    ops.pop_back();
    MutExpr rhs = pop();
    MutExpr lhs = pop();
    MutExpr e = make(ExprKind::binary, lhs->range.merge(rhs->range));
    e->text = std::move(op.text);
    e->items = {std::move(lhs), std::move(rhs)};
    operands.push_back(std::move(e));
  }

  // A completed declaration goes into its enclosing block, or the script.
  void finish_decl(SourceRange range) {
    Decl d = std::move(decls.back());
    decls.pop_back();
    d.range = range;
    if (decls.empty())
      script.decls.push_back(std::move(d));
    else
      decls.back().children.push_back(std::move(d));
  }

  void push_decl(Decl::Kind kind) {
    decls.emplace_back();
    decls.back().kind = kind;
  }
};

// `s` with the escapes of a string literal (quotes included) resolved.
std::string unescape(std::string_view quoted) {
  std::string out;
  for (size_t i = 1; i + 1 < quoted.size(); ++i) {
    char c = quoted[i];
    if (c == '\\') {
      c = quoted[++i];
      c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
    }
    out += c;
  }
  return out;
}

void shift(SourceRange& r, uint32_t by) {
  r.begin += by;
  r.end += by;
}
void shift(SizeExpr& e, uint32_t by) {
  shift(e.range, by);
  for (SizeExpr& a : e.args)
    shift(a, by);
}

// Parses the type text at `offset` of the script with parse_shape_spec and moves every range
// (and any error) into the script, so carets land in the .ein file.
ShapeSpec parse_type(const Builder& b, std::string text, uint32_t offset) {
  const SourcePtr local = make_source(b.source->name(), std::move(text));
  ShapeSpec spec;
  try {
    spec = parse_shape_spec(local);
  } catch (const UserError& e) {
    if (e.source() != local) throw;
    SourceRange r = e.range();
    shift(r, offset);
    UserError moved(e.message(), b.source, r);
    for (const DiagnosticNote& n : e.notes()) {
      if (n.source == local) {
        SourceRange nr = n.range;
        shift(nr, offset);
        moved.note_at(n.text, b.source, nr);
      } else if (n.source) {
        moved.note_at(n.text, n.source, n.range);
      } else {
        moved.note(n.text);
      }
    }
    throw moved;
  }
  shift(spec.range, offset);
  shift(spec.dims_range, offset);
  if (spec.dtype) shift(spec.dtype->range, offset);
  for (Dim& d : spec.dims) {
    shift(d.range, offset);
    if (d.kind == DimKind::symbolic) shift(d.expr, offset);
  }
  spec.source = b.source;
  return spec;
}

template <typename Rule>
struct action : pegtl::nothing<Rule> {};

// ---- literals and names ----

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
    const std::string_view text = in.string_view();
    double value = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || ptr != text.data() + text.size())
      b.fail(msg::number_out_of_range(text), b.range_of(in));
    MutExpr e = b.make(ExprKind::number, b.range_of(in));
    e->value = value;
    e->is_integer = text.find_first_of(".eE") == std::string_view::npos;
    b.operands.push_back(std::move(e));
  }
};

template <>
struct action<g::quote_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.quote_at = b.range_of(in).begin;
  }
};

template <>
struct action<g::string_lit> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    MutExpr e = b.make(ExprKind::string, b.range_of(in));
    e->text = unescape(in.string_view());
    b.operands.push_back(std::move(e));
  }
};

template <>
struct action<g::name_ref> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    MutExpr e = b.make(ExprKind::name, b.range_of(in));
    e->text = in.string();
    b.operands.push_back(std::move(e));
  }
};

// ---- brackets ----

template <typename Input>
void open_frame(const Input& in, Builder& b, Frame::Kind kind) {
  b.open_bracket(b.range_of(in));
  b.frames.emplace_back();
  b.frames.back().kind = kind;
  b.frames.back().depth = b.operands.size();
}

template <>
struct action<g::paren_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    open_frame(in, b, Frame::Kind::paren);
  }
};

template <>
struct action<g::paren_comma> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.frames.back().comma = true;
  }
};

template <>
struct action<g::paren> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame f = std::move(b.frames.back());
    b.frames.pop_back();
    b.close_bracket();
    if (!f.comma && b.operands.size() == f.depth + 1) {
      b.operands.back()->range = b.range_of(in);  // the parentheses belong to the operand
      return;
    }
    MutExpr e = b.make(ExprKind::tuple, b.range_of(in));
    b.take_items(f.depth, e->items);
    b.operands.push_back(std::move(e));
  }
};

template <>
struct action<g::list_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    open_frame(in, b, Frame::Kind::list);
  }
};

template <>
struct action<g::comp_var> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.frames.back().comprehension = true;
    b.frames.back().var = in.string();
  }
};

template <>
struct action<g::list> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame f = std::move(b.frames.back());
    b.frames.pop_back();
    b.close_bracket();
    MutExpr e = b.make(f.comprehension ? ExprKind::comprehension : ExprKind::list, b.range_of(in));
    e->text = std::move(f.var);
    b.take_items(f.depth, e->items);
    b.operands.push_back(std::move(e));
  }
};

template <>
struct action<g::call_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    open_frame(in, b, Frame::Kind::call);
  }
};

template <>
struct action<g::kw_name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.frames.back().keyword = in.string();
    b.frames.back().keyword_range = b.range_of(in);
  }
};

template <>
struct action<g::kw_arg> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame& f = b.frames.back();
    f.args.push_back({std::move(f.keyword), b.pop(), b.range_of(in), f.keyword_range});
  }
};

template <>
struct action<g::pos_arg> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame& f = b.frames.back();
    if (!f.args.empty() && !f.args.back().name.empty())
      b.fail(msg::keyword_args_first(), b.range_of(in));
    f.args.push_back({"", b.pop(), b.range_of(in), {}});
  }
};

template <>
struct action<g::call> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame f = std::move(b.frames.back());
    b.frames.pop_back();
    b.close_bracket();
    MutExpr callee = b.pop();
    MutExpr e = b.make(ExprKind::call, callee->range.merge(b.range_of(in)));
    e->items = {std::move(callee)};
    e->args = std::move(f.args);
    b.operands.push_back(std::move(e));
  }
};

template <>
struct action<g::index_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    open_frame(in, b, Frame::Kind::index);
  }
};

template <>
struct action<g::slice_colon> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    Frame& f = b.frames.back();
    f.colon = true;
    f.before_colon = b.operands.size() - f.depth;
  }
};

template <>
struct action<g::index_item> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame& f = b.frames.back();
    IndexItem item;
    item.range = b.range_of(in);
    if (in.string_view() == "...") {
      item.kind = IndexItem::Kind::ellipsis;
    } else if (f.colon) {
      item.kind = IndexItem::Kind::slice;
      const size_t n = b.operands.size() - f.depth;
      if (n > f.before_colon) item.stop = b.pop();
      if (f.before_colon == 1) item.start = b.pop();
    } else {
      item.value = b.pop();
    }
    f.colon = false;
    f.before_colon = 0;
    f.indices.push_back(std::move(item));
  }
};

template <>
struct action<g::index> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame f = std::move(b.frames.back());
    b.frames.pop_back();
    b.close_bracket();
    MutExpr object = b.pop();
    MutExpr e = b.make(ExprKind::index, object->range.merge(b.range_of(in)));
    e->items = {std::move(object)};
    e->indices = std::move(f.indices);
    b.operands.push_back(std::move(e));
  }
};

template <>
struct action<g::attr_name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    MutExpr object = b.pop();
    MutExpr e = b.make(ExprKind::attribute, object->range.merge(b.range_of(in)));
    e->text = in.string();
    e->items = {std::move(object)};
    b.operands.push_back(std::move(e));
  }
};

// ---- operators: remembered when matched, folded when the right operand is complete ----

template <>
struct action<g::pow_op> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.check_nesting(b.range_of(in));
    b.ops.push_back({in.string(), b.range_of(in)});
  }
};
template <>
struct action<g::unary_op> : action<g::pow_op> {};
template <>
struct action<g::mul_op> : action<g::pow_op> {};
template <>
struct action<g::add_op> : action<g::pow_op> {};
template <>
struct action<g::cmp_op> : action<g::pow_op> {};
template <>
struct action<g::range_op> : action<g::pow_op> {};

template <>
struct action<g::negation> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.fold_unary();
  }
};

template <>
struct action<g::power_tail> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.fold_binary();
  }
};
template <>
struct action<g::product_tail> : action<g::power_tail> {};
template <>
struct action<g::sum_tail> : action<g::power_tail> {};
template <>
struct action<g::compare_tail> : action<g::power_tail> {};
template <>
struct action<g::range_tail> : action<g::power_tail> {};

// ---- types ----

template <>
struct action<g::type_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.type_open_at = b.range_of(in).begin;
  }
};

template <>
struct action<g::type_required> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.decls.back().type = parse_type(b, in.string(), b.range_of(in).begin);
  }
};
template <>
struct action<g::result_type> : action<g::type_required> {};

template <>
struct action<g::param_type> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.decls.back().params.back().type = parse_type(b, in.string(), b.range_of(in).begin);
  }
};

// ---- statements ----

template <>
struct action<g::stmt_begin> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.check_nesting(b.range_of(in));
    b.stmts.emplace_back();
  }
};

template <>
struct action<g::for_var> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Stmt& s = b.stmts.back();
    s.kind = Stmt::Kind::for_loop;
    s.targets.push_back(in.string());
    s.target_ranges.push_back(b.range_of(in));
  }
};
template <>
struct action<g::target> : action<g::for_var> {};

template <>
struct action<g::for_iterable> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.stmts.back().value = b.pop();
  }
};
template <>
struct action<g::value> : action<g::for_iterable> {};

template <>
struct action<g::return_kw> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.stmts.back().kind = Stmt::Kind::return_;
  }
};

template <>
struct action<g::return_value> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    if (b.operands.size() == 1) {
      b.stmts.back().value = b.pop();
      return;
    }
    MutExpr e = b.make(ExprKind::tuple, b.range_of(in));
    b.take_items(0, e->items);
    b.stmts.back().value = std::move(e);
  }
};

template <>
struct action<g::aug_op> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.stmts.back().op = std::string(in.string_view().substr(0, 1));
  }
};

template <>
struct action<g::assign_stmt> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.stmts.back().kind = Stmt::Kind::assign;
  }
};

template <>
struct action<g::aug_stmt> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.stmts.back().kind = Stmt::Kind::aug_assign;
  }
};

template <>
struct action<g::expr_stmt> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.stmts.back().kind = Stmt::Kind::expr;
    b.stmts.back().value = b.pop();
  }
};

template <>
struct action<g::stmt> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Stmt s = std::move(b.stmts.back());
    b.stmts.pop_back();
    s.range = b.range_of(in);
    if (b.stmts.empty())
      b.decls.back().body.push_back(std::move(s));
    else
      b.stmts.back().body.push_back(std::move(s));
  }
};

// ---- blocks ----

template <>
struct action<g::brace_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    std::string what;
    if (!b.stmts.empty()) {
      what = "the for loop";
    } else {
      const Decl& d = b.decls.back();
      switch (d.kind) {
        case Decl::Kind::module: what = fmt::format("the module '{}'", d.name); break;
        case Decl::Kind::optimizer: what = fmt::format("the optimizer '{}'", d.name); break;
        case Decl::Kind::train: what = "the train block"; break;
        default: what = fmt::format("the function '{}'", d.name); break;
      }
    }
    b.blocks.push_back({b.range_of(in).begin, std::move(what)});
  }
};

template <>
struct action<g::brace_close> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.blocks.pop_back();
  }
};

// ---- declarations ----

template <Decl::Kind K>
struct push_decl_action {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.push_decl(K);
    if (K == Decl::Kind::train) b.decls.back().name_range = b.range_of(in);
  }
};
template <>
struct action<g::kw_import> : push_decl_action<Decl::Kind::import_> {};
template <>
struct action<g::kw_dim> : push_decl_action<Decl::Kind::dim> {};
template <>
struct action<g::kw_let> : push_decl_action<Decl::Kind::let> {};
template <>
struct action<g::kw_module> : push_decl_action<Decl::Kind::module> {};
template <>
struct action<g::kw_optimizer> : push_decl_action<Decl::Kind::optimizer> {};
template <>
struct action<g::kw_train> : push_decl_action<Decl::Kind::train> {};
template <>
struct action<g::kw_fn> : push_decl_action<Decl::Kind::function> {};
template <>
struct action<g::kw_param> : push_decl_action<Decl::Kind::param> {};

template <>
struct action<g::decl_name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.decls.back().name = in.string();
    b.decls.back().name_range = b.range_of(in);
  }
};
template <>
struct action<g::import_name> : action<g::decl_name> {};

template <>
struct action<g::import_path> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.decls.back().name = unescape(in.string_view());
    b.decls.back().name_range = b.range_of(in);
    b.decls.back().is_path = true;
  }
};

template <Decl::Kind K>
struct named_decl_action {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.push_decl(K);
    b.decls.back().name = in.string();
    b.decls.back().name_range = b.range_of(in);
  }
};
template <>
struct action<g::member_name> : named_decl_action<Decl::Kind::member> {};
template <>
struct action<g::state_name> : named_decl_action<Decl::Kind::state> {};

template <>
struct action<g::decl_value> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.decls.back().value = b.pop();
  }
};

template <>
struct action<g::param_name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Param p;
    p.name = in.string();
    p.name_range = b.range_of(in);
    b.decls.back().params.push_back(std::move(p));
  }
};

template <>
struct action<g::param_default> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.decls.back().params.back().default_value = b.pop();
  }
};

template <>
struct action<g::param> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.decls.back().params.back().range = b.range_of(in);
  }
};

template <>
struct action<g::params_open> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.open_bracket(b.range_of(in));
  }
};

template <>
struct action<g::params_close> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    b.close_bracket();
  }
};

template <>
struct action<g::fn_expr_body> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    Stmt s;
    s.kind = Stmt::Kind::return_;
    s.value = b.pop();
    s.range = s.value->range;
    b.decls.back().body.push_back(std::move(s));
  }
};

struct finish_decl_action {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    b.finish_decl(b.range_of(in));
  }
};
template <>
struct action<g::import_decl> : finish_decl_action {};
template <>
struct action<g::dim_decl> : finish_decl_action {};
template <>
struct action<g::let_decl> : finish_decl_action {};
template <>
struct action<g::fn_decl> : finish_decl_action {};
template <>
struct action<g::param_decl> : finish_decl_action {};
template <>
struct action<g::member_decl> : finish_decl_action {};
template <>
struct action<g::state_item> : finish_decl_action {};
template <>
struct action<g::module_decl> : finish_decl_action {};
template <>
struct action<g::optimizer_decl> : finish_decl_action {};
template <>
struct action<g::train_decl> : finish_decl_action {};

// ---- errors ----

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Characters that can start or continue some token (or are whitespace); anything else is
// a stray character.
bool is_token_char(char c) {
  return is_word_char(c) || std::string_view(" \t\r\n\"#()[]{},.:;=+-*/%@<>!").find(c) !=
                                std::string_view::npos;
}

// The token at `at`: a run of name/number characters, or one (UTF-8) character; a point at
// the end of the text.
SourceRange token_at(std::string_view text, uint32_t at) {
  if (at >= text.size()) return {static_cast<uint32_t>(text.size()), static_cast<uint32_t>(text.size())};
  if (!is_word_char(text[at])) return {at, at + utf8_char_size(text.substr(at))};
  uint32_t e = at;
  while (e < text.size() && is_word_char(text[e]))
    ++e;
  return {at, e};
}

// The token before `at`, skipping whitespace: what an expected expression would follow.
std::string_view token_before(std::string_view text, uint32_t at) {
  uint32_t e = std::min<uint32_t>(at, static_cast<uint32_t>(text.size()));
  while (e > 0 && std::isspace(static_cast<unsigned char>(text[e - 1])))
    --e;
  if (e == 0) return "";
  uint32_t s = e - 1;
  if (is_word_char(text[s])) {
    while (s > 0 && is_word_char(text[s - 1]))
      --s;
  } else {
    constexpr std::string_view op_chars = "+-*/%@<>=!.";
    while (s > 0 && e - s < 3 && op_chars.find(text[s]) != std::string_view::npos &&
           op_chars.find(text[s - 1]) != std::string_view::npos)
      --s;
  }
  return text.substr(s, e - s);
}

bool is_keyword(std::string_view word) {
  for (std::string_view kw : {"import", "dim", "let", "module", "optimizer", "train", "fn",
                              "param", "state", "for", "return"})
    if (word == kw) return true;
  return false;
}

// Where a keyword may appear, for a keyword found in the wrong block.
std::string misplaced(std::string_view kw) {
  if (kw == "param") return msg::only_inside(kw, "inside a module");
  if (kw == "state") return msg::only_inside(kw, "inside an optimizer");
  if (kw == "return" || kw == "for") return msg::only_inside(kw, "inside a function body");
  if (kw == "fn") return msg::nested_fn();
  return msg::only_inside(kw, "at the top level");
}

template <typename Rule, typename... Rules>
inline constexpr bool is_one_of = (std::is_same_v<Rule, Rules> || ...);

// Turns a failed must<Rule> into a UserError. Every parse message is chosen here.
template <typename Rule>
struct control : pegtl::normal<Rule> {
  template <typename Input, typename... States>
  [[noreturn]] static void raise(const Input& in, Builder& b, States&&...) {
    const std::string_view text = b.source->text();
    const auto at = static_cast<uint32_t>(in.current() - b.base);
    const SourceRange token = token_at(text, at);
    const std::string found = printable(b.source->slice(token));
    const bool word = token.size() > 0 && is_word_char(text[at]);
    const bool kw = word && is_keyword(found);

    if constexpr (is_one_of<Rule, g::quote_close>) {
      b.fail(msg::unterminated_string(), {b.quote_at, b.quote_at + 1});
    } else if constexpr (is_one_of<Rule, g::escape_char>) {
      const SourceRange r{at - 1, token.end};
      b.fail(msg::unknown_escape(printable(b.source->slice(r))), r);
    } else if constexpr (is_one_of<Rule, g::number_end, g::exponent_digits>) {
      uint32_t e = at;
      while (e < text.size() && (is_word_char(text[e]) || text[e] == '.'))
        ++e;
      const SourceRange r{b.number_begin, e};
      b.fail(msg::bad_number(printable(b.source->slice(r))), r);
    } else if constexpr (is_one_of<Rule, g::type_close>) {
      b.fail(msg::unclosed_type(), {b.type_open_at, b.type_open_at + 1});
    }
    if (at < text.size() && !is_token_char(text[at]))
      b.fail(msg::unexpected_character(found), token);

    if constexpr (is_one_of<Rule, g::operand, g::unary_operand, g::product_operand,
                            g::sum_operand, g::compare_operand, g::range_operand>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_expression(b.ops.back().text, found), token);
    } else if constexpr (is_one_of<Rule, g::item, g::arg, g::kw_value, g::comp_iterable,
                                   g::for_iterable, g::value, g::decl_value, g::param_default,
                                   g::fn_expr_body, g::return_value, g::slice_stop>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_expression(token_before(text, at), found), token);
    } else if constexpr (is_one_of<Rule, g::decl_name, g::for_var, g::comp_var, g::attr_name,
                                   g::state_item>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_name(token_before(text, at), found), token);
    } else if constexpr (is_one_of<Rule, g::param>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_param(found), token);
    } else if constexpr (is_one_of<Rule, g::import_target>) {
      if (kw) b.fail(msg::keyword_as_name(found), token);
      b.fail(msg::expected_import(found), token);
    } else if constexpr (is_one_of<Rule, g::paren_close, g::call_close, g::params_close,
                                   g::list_close, g::index_close>) {
      const char close = is_one_of<Rule, g::list_close, g::index_close> ? ']' : ')';
      if (found == "=") b.fail(msg::bad_assignment_target(), token);
      b.fail(msg::expected_close(close, b.where(b.open_brackets.back()), found), token);
    } else if constexpr (is_one_of<Rule, g::brace_close>) {
      b.fail(msg::unclosed_brace(b.blocks.back().what, b.where(b.blocks.back().at)), token);
    } else if constexpr (is_one_of<Rule, g::module_block, g::optimizer_block, g::train_block>) {
      const Decl& d = b.decls.back();
      const std::string what = d.kind == Decl::Kind::train ? "the train block"
                               : d.kind == Decl::Kind::module
                                   ? fmt::format("the module '{}'", d.name)
                                   : fmt::format("the optimizer '{}'", d.name);
      b.fail(msg::expected_body(what, found), token);
    } else if constexpr (is_one_of<Rule, g::for_block>) {
      b.fail(msg::expected_body("the for loop", found), token);
    } else if constexpr (is_one_of<Rule, g::fn_body>) {
      b.fail(msg::expected_fn_body(b.decls.back().name, found), token);
    } else if constexpr (is_one_of<Rule, g::params>) {
      b.fail(msg::expected_fn_params(b.decls.back().name), token);
    } else if constexpr (is_one_of<Rule, g::top_item, g::module_item, g::optimizer_item,
                                   g::train_item, g::stmt>) {
      if (kw) b.fail(misplaced(found), token);
      if constexpr (is_one_of<Rule, g::top_item>) {
        size_t e = token.end;
        while (e < text.size() && (text[e] == ' ' || text[e] == '\t'))
          ++e;
        if (word && e < text.size() && text[e] == '=' &&
            (e + 1 >= text.size() || text[e + 1] != '='))
          b.fail(msg::top_level_assignment(found), token);
        b.fail(msg::expected_declaration(found), token);
      } else if constexpr (is_one_of<Rule, g::module_item>) {
        b.fail(msg::module_body(found), token);
      } else if constexpr (is_one_of<Rule, g::optimizer_item>) {
        b.fail(msg::optimizer_body(found), token);
      } else if constexpr (is_one_of<Rule, g::train_item>) {
        b.fail(msg::train_body(found), token);
      } else {
        b.fail(msg::expected_statement(found), token);
      }
    } else if constexpr (is_one_of<Rule, g::item_end>) {
      const std::string_view rest = text.substr(at);
      if (rest.starts_with("=") || (rest.size() > 1 && rest[1] == '=' &&
                                    std::string_view("+-*/").find(rest[0]) != std::string_view::npos))
        b.fail(msg::bad_assignment_target(), token);
      b.fail(msg::expected_end(found), token);
    } else if constexpr (is_one_of<Rule, g::compare_not_chained>) {
      const uint32_t width = at + 1 < text.size() && text[at + 1] == '=' ? 2 : 1;
      b.fail(msg::chained_comparison(text.substr(at, width)), {at, at + width});
    } else if constexpr (is_one_of<Rule, g::range_not_chained>) {
      b.fail(msg::chained_range(), {at, at + 2});
    } else if constexpr (is_one_of<Rule, g::type_required, g::param_type, g::result_type>) {
      b.fail(msg::expected_type(found), token);
    } else if constexpr (is_one_of<Rule, g::type_open>) {
      const std::string_view dtype = token_before(text, at);
      b.fail(msg::type_needs_brackets(dtype), token);
    } else if constexpr (is_one_of<Rule, g::decl_eq>) {
      const Decl& d = b.decls.back();
      b.fail(msg::expected_eq(d.kind == Decl::Kind::dim ? "dim" : "let", d.name), token);
    } else if constexpr (is_one_of<Rule, g::param_colon>) {
      b.fail(msg::param_needs_type(b.decls.back().name), token);
    } else if constexpr (is_one_of<Rule, g::for_in, g::comp_in>) {
      b.fail(msg::expected_in(token_before(text, at), found), token);
    } else if constexpr (is_one_of<Rule, g::index_item>) {
      b.fail(msg::expected_index(found), token);
    } else {
      b.fail(msg::unexpected(found), token);
    }
  }
};

}  // namespace

Script parse_script(SourcePtr source) {
  Builder b;
  b.source = source;
  b.base = source->text().data();
  b.script.source = source;
  pegtl::memory_input<pegtl::tracking_mode::lazy> in(source->text(), source->name());
  pegtl::parse<g::grammar, action, control>(in, b);
  return std::move(b.script);
}

}  // namespace ein::script
