// The bookkeeping shared by every pattern op's sema: elementary axes in order of first
// appearance, their sizes as they become known, the caller's given sizes, and the one way
// to fail (a UserError under a range, with the input shapes and sizes bound so far).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ein/patterns.h>
#include <ein/diagnostic.h>

namespace ein::detail {

/// Elementary axes being resolved for one pattern and one request.
class AxisTable {
 public:
  /// Starts with the request's given sizes (not yet attached to any axis).
  AxisTable(const Pattern& pattern, const ResolveRequest& request);

  /// Id of the named axis, or -1.
  int find(std::string_view name) const;
  /// Adds an axis; a named axis picks up its given size, if any.
  int add(std::string name, ElementaryAxis::Origin origin, SourceRange range,
          std::optional<int64_t> size = std::nullopt);
  /// The axis' size once known.
  std::optional<int64_t> size(int id) const { return axes_[id].size; }
  /// Records the size of an axis whose size was unknown.
  void bind(int id, int64_t size) { axes_[id].size = size; }
  /// The axis (name, origin, first range).
  const ElementaryAxis& axis(int id) const { return axes_[id].axis; }
  /// Number of axes so far.
  int count() const { return static_cast<int>(axes_.size()); }

  /// Binds one input dimension of length `length` to the term's axes `ids` (a lone axis or a
  /// composition), checking known sizes and inferring at most one unknown.
  void bind_dimension(const std::vector<int>& ids, int64_t length, SourceRange term_range);
  /// True when every axis of `ids` is known.
  bool all_known(const std::vector<int>& ids) const;

  /// a·b, or a UserError under `range` when it overflows int64.
  int64_t checked_product(int64_t a, int64_t b, SourceRange range) const;
  /// The product of the (known) sizes of `ids`, overflow-checked.
  int64_t group_size(const std::vector<int>& ids, SourceRange range) const;
  /// Throws when a given size names no axis of the pattern.
  void check_all_given_used() const;
  /// "b=2, h=3 (given)": the sizes known so far, given ones first, then in binding order.
  std::string bound_summary() const;

  /// Throws UserError(message) under `range`, with notes on the input shapes and sizes.
  [[noreturn]] void fail(std::string message, SourceRange range,
                         std::optional<DiagnosticNote> related = std::nullopt) const;
  /// The axes, all sizes known (call after resolution).
  std::vector<ElementaryAxis> finish() const;

 private:
  struct Entry {
    ElementaryAxis axis;
    std::optional<int64_t> size;
    int bind_order = -1;
  };
  struct Given {
    AxisSize size;
    bool used = false;
  };
  const Pattern& pattern_;
  const ResolveRequest& request_;
  std::vector<Entry> axes_;
  mutable std::vector<Given> given_;
  int next_order_ = 0;
};

/// The rules of one op for the identifiers and tokens a side may hold.
struct SideRules {
  std::string_view op;             ///< op name, for messages
  bool star = false;               ///< `*` allowed (pack/unpack: exactly one)
  bool ellipsis_in_group = false;  ///< `(...)` allowed
  bool groups = true;              ///< compositions allowed
  bool trivial_groups = false;     ///< `()` and `(b)` allowed even when compositions are not
  bool duplicates = false;         ///< a name may repeat (einsum diagonals)
  bool underscore_name = false;    ///< a lone `_` is an ordinary name (einops.einsum)
  bool lone_underscore = false;    ///< `_` allowed and means "skip" (parse_shape)
};

/// Checks tokens of one side against the op's rules (identifiers, `...` count, `*`).
void validate_side(const Pattern& pattern, const PatternSide& side, const SideRules& rules);

/// One input dimension and the axes it is made of.
struct BoundDim {
  std::vector<int> ids;  ///< axes composing it (empty: a unit, or an ellipsis dim broadcast from 1)
  int64_t length = 0;    ///< its length in the input
  SourceRange range;     ///< the term it comes from
  bool from_ellipsis = false;
};

/// Axis ids of one term: names found or added, numbers other than 1 as new anonymous axes,
/// `...` (inside a group on the right) replaced by `ellipsis_ids`.
std::vector<int> term_axes(AxisTable& table, const AxisTerm& term,
                           const std::vector<int>& ellipsis_ids);

/// Appends an output term's groups: a lone `...` is one dimension per ellipsis axis, any
/// other term (a lone axis, a unit, a composition, `(...)`) is one dimension.
void append_output_term(std::vector<std::vector<int>>& groups, const AxisTerm& term,
                        std::vector<int> ids);

/// Maps a side onto `shape` (checking the dimension count), registers its axes and, when
/// `bind`, binds them (lone axes first, then compositions). With `ellipsis_ids` empty, `...`
/// becomes new axes; otherwise its dims are right-aligned onto those ids, and a length-1 dim
/// where the id is longer broadcasts (einsum).
std::vector<BoundDim> bind_side(AxisTable& table, const PatternSide& side, const Shape& shape,
                                const std::vector<int>& ellipsis_ids, bool bind = true);
/// Binds dims of one or more sides: lone axes first, then compositions until none can
/// progress, so a size known from any operand can complete a composition in another.
void bind_dims(AxisTable& table, std::vector<BoundDim*> dims);

/// Throws when the shape's element count overflows int64 (pointing at `range`).
void check_numel(const AxisTable& table, const Shape& shape, SourceRange range);

/// Throws UserError(message) under `range` in the pattern (no notes).
[[noreturn]] void fail_at(const Pattern& pattern, std::string message, SourceRange range);

/// Number of terms of a side holding a lone `...`, and the index of that term (or -1).
int ellipsis_term(const PatternSide& side);
/// True when the side has `...` anywhere (lone or inside a group).
bool has_ellipsis(const PatternSide& side);

}  // namespace ein::detail
