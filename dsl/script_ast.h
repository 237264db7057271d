// The AST of `.ein` model scripts (docs/language.md): declarations (imports, dims, lets,
// modules, optimizers, functions, the train block), statements and expressions, every node
// with the SourceRange of its text in the script. The parser (dsl/script_parser.h) builds it;
// compiler/script_*.cpp give it meaning. Nodes are plain data: copying a Script is cheap
// because expressions are shared and immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ein/shape_spec_ast.h>
#include <ein/source.h>

namespace ein::script {

struct Expr;
/// Expressions are immutable once parsed, so subtrees are shared.
using ExprPtr = std::shared_ptr<const Expr>;

/// What an expression node is; the fields each kind uses are listed next to the fields.
enum class ExprKind : uint8_t {
  number,         ///< `3`, `0.02`, `1e-4`: value, is_integer
  string,         ///< `"b s (h d) -> b h s d"`: text (escapes resolved)
  name,           ///< `x`, `weight`, `inf`, `true`: text
  list,           ///< `[a, b, c]`: items
  comprehension,  ///< `[Block(D) for _ in 0..L]`: items {element, iterable}, text = variable
  range,          ///< `0..n` (half-open, Python's range(0, n)): items {lo, hi}
  tuple,          ///< `a, b` after `return`, or `(a, b)`: items
  unary,          ///< `-x`, `+x`: text = operator, items {operand}
  binary,         ///< `a + b`, `x @ w`, `a ** 2`, `i < j`: text = operator, items {lhs, rhs}
  call,           ///< `f(x, k = 2)`: items {callee}, args
  index,          ///< `x[:, -1]`, `layers[0]`: items {object}, indices
  attribute,      ///< `model.wte`, `m.weight`: items {object}, text = member name
};

/// One argument of a call: positional (`name` empty) or keyword (`std = 0.02`).
struct Arg {
  std::string name;        ///< keyword; empty for a positional argument
  ExprPtr value;           ///< never null
  SourceRange range;       ///< the whole argument, `name =` included
  SourceRange name_range;  ///< the keyword (empty range when positional)
};

/// One item of a subscript: `i`, `a:b` (either bound optional), or `...`.
struct IndexItem {
  enum class Kind : uint8_t { single, slice, ellipsis };
  Kind kind = Kind::single;
  ExprPtr value;       ///< single: the index
  ExprPtr start, stop; ///< slice: the bounds, each possibly null (`:n`, `n:`, `:`)
  ExprPtr step;        ///< slice: `a:b:step`, or null
  SourceRange range;   ///< the item's text
};

/// An expression node.
struct Expr {
  ExprKind kind = ExprKind::number;
  SourceRange range;             ///< the whole expression's text
  double value = 0;              ///< number
  bool is_integer = false;       ///< number written without `.` or exponent
  std::string text;              ///< string value, name, operator, member, loop variable
  std::vector<ExprPtr> items;    ///< operands, see ExprKind
  std::vector<Arg> args;         ///< call
  std::vector<IndexItem> indices;///< index
};

/// A parameter of a function, module, optimizer: `x: f32[B T D]`, `eps = 1e-5`, `in`.
struct Param {
  std::string name;
  std::optional<ShapeSpec> type;  ///< the annotation; its source is the script, ranges in it
  ExprPtr default_value;          ///< null: required
  SourceRange range;              ///< the whole parameter
  SourceRange name_range;         ///< the name
};

struct Stmt;

/// A statement of a function body.
struct Stmt {
  enum class Kind : uint8_t {
    assign,      ///< `x = e`, `a, b = e`: targets, value
    aug_assign,  ///< `x += e` (also -=, *=, /=): targets (one), op ("+", ...), value
    expr,        ///< `f(x)` on its own: value
    for_loop,    ///< `for layer in layers { ... }`: targets (the variable), value (iterable), body
    return_,     ///< `return e` or `return a, b` (a tuple): value (null for a bare `return`)
  };
  Kind kind = Kind::expr;
  std::vector<std::string> targets;       ///< assigned names (for_loop: the loop variable)
  std::vector<SourceRange> target_ranges; ///< one per target
  std::string op;                         ///< aug_assign's operator without `=`
  ExprPtr value;
  std::vector<Stmt> body;                 ///< for_loop
  SourceRange range;                      ///< the whole statement
};

/// A declaration: at top level, or inside a module, optimizer or train block.
struct Decl {
  enum class Kind : uint8_t {
    import_,    ///< `import nn` or `import "lib/blocks.ein"`: name (module name or path as
                ///< written; `is_path` tells which)
    dim,        ///< `dim D = 64`: name, value (an integer expression; `--set D=...` overrides)
    let,        ///< `let lr = 0.01`: name, value (any constant; `--set` overrides numbers)
    param,      ///< `param weight: f32[in out] = normal(std = 0.02)`: name, type, value
                ///< (the initialiser call; null means zeros)
    state,      ///< `state m` in an optimizer: per-parameter tensor, zeros shaped like p;
                ///< value: an optional initial-value expression
    member,     ///< `layers = [Block(D) for _ in 0..L]`, `steps = 100`: name, value
    function,   ///< `fn forward(x: f32[B D]) -> f32[B] { ... }`: name, params, result, body
                ///< (`= e` is parsed as `{ return e }`)
    module,     ///< `module Linear(in, out, bias = true) { ... }`: name, params, children
    optimizer,  ///< `optimizer AdamW(lr = 1e-3, ...) { state m, v  fn update(p, g, t) ... }`
    train,      ///< `train { model = ...  fn loss(...) ... }`: children (name empty)
  };
  Kind kind = Kind::let;
  std::string name;
  bool is_path = false;                 ///< import: written as a string literal
  std::optional<ShapeSpec> type;        ///< param: its shape spec; function: the result type
  ExprPtr value;
  std::vector<Param> params;            ///< function, module, optimizer
  std::vector<Stmt> body;               ///< function
  std::vector<Decl> children;           ///< module, optimizer, train: in source order
  SourceRange range;                    ///< the whole declaration
  SourceRange name_range;               ///< the declared name (the keyword for `train`)
};

/// A parsed script: its declarations in source order.
struct Script {
  SourcePtr source;
  std::vector<Decl> decls;
};

}  // namespace ein::script
