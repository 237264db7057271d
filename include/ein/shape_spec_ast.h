// The typed AST of a jaxtyping-style shape spec such as `f32[*batch seq d_model]` or
// `Float[b c1 c2]`: an optional dtype part and a list of dims, every node with its SourceRange.
// Building it is the parser's job and giving it meaning is compiler/shape_check's; this file
// only holds the data and a structural equality that ignores ranges.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ein/dtype.h>

#include <ein/source.h>

namespace ein {

/// Binary operators of symbolic sizes, with Python's meaning (`//` floors toward -infinity).
enum class SizeOp : uint8_t { add, sub, mul, floordiv };

/// Functions a symbolic size may call.
enum class SizeFn : uint8_t { min, max };

/// A node of a symbolic size expression: `seq-1`, `2*d`, `min(a,b)`, `(h+1)//2`.
struct SizeExpr {
  /// Which kind of node this is; the fields it uses are listed next to each field.
  enum class Kind : uint8_t { integer, name, binary, call };

  Kind kind = Kind::integer;   ///< the node kind
  int64_t value = 0;           ///< integer: the literal
  std::string name;            ///< name: the dim it reads
  SizeOp op = SizeOp::add;     ///< binary: the operator
  SizeFn fn = SizeFn::min;     ///< call: the function
  std::vector<SizeExpr> args;  ///< binary: {lhs, rhs}; call: the arguments (two or more)
  SourceRange range;           ///< the text of this subexpression, parentheses included
};

/// What a dim matches.
enum class DimKind : uint8_t {
  named,               ///< `batch`: binds on first use, must be equal afterwards
  fixed,               ///< `4`: exactly that size
  anonymous,           ///< `_` or `_name`: any size, binds nothing
  anonymous_variadic,  ///< `...` or `*_`: any number of dims, binds nothing
  named_variadic,      ///< `*batch`: any number of dims, binds the tuple of sizes
  symbolic,            ///< `seq-1`, `min(a,b)`: evaluated from bound sizes, binds nothing
};

/// One dim of a shape spec.
struct Dim {
  DimKind kind = DimKind::named;  ///< what it matches
  bool broadcastable = false;     ///< `#`: size 1 matches too (variadics: numpy broadcasting)
  std::string name;               ///< named, named_variadic; the optional label of `_label`
  int64_t size = 0;               ///< fixed: the size
  SizeExpr expr;                  ///< symbolic: the expression
  std::string doc_name;           ///< `rows` of `rows=4`: documentation only, never checked
  SourceRange range;              ///< the whole dim, prefixes and `doc=` included
};

/// The part before `[`: a dtype category name such as `f32`, `Float` or `Int64`.
struct DTypePart {
  std::string name;   ///< as written
  DTypeSet dtypes;    ///< what the name accepts (resolved by the parser)
  SourceRange range;  ///< the name
};

/// A parsed shape spec. No dtype part (a bare `batch seq hidden`) means any dtype.
struct ShapeSpec {
  std::optional<DTypePart> dtype;  ///< absent for a bare dims string
  std::vector<Dim> dims;           ///< in order; empty for a scalar
  SourceRange dims_range;          ///< from the first to the last dim; a point for a scalar
  SourceRange range;               ///< the whole spec
  SourcePtr source;                ///< the text the ranges point into
};

/// The dtypes a spec accepts: its dtype part's, or every dtype when it has none.
inline DTypeSet accepted_dtypes(const ShapeSpec& spec) {
  return spec.dtype ? spec.dtype->dtypes : DTypeSet::all();
}

/// Whether two expressions have the same structure and values, ignoring ranges.
inline bool same_structure(const SizeExpr& a, const SizeExpr& b) {
  if (a.kind != b.kind || a.args.size() != b.args.size()) return false;
  for (size_t i = 0; i < a.args.size(); ++i)
    if (!same_structure(a.args[i], b.args[i])) return false;
  switch (a.kind) {
    case SizeExpr::Kind::integer:
      return a.value == b.value;
    case SizeExpr::Kind::name:
      return a.name == b.name;
    case SizeExpr::Kind::binary:
      return a.op == b.op;
    case SizeExpr::Kind::call:
      return a.fn == b.fn;
  }
  return false;
}

/// Whether two dims are the same, ignoring ranges.
inline bool same_structure(const Dim& a, const Dim& b) {
  return a.kind == b.kind && a.broadcastable == b.broadcastable && a.name == b.name &&
         a.size == b.size && a.doc_name == b.doc_name &&
         (a.kind != DimKind::symbolic || same_structure(a.expr, b.expr));
}

/// Whether two specs are the same, ignoring ranges and sources.
inline bool same_structure(const ShapeSpec& a, const ShapeSpec& b) {
  if (a.dtype.has_value() != b.dtype.has_value() || a.dims.size() != b.dims.size()) return false;
  if (a.dtype && (a.dtype->name != b.dtype->name || a.dtype->dtypes != b.dtype->dtypes))
    return false;
  for (size_t i = 0; i < a.dims.size(); ++i)
    if (!same_structure(a.dims[i], b.dims[i])) return false;
  return true;
}

}  // namespace ein
