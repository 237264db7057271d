// `.ein` script text → AST with PEGTL (grammar in dsl/script_grammar.h). The operators are
// folded by the actions shared with map expressions (dsl/expr_builder.h); this file builds the
// atoms, brackets, declarations and statements, each on its own stack. A failed `must<>`
// becomes a UserError in dsl/script_errors.h, with the messages of dsl/script_messages.h.
// No semantic checks happen here.
#include "dsl/script_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <utility>

#include <ein/diagnostic.h>
#include "dsl/expr_builder.h"
#include "dsl/limits.h"
#include "dsl/script_errors.h"
#include "dsl/script_grammar.h"
#include "dsl/script_messages.h"
#include <ein/shape_spec_parser.h>

namespace ein::script {
namespace {

namespace g = grammar::script;
namespace pegtl = tao::pegtl;

namespace msg = ein::messages::script;

using limits::kMaxNesting;

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
  uint32_t height = 0;               // call, index: the tallest argument or index tree
  bool colon = false;                // index: the item being parsed has a ':'
  size_t before_colon = 0;           // index: operands of the item before the ':'
  bool step_colon = false;           // index: ... and a second ':' (a step follows)
  size_t before_step_colon = 0;      // index: operands of the item before the second ':'
};

// A new expression node of `kind` over `range`; the caller fills in the rest.
MutExpr make(ExprKind kind, SourceRange range) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->range = range;
  return e;
}

// How the shared operator folding (dsl/expr_builder.h) makes script nodes.
struct ScriptNodes {
  using Ptr = MutExpr;

  static Ptr unary(std::string_view op, SourceRange, Ptr operand, SourceRange range) {
    MutExpr e = make(ExprKind::unary, range);
    e->text = std::string(op);
    e->items = {std::move(operand)};
    return e;
  }
  static Ptr binary(std::string_view op, SourceRange, Ptr lhs, Ptr rhs, SourceRange range) {
    MutExpr e = make(ExprKind::binary, range);
    e->text = std::string(op);
    e->items = {std::move(lhs), std::move(rhs)};
    return e;
  }
  static std::string too_deep(uint32_t limit) { return msg::expression_too_deep(limit); }
};

// An open '{' and what it opens, for "expected '}' to close ...".
struct OpenBlock {
  uint32_t at = 0;
  std::string what;
};

// Parse state shared by all actions; the expression stacks are ExprBuilder's.
struct Builder : detail::ExprBuilder<ScriptNodes> {
  Script script;
  int bracket_depth = 0;  // read by the grammar's `sp` rule
  std::vector<uint32_t> open_brackets;
  std::vector<Frame> frames;
  std::vector<Decl> decls;  // being built, innermost last
  std::vector<Stmt> stmts;  // being built, innermost last
  std::vector<OpenBlock> blocks;
  uint32_t quote_at = 0;
  uint32_t number_begin = 0;
  uint32_t type_open_at = 0;

  [[noreturn]] void fail(std::string message, SourceRange range) const {
    throw UserError(std::move(message), source, range);
  }

  void check_nesting(SourceRange at) const {
    const size_t n = ops.size() + frames.size() + stmts.size();
    if (n > static_cast<size_t>(kMaxNesting)) fail(msg::too_deep(kMaxNesting), at);
  }
  // Hides ExprBuilder's: every operator counts towards the nesting bound.
  void on_operator(SourceRange at) const { check_nesting(at); }

  std::string where(uint32_t offset) const {
    const LineCol lc = source->locate(offset);
    return fmt::format("{}:{}", lc.line, lc.column);
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
struct action : detail::expr_action<Rule> {};

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
    MutExpr e = make(ExprKind::number, b.range_of(in));
    e->value = value;
    e->is_integer = text.find_first_of(".eE") == std::string_view::npos;
    b.push(std::move(e));
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
    MutExpr e = make(ExprKind::string, b.range_of(in));
    e->text = unescape(in.string_view());
    b.push(std::move(e));
  }
};

template <>
struct action<g::name_ref> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    MutExpr e = make(ExprKind::name, b.range_of(in));
    e->text = in.string();
    b.push(std::move(e));
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
    MutExpr e = make(ExprKind::tuple, b.range_of(in));
    const uint32_t height = b.take_items(f.depth, e->items) + 1;
    b.push(std::move(e), height, b.range_of(in));
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
    MutExpr e = make(f.comprehension ? ExprKind::comprehension : ExprKind::list, b.range_of(in));
    e->text = std::move(f.var);
    const uint32_t height = b.take_items(f.depth, e->items) + 1;
    b.push(std::move(e), height, b.range_of(in));
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
    f.height = std::max(f.height, b.top_height());
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
    f.height = std::max(f.height, b.top_height());
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
    const uint32_t height = std::max(f.height, b.top_height()) + 1;
    MutExpr callee = b.pop();
    MutExpr e = make(ExprKind::call, callee->range.merge(b.range_of(in)));
    e->items = {std::move(callee)};
    e->args = std::move(f.args);
    b.push(std::move(e), height, b.range_of(in));
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
struct action<g::slice_step_colon> {
  template <typename Input>
  static void apply(const Input&, Builder& b) {
    Frame& f = b.frames.back();
    f.step_colon = true;
    f.before_step_colon = b.operands.size() - f.depth;
  }
};

template <>
struct action<g::index_item> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    Frame& f = b.frames.back();
    IndexItem item;
    item.range = b.range_of(in);
    for (size_t i = f.depth; i < b.operands.size(); ++i)
      f.height = std::max(f.height, b.heights[i]);
    if (in.string_view() == "...") {
      item.kind = IndexItem::Kind::ellipsis;
    } else if (f.colon) {
      item.kind = IndexItem::Kind::slice;
      const size_t n = b.operands.size() - f.depth;
      const size_t before_step = f.step_colon ? f.before_step_colon : n;
      if (f.step_colon && n > f.before_step_colon) item.step = b.pop();
      if (before_step > f.before_colon) item.stop = b.pop();
      if (f.before_colon == 1) item.start = b.pop();
    } else {
      item.value = b.pop();
    }
    f.colon = false;
    f.before_colon = 0;
    f.step_colon = false;
    f.before_step_colon = 0;
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
    const uint32_t height = std::max(f.height, b.top_height()) + 1;
    MutExpr object = b.pop();
    MutExpr e = make(ExprKind::index, object->range.merge(b.range_of(in)));
    e->items = {std::move(object)};
    e->indices = std::move(f.indices);
    b.push(std::move(e), height, b.range_of(in));
  }
};

template <>
struct action<g::attr_name> {
  template <typename Input>
  static void apply(const Input& in, Builder& b) {
    const uint32_t height = b.top_height() + 1;
    MutExpr object = b.pop();
    MutExpr e = make(ExprKind::attribute, object->range.merge(b.range_of(in)));
    e->text = in.string();
    e->items = {std::move(object)};
    b.push(std::move(e), height, b.range_of(in));
  }
};

// ---- ranges: the one operator above the shared ladder, folded the same way ----

template <>
struct action<g::range_op> : detail::remember_operator {};
template <>
struct action<g::range_tail> : detail::fold_binary_operator {};

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
    MutExpr e = make(ExprKind::tuple, b.range_of(in));
    b.take_items(0, e->items);  // a statement's value: nothing builds on it
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
    std::string what = b.stmts.empty() ? errors::block_owner(b.decls.back()) : "the for loop";
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

}  // namespace

Script parse_script(SourcePtr source) {
  Builder b;
  b.source = source;
  b.base = source->text().data();
  b.script.source = source;
  pegtl::memory_input<pegtl::tracking_mode::lazy> in(source->text(), source->name());
  pegtl::parse<g::grammar, action, errors::control>(in, b);
  return std::move(b.script);
}

}  // namespace ein::script
