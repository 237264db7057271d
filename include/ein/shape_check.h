// Static checking of tensor dtypes and shapes against shape specs, with jaxtyping 0.3.11's
// semantics: named dims bind on first use, `#` broadcasts, `*name` binds a tuple of sizes,
// symbolic dims are evaluated from what is bound. A DimMemo plays the role of jaxtyping's
// per-call memo. This file checks sizes it is given; it never looks at tensor data.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <ein/dtype.h>

#include <ein/shape_spec_ast.h>

namespace ein {

/// What a variadic dim (`*batch`) bound: the sizes, and whether that use was broadcastable.
struct VariadicSizes {
  std::vector<int64_t> sizes;  ///< one per matched dim, possibly none
  bool broadcastable = false;  ///< bound by `*#batch`: later uses may broadcast against it
  /// Field-wise equality.
  bool operator==(const VariadicSizes&) const = default;
};

/// The sizes bound so far in one check set (one call: arguments, then the return value).
/// Single dims (`b`) and variadic dims (`*b`) have separate names, as in jaxtyping.
class DimMemo {
 public:
  /// The size bound to single dim `name`, if any.
  std::optional<int64_t> single(std::string_view name) const;
  /// The sizes bound to variadic dim `name`, or null.
  const VariadicSizes* variadic(std::string_view name) const;
  /// Binds (or rebinds) single dim `name`; a new name goes last in the printed order.
  void bind_single(const std::string& name, int64_t size);
  /// Binds (or rebinds, keeping its place) variadic dim `name`.
  void bind_variadic(const std::string& name, VariadicSizes sizes);
  /// Whether nothing is bound.
  bool empty() const { return entries_.empty(); }
  /// Number of bound names, single and variadic.
  size_t size() const { return entries_.size(); }
  /// Bindings in first-bound order: "b=4, c1=3, batch=(3,)"; "(none)" when empty.
  std::string to_string() const;
  /// Equal when the same names are bound to the same sizes in the same order.
  bool operator==(const DimMemo&) const = default;

 private:
  /// One binding: a single dim's size or a variadic dim's sizes.
  struct Entry {
    std::string name;                               ///< without `*`
    bool is_variadic = false;                       ///< which of the two namespaces
    int64_t size = 0;                               ///< single dims
    VariadicSizes variadic;                         ///< variadic dims
    bool operator==(const Entry&) const = default;  ///< field-wise
  };
  /// The binding of `name` in the single or the variadic namespace, or null.
  const Entry* find(std::string_view name, bool is_variadic) const;

  /// In first-bound order; memos hold a handful of names, so lookups scan.
  std::vector<Entry> entries_;
};

/// Checks one tensor against `spec`, binding new names into `memo` only when the whole check
/// passes. Throws UserError with the caret on the failing dim (or dtype, or dim list for a
/// rank mismatch), the rule and the facts, and a "sizes bound so far" note.
void check_shape(const ShapeSpec& spec, DType dtype, std::span<const int64_t> shape, DimMemo& memo);

/// Like check_shape but returns false instead of throwing (memo untouched then). A symbolic
/// dim that reads an unbound name counts as a mismatch here; check_shape says why.
bool matches(const ShapeSpec& spec, DType dtype, std::span<const int64_t> shape, DimMemo& memo);

/// One tensor of a multi-tensor check: a label for messages, its spec, dtype and shape.
struct TensorCheck {
  std::string label;                ///< e.g. "parameter 'x'" or "the return value"
  const ShapeSpec* spec = nullptr;  ///< the annotation; must outlive the check
  DType dtype = DType::f32;         ///< the tensor's dtype
  std::span<const int64_t> shape;   ///< the tensor's sizes, in elements
};

/// Checks tensors in order with one memo, like a jaxtyped call (arguments, then the return
/// value). All-or-nothing: on failure `memo` is unchanged and the error notes the label.
void check_shapes(std::span<const TensorCheck> tensors, DimMemo& memo);

/// The concrete shape `spec` describes under `memo` (named and variadic dims looked up,
/// symbolic dims evaluated): how ein computes a result shape statically. Throws UserError at
/// the first dim with no determined size (anonymous, unbound) or with a negative size.
std::vector<int64_t> resolve_shape(const ShapeSpec& spec, const DimMemo& memo);

}  // namespace ein
