// Sema for einops patterns: resolves a parsed pattern against input shapes and given axis
// sizes into elementary axes and a Recipe (split, reduce, permute, add, merge), following
// einops' rules, plus ein's documented extensions (docs/patterns.md):
//   - einsum over composed axes `(h d)`, and anonymous / unit axes in einsum;
//   - reductions logsumexp, var and std (var/std with an explicit ddof).
// It computes shapes only; lowering the recipe to IR is a later pass.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ein/dtype.h>
#include <ein/shape.h>

#include <ein/pattern_ast.h>

namespace ein {

/// The pattern operations of einops.
enum class PatternOp : uint8_t { rearrange, reduce, repeat, einsum, pack, unpack, parse_shape };

/// How `reduce` combines the reduced elements.
enum class Reduction : uint8_t { none, min, max, sum, mean, prod, any, all, logsumexp, var, std };

/// A size given by the caller, like einops' `h=8` keyword.
struct AxisSize {
  std::string name;  ///< axis name
  int64_t size = 0;  ///< its length
};

/// What to resolve: the op, its inputs' shapes and the caller's axis sizes.
struct ResolveRequest {
  PatternOp op = PatternOp::rearrange;
  Reduction reduction = Reduction::none;     ///< reduce only
  std::optional<int64_t> ddof;               ///< var/std only: required, never defaulted
  DType dtype = DType::f32;                  ///< element type (mean/var/std/logsumexp need floats)
  std::vector<Shape> shapes;                 ///< one per operand (einsum, pack) or list element
  bool list_input = false;                   ///< rearrange/reduce/repeat: stack `shapes` first
  std::vector<AxisSize> sizes;               ///< given axis sizes, verified against the shapes
  std::vector<std::vector<int64_t>> packed;  ///< unpack only: the packed shapes (one -1 allowed)
};

/// One axis after compositions are split and `...` is expanded.
struct ElementaryAxis {
  enum class Origin : uint8_t { named, anonymous, ellipsis };
  std::string name;  ///< the axis name; `…0`, `…1` for ellipsis dims; the number for anonymous
  int64_t size = 0;  ///< its length
  Origin origin = Origin::named;
  SourceRange range;  ///< its first occurrence in the pattern
};

/// The resolved pattern: elementary axes and how the inputs map onto the output(s).
///
/// For rearrange/reduce/repeat (one input, stacked first when it is a list), applying the
/// recipe is: reshape the input to `elementary_shape`, reduce `reduced_axes`, permute the
/// remaining axes by `permutation`, insert `added_axes`, reshape to `output_shape`.
struct Recipe {
  PatternOp op = PatternOp::rearrange;
  Reduction reduction = Reduction::none;
  std::vector<ElementaryAxis> axes;  ///< every elementary axis, left side first

  /// Per input, per dimension: the axis ids composing that dimension (empty: a unit `()`).
  std::vector<std::vector<std::vector<int>>> input_groups;
  /// Per output dimension: the axis ids merged into it (empty: a unit `()`).
  std::vector<std::vector<int>> output_groups;

  Shape elementary_shape;            ///< one input: the input split into its elementary axes
  std::vector<int> elementary_axes;  ///< axis id of each entry of elementary_shape
  std::vector<int> reduced_axes;     ///< axis ids reduced away (reduce; einsum: contracted)
  std::vector<int> permutation;      ///< kept axes' positions in elementary order, output order
  std::vector<int> added_axes;       ///< axis ids new in the output (repeat), output order

  std::vector<Shape> output_shapes;                     ///< one shape, or several for unpack
  std::vector<Shape> packed_shapes;                     ///< pack: the `*` part of each input (ps)
  std::vector<std::pair<std::string, int64_t>> parsed;  ///< parse_shape: name → size, in order

  /// The single output shape (every op but unpack).
  const Shape& output_shape() const { return output_shapes.front(); }
};

/// Resolves `pattern` for `request`; throws UserError (caret on the failing axis or group).
Recipe resolve_pattern(const Pattern& pattern, const ResolveRequest& request);

/// Validates a one-side pattern as einops' ParsedExpression does (einops names, numbers,
/// '...' once, one-level compositions, no duplicates) and returns its composition in
/// einops' notation: "[(a1) ... (name2 14) ()]". Throws UserError.
std::string parse_expression(const Pattern& pattern);

/// An EinMix layer to resolve (einops.layers' EinMix): the input contracted with a weight whose
/// axes are named, plus an optional bias. Beside the einops patterns of the rest of this file:
///   pattern  "b t (h c_in) -> b t (h c_out)": the input's and the output's axes;
///   weight   "h c_in c_out": the weight's axes (names only: no '...', no parentheses);
///   bias     "h c_out": the output axes the bias varies along (absent: no bias);
///   sizes    every axis of the weight and the bias (the layer makes them before any input).
struct EinMixRequest {
  std::string pattern;
  std::string weight;
  std::optional<std::string> bias;
  std::vector<AxisSize> sizes;
  std::optional<Shape> input;  ///< when given, the output shape is resolved for it too
};

/// What the layer holds and runs, as einops builds it: the input's compositions split
/// (`pre`), one einsum over elementary axes, the bias added, the output's compositions made
/// (`post`).
struct EinMixPlan {
  Shape weight_shape;               ///< the weight's sizes, in the order of its axes
  std::optional<Shape> bias_shape;  ///< per dim of the einsum's output: the size, or 1
  /// Input elements mixed into one output element: the product of the weight axes that are not
  /// in the output (1 when there are none).
  int64_t fan_in = 1;
  double weight_bound = 0;          ///< sqrt(3 / fan_in): U(±bound) has variance 1 / fan_in
  double bias_bound = 0;            ///< sqrt(1 / fan_in) (both 0 when fan_in is 0)
  std::string einsum;               ///< "b t h c_in, h c_in c_out -> b t h c_out"
  std::optional<std::string> pre;   ///< "b t (h c_in) -> b t h c_in", when the input composes
  std::vector<AxisSize> pre_sizes;  ///< the given sizes of `pre`'s axes
  std::optional<std::string> post;  ///< "b t h c_out -> b t (h c_out)", when the output composes
  std::optional<Shape> output;      ///< for EinMixRequest::input: the layer's output shape
};

/// Checks an EinMix layer by einops' rules (and ein's located diagnostics: a caret under the
/// axis in the pattern, the weight's or the bias' text) and returns its plan. Throws UserError.
EinMixPlan resolve_einmix(const EinMixRequest& request);
/// `weight=(2,8,4) bias=None fan_in=8 einsum='...' pre='...' post=None`, or the output shape
/// when the plan has one: what `ein shape einmix` prints.
std::string format_einmix(const EinMixPlan& plan);

/// Parses an op name ("rearrange", ..., "parse_shape"); nullopt when unknown.
std::optional<PatternOp> parse_pattern_op(std::string_view name);
/// The op's name as written in einops.
std::string_view op_name(PatternOp op);
/// Parses a reduction name ("sum", "logsumexp", "var", ...); nullopt when unknown.
std::optional<Reduction> parse_reduction(std::string_view name);
/// The reduction's name.
std::string_view reduction_name(Reduction r);

/// `(2,3,4)`, `(5,)`, `()`: the conformance files' shape format.
std::string format_shape(std::span<const int64_t> shape);
/// The result as `ein shape` prints it: a shape, `shape ps=[...]`, `[...]` or `{a:1,...}`.
std::string format_result(const Recipe& recipe);
/// A human-readable account of the recipe (elementary axes, splits, reductions, permutation).
std::string explain(const Recipe& recipe);

}  // namespace ein
