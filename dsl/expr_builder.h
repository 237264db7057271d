// Building expression trees from the shared operator ladder (dsl/expr_grammar.h): the operand
// and operator stacks, the folding of an operator once its right operand is complete, and the
// PEGTL actions that do it, once for both map expressions and `.ein` scripts. It builds no
// atoms (numbers, names, calls, brackets): those are each language's. Only dsl/map_parser.cpp
// and dsl/script_parser.cpp include this header.
//
// Why a template over the node type rather than one AST: the two ASTs are contracts with
// different consumers and different shapes. A map expression is a closed variant owned by
// unique_ptr (compiler/graph lowers it to fused kernels and can switch on every case); a script
// expression is an open, shared, immutable node with a kind (script/ evaluates it, and calls,
// subscripts, lists and ranges have no map counterpart). Merging them would push the script's
// cases onto map sema or the map's closed typing away from it. What the two parsers really
// share is the folding, so that is what is written once; each language supplies a Nodes
// policy saying how a unary and a binary node are made.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <ein/diagnostic.h>
#include <ein/source.h>
#include "dsl/expr_grammar.h"
#include "dsl/limits.h"

namespace ein::detail {

/// An operator whose right operand is still being parsed; the text points into the source.
struct PendingOp {
  std::string_view text;  ///< the operator as written: `-`, `**`, `<=`
  SourceRange range;      ///< the operator token
};

/// The parse state every expression parser shares: the source, the operand stack and the
/// operators awaiting their right operand. `Nodes` is a policy with
///   using Ptr = ...;  (a pointer to a node with a `range` member)
///   static Ptr unary(std::string_view op, SourceRange op_range, Ptr operand, SourceRange);
///   static Ptr binary(std::string_view op, SourceRange op_range, Ptr lhs, Ptr rhs, SourceRange);
///   static std::string too_deep(uint32_t limit);  (the message when a tree grows too tall)
/// Every operand carries its tree's height, and no push makes a tree taller than
/// limits::kMaxExprDepth: the recursive passes after the parser can walk whatever it returns.
/// A parser's state derives from ExprBuilder and may hide `on_operator` to check each operator
/// before it is pushed (the script parser bounds the nesting depth there).
template <typename Nodes>
struct ExprBuilder {
  using Ptr = typename Nodes::Ptr;  ///< what the operand stack holds

  SourcePtr source;            ///< the text being parsed
  const char* base = nullptr;  ///< start of the text: offsets are pointer differences
  std::vector<Ptr> operands;   ///< complete subexpressions, innermost last
  std::vector<uint32_t> heights;  ///< the height of each operand's tree (a leaf is 1)
  std::vector<PendingOp> ops;  ///< operators whose right operand is being parsed

  /// The SourceRange of a matched PEGTL input.
  template <typename Input>
  SourceRange range_of(const Input& in) const {
    const auto b = static_cast<uint32_t>(in.begin() - base);
    return {b, b + static_cast<uint32_t>(in.size())};
  }

  /// Called before each operator is pushed; does nothing unless a parser hides it.
  void on_operator(SourceRange) const {}

  /// Pushes a leaf.
  void push(Ptr e) { push(std::move(e), 1, {}); }

  /// Pushes a complete subexpression whose tree is `height` tall; a UserError at `at` (the
  /// node's own range when `at` is empty) when that is more than limits::kMaxExprDepth.
  void push(Ptr e, uint32_t height, SourceRange at) {
    if (height > limits::kMaxExprDepth)
      throw UserError(Nodes::too_deep(limits::kMaxExprDepth), source,
                      at.begin == at.end ? e->range : at);
    operands.push_back(std::move(e));
    heights.push_back(height);
  }

  /// The height of the innermost complete subexpression's tree.
  uint32_t top_height() const { return heights.back(); }

  /// Pops the innermost complete subexpression.
  Ptr pop() {
    Ptr e = std::move(operands.back());
    operands.pop_back();
    heights.pop_back();
    return e;
  }

  /// Moves the operands above `depth` (a bracket's or call's contents) into `items`, in order;
  /// returns the tallest one's height (0 when there are none).
  template <typename Items>
  uint32_t take_items(size_t depth, Items& items) {
    uint32_t tallest = 0;
    for (size_t i = depth; i < operands.size(); ++i) {
      items.push_back(std::move(operands[i]));
      tallest = std::max(tallest, heights[i]);
    }
    operands.resize(depth);
    heights.resize(depth);
    return tallest;
  }

  /// Remembers an operator until its right operand is complete.
  void remember(std::string_view text, SourceRange range) { ops.push_back({text, range}); }

  /// Folds the innermost prefix operator with the operand on top of the stack.
  void fold_unary() {
    const PendingOp op = ops.back();
    ops.pop_back();
    const uint32_t height = top_height() + 1;
    Ptr operand = pop();
    const SourceRange range = op.range.merge(operand->range);
    push(Nodes::unary(op.text, op.range, std::move(operand), range), height, op.range);
  }

  /// Folds the innermost infix operator with the two operands on top of the stack. PEGTL
  /// matches the ladder's levels, so folding in match order builds the right tree.
  void fold_binary() {
    const PendingOp op = ops.back();
    ops.pop_back();
    const uint32_t height = std::max(heights[heights.size() - 2], heights.back()) + 1;
    Ptr rhs = pop();
    Ptr lhs = pop();
    const SourceRange range = lhs->range.merge(rhs->range);
    push(Nodes::binary(op.text, op.range, std::move(lhs), std::move(rhs), range), height,
         op.range);
  }
};

/// PEGTL action: remember an operator token (after the state's on_operator check).
struct remember_operator {
  /// Applied when the operator token matches.
  template <typename Input, typename State>
  static void apply(const Input& in, State& s) {
    const SourceRange range = s.range_of(in);
    s.on_operator(range);
    s.remember(in.string_view(), range);
  }
};

/// PEGTL action: fold a prefix operator once its operand is complete.
struct fold_unary_operator {
  /// Applied when the prefixed unary matches.
  template <typename Input, typename State>
  static void apply(const Input&, State& s) {
    s.fold_unary();
  }
};

/// PEGTL action: fold an infix operator once its right operand is complete.
struct fold_binary_operator {
  /// Applied when the operator's tail (operator and right operand) matches.
  template <typename Input, typename State>
  static void apply(const Input&, State& s) {
    s.fold_binary();
  }
};

namespace ge = grammar::expr;

/// The actions of the shared ladder; a parser's action template derives from this one, so its
/// own specialisations cover only its atoms, declarations and statements.
template <typename Rule>
struct expr_action : tao::pegtl::nothing<Rule> {};
template <typename L>
struct expr_action<ge::pow_op<L>> : remember_operator {};
template <typename L>
struct expr_action<ge::prefix_op<L>> : remember_operator {};
template <typename L>
struct expr_action<ge::mul_op<L>> : remember_operator {};
template <typename L>
struct expr_action<ge::add_op<L>> : remember_operator {};
template <typename L>
struct expr_action<ge::cmp_op<L>> : remember_operator {};
template <typename L>
struct expr_action<ge::negation<L>> : fold_unary_operator {};
template <typename L>
struct expr_action<ge::power_tail<L>> : fold_binary_operator {};
template <typename L>
struct expr_action<ge::product_tail<L>> : fold_binary_operator {};
template <typename L>
struct expr_action<ge::sum_tail<L>> : fold_binary_operator {};
template <typename L>
struct expr_action<ge::compare_tail<L>> : fold_binary_operator {};

/// The width of the comparison operator at `at` (1 or 2), for "comparisons do not chain".
inline uint32_t comparison_width(std::string_view text, uint32_t at) {
  return at + 1 < text.size() && text[at + 1] == '=' ? 2 : 1;
}

}  // namespace ein::detail
