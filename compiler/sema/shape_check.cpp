// Shape and dtype checking with jaxtyping 0.3.11's rules (jaxtyping/_array_types.py,
// `_check_dims` and `_check_shape`). One deliberate difference: symbolic dims are evaluated
// after every other dim of the same tensor, so they may read names bound later in the spec.
#include <ein/shape_check.h>

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include <ein/patterns.h>  // format_shape
#include "compiler/sema/symbolic.h"
#include <ein/diagnostic.h>
#include <ein/shape_spec_printer.h>

namespace ein {
namespace {

// --- Messages ----------------------------------------------------------------------------

constexpr const char* kDTypeMismatch = "dtype {} is not accepted by '{}', which accepts {}";
constexpr const char* kRankMismatch = "rank mismatch: expected {} dims, received {}";
constexpr const char* kRankTooLow = "rank mismatch: expected at least {} dims, received {}";
constexpr const char* kNamedMismatch = "dim '{}' received size {}, but {} is bound to {}{}";
constexpr const char* kFixedMismatch = "dim '{}' received size {}, but the spec requires {}{}";
constexpr const char* kSymbolicMismatch = "dim '{}' received size {}, but {} evaluates to {}{}";
constexpr const char* kOrOne = " (or 1, as the dim is broadcastable)";
constexpr const char* kVariadicMismatch =
    "variadic dim '{}' received dims {}, but *{} is bound to {}";
constexpr const char* kVariadicNoBroadcast =
    "variadic dim '{}' received dims {}, which cannot be broadcast with {} bound earlier to *{}";
constexpr const char* kVariadicNotTarget =
    "variadic dim '{}' received dims {}, but {} bound earlier to *{} (broadcastable) cannot be "
    "broadcast to them, and this use is not broadcastable";
constexpr const char* kVariadicNotIntoPrev =
    "variadic dim '{}' received dims {}, which cannot be broadcast to {} bound earlier to *{}";
constexpr const char* kTensorNote = "the tensor is {} with shape {}";
constexpr const char* kBoundNote = "sizes bound so far: {}";
constexpr const char* kWhileChecking = "while checking {} ({} of {})";
constexpr const char* kUnboundName = "cannot compute the shape: dim '{}' is not bound";
constexpr const char* kAnonymous =
    "cannot compute the shape: dim '{}' is anonymous, so no size is known for it";
constexpr const char* kNegative = "symbolic size '{}' evaluates to {}, which is not a valid size";

// -------------------------------------------------------------------------------------------

// How the user wrote a dim or expression; specs built by hand have no source: print them.
std::string written(const ShapeSpec& spec, const Dim& d) {
  return spec.source ? std::string(spec.source->slice(d.range)) : print(d);
}
std::string written(const ShapeSpec& spec, const SizeExpr& e) {
  return spec.source ? std::string(spec.source->slice(e.range)) : print(e);
}

bool is_variadic(const Dim& d) {
  return d.kind == DimKind::anonymous_variadic || d.kind == DimKind::named_variadic;
}

// numpy.broadcast_shapes for two shapes: right-aligned, a 1 stretches; nullopt if they clash.
std::optional<std::vector<int64_t>> broadcast(const std::vector<int64_t>& a,
                                              const std::vector<int64_t>& b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

SizeLookup lookup_in(const DimMemo& memo) {
  return [&memo](std::string_view name) { return memo.single(name); };
}

// Checks one tensor on a private copy of the memo; the caller commits it on success.
//   1. the dtype against the spec's dtype part;
//   2. the rank (exact, or a minimum when the spec has a variadic dim);
//   3. fixed, named and anonymous dims in spec order (named ones bind);
//   4. the variadic dim, binding or broadcasting its tuple of sizes;
//   5. symbolic dims, evaluated with everything bound so far.
class Checker {
 public:
  Checker(const ShapeSpec& spec, DType dtype, std::span<const int64_t> shape, DimMemo memo)
      : spec_(spec), dtype_(dtype), shape_(shape), memo_(std::move(memo)) {}

  std::optional<UserError> run() {
    if (!accepted_dtypes(spec_).contains(dtype_))
      return fail(fmt::format(kDTypeMismatch, dtype_name(dtype_), spec_.dtype->name,
                              describe(spec_.dtype->dtypes)),
                  spec_.dtype->range);
    const auto& dims = spec_.dims;
    const auto variadic = std::find_if(dims.begin(), dims.end(), is_variadic);
    const size_t n = dims.size(), rank = shape_.size();
    if (variadic == dims.end() && rank != n)
      return fail(fmt::format(kRankMismatch, n, rank), spec_.dims_range);
    if (variadic != dims.end() && rank + 1 < n)
      return fail(fmt::format(kRankTooLow, n - 1, rank), spec_.dims_range);
    const size_t vi = static_cast<size_t>(variadic - dims.begin());
    // Dims after the variadic one align with the end of the shape.
    auto size_of = [&](size_t i) { return i < vi ? shape_[i] : shape_[rank - (n - i)]; };
    for (size_t i = 0; i < n; ++i) {
      if (is_variadic(dims[i]) || dims[i].kind == DimKind::symbolic) continue;
      if (auto err = check_plain(dims[i], size_of(i))) return err;
    }
    if (variadic != dims.end() && variadic->kind == DimKind::named_variadic) {
      const std::vector<int64_t> sizes(shape_.begin() + vi, shape_.end() - (n - vi - 1));
      if (auto err = check_variadic(*variadic, sizes)) return err;
    }
    for (size_t i = 0; i < n; ++i) {
      if (dims[i].kind != DimKind::symbolic) continue;
      if (auto err = check_symbolic(dims[i], size_of(i))) return err;
    }
    return std::nullopt;
  }

  DimMemo& memo() { return memo_; }

 private:
  UserError fail(std::string message, SourceRange range) const {
    UserError e(std::move(message), spec_.source, range);
    e.note(fmt::format(kTensorNote, dtype_name(dtype_), format_shape(shape_)));
    e.note(fmt::format(kBoundNote, memo_.to_string()));
    return e;
  }

  std::string text(const Dim& d) const { return written(spec_, d); }

  std::optional<UserError> check_plain(const Dim& d, int64_t size) {
    if (d.kind == DimKind::anonymous || (d.broadcastable && size == 1)) return std::nullopt;
    const char* or_one = d.broadcastable ? kOrOne : "";
    if (d.kind == DimKind::fixed) {
      if (size == d.size) return std::nullopt;
      return fail(fmt::format(kFixedMismatch, text(d), size, d.size, or_one), d.range);
    }
    const std::optional<int64_t> bound = memo_.single(d.name);
    if (!bound) {
      memo_.bind_single(d.name, size);
      return std::nullopt;
    }
    if (*bound == size) return std::nullopt;
    return fail(fmt::format(kNamedMismatch, text(d), size, d.name, *bound, or_one), d.range);
  }

  // jaxtyping's rules, with `prev` the stored binding and `d` the current use.
  std::optional<UserError> check_variadic(const Dim& d, const std::vector<int64_t>& sizes) {
    const VariadicSizes* prev = memo_.variadic(d.name);
    if (!prev) {
      memo_.bind_variadic(d.name, {sizes, d.broadcastable});
      return std::nullopt;
    }
    const std::string got = format_shape(sizes), had = format_shape(prev->sizes);
    if (!prev->broadcastable && !d.broadcastable) {
      if (sizes == prev->sizes) return std::nullopt;
      return fail(fmt::format(kVariadicMismatch, text(d), got, d.name, had), d.range);
    }
    const auto joint = broadcast(sizes, prev->sizes);
    if (!joint) return fail(fmt::format(kVariadicNoBroadcast, text(d), got, had, d.name), d.range);
    if (prev->broadcastable) {
      if (!d.broadcastable && *joint != sizes)
        return fail(fmt::format(kVariadicNotTarget, text(d), got, had, d.name), d.range);
      memo_.bind_variadic(d.name, {*joint, d.broadcastable});
      return std::nullopt;
    }
    // A broadcastable use of a binding that is not: it must broadcast into what is stored.
    if (*joint != prev->sizes)
      return fail(fmt::format(kVariadicNotIntoPrev, text(d), got, had, d.name), d.range);
    return std::nullopt;
  }

  std::optional<UserError> check_symbolic(const Dim& d, int64_t size) {
    if (d.broadcastable && size == 1) return std::nullopt;
    int64_t expected = 0;
    try {
      expected = evaluate_size(d.expr, lookup_in(memo_), spec_.source);
    } catch (UserError& e) {
      e.note(fmt::format(kBoundNote, memo_.to_string()));
      return e;
    }
    if (expected == size) return std::nullopt;
    const std::string expr = written(spec_, d.expr);
    return fail(fmt::format(kSymbolicMismatch, text(d), size, expr, expected,
                            d.broadcastable ? kOrOne : ""),
                d.range);
  }

  const ShapeSpec& spec_;
  DType dtype_;
  std::span<const int64_t> shape_;
  DimMemo memo_;
};

}  // namespace

std::optional<int64_t> DimMemo::single(std::string_view name) const {
  const Entry* e = find(name, false);
  return e ? std::optional<int64_t>(e->size) : std::nullopt;
}

const VariadicSizes* DimMemo::variadic(std::string_view name) const {
  const Entry* e = find(name, true);
  return e ? &e->variadic : nullptr;
}

void DimMemo::bind_single(const std::string& name, int64_t size) {
  const Entry* e = find(name, false);
  if (!e) {
    entries_.push_back({name, false, size, {}});
    return;
  }
  entries_[static_cast<size_t>(e - entries_.data())].size = size;
}

void DimMemo::bind_variadic(const std::string& name, VariadicSizes sizes) {
  const Entry* e = find(name, true);
  if (!e) {
    entries_.push_back({name, true, 0, std::move(sizes)});
    return;
  }
  entries_[static_cast<size_t>(e - entries_.data())].variadic = std::move(sizes);
}

std::string DimMemo::to_string() const {
  std::string out;
  for (const Entry& e : entries_) {
    if (!out.empty()) out += ", ";
    out += e.name + "=" + (e.is_variadic ? format_shape(e.variadic.sizes) : std::to_string(e.size));
  }
  return out.empty() ? "(none)" : out;
}

const DimMemo::Entry* DimMemo::find(std::string_view name, bool is_variadic) const {
  for (const Entry& e : entries_)
    if (e.is_variadic == is_variadic && e.name == name) return &e;
  return nullptr;
}

void check_shape(const ShapeSpec& spec, DType dtype, std::span<const int64_t> shape,
                 DimMemo& memo) {
  Checker checker(spec, dtype, shape, memo);
  if (auto err = checker.run()) throw std::move(*err);
  memo = std::move(checker.memo());
}

bool matches(const ShapeSpec& spec, DType dtype, std::span<const int64_t> shape, DimMemo& memo) {
  Checker checker(spec, dtype, shape, memo);
  if (checker.run()) return false;
  memo = std::move(checker.memo());
  return true;
}

void check_shapes(std::span<const TensorCheck> tensors, DimMemo& memo) {
  DimMemo work = memo;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorCheck& t = tensors[i];
    Checker checker(*t.spec, t.dtype, t.shape, std::move(work));
    if (auto err = checker.run()) {
      err->note(fmt::format(kWhileChecking, t.label, i + 1, tensors.size()));
      throw std::move(*err);
    }
    work = std::move(checker.memo());
  }
  memo = std::move(work);
}

std::vector<int64_t> resolve_shape(const ShapeSpec& spec, const DimMemo& memo) {
  std::vector<int64_t> shape;
  auto fail = [&](std::string message, SourceRange range) {
    return UserError(std::move(message), spec.source, range)
        .note(fmt::format(kBoundNote, memo.to_string()));
  };
  for (const Dim& d : spec.dims) {
    const std::string text = written(spec, d);
    switch (d.kind) {
      case DimKind::fixed:
        shape.push_back(d.size);
        break;
      case DimKind::named:
        if (const auto size = memo.single(d.name)) {
          shape.push_back(*size);
          break;
        }
        throw fail(fmt::format(kUnboundName, text), d.range);
      case DimKind::named_variadic:
        if (const VariadicSizes* sizes = memo.variadic(d.name)) {
          shape.insert(shape.end(), sizes->sizes.begin(), sizes->sizes.end());
          break;
        }
        throw fail(fmt::format(kUnboundName, text), d.range);
      case DimKind::anonymous:
      case DimKind::anonymous_variadic:
        throw fail(fmt::format(kAnonymous, text), d.range);
      case DimKind::symbolic: {
        const int64_t size = evaluate_size(d.expr, lookup_in(memo), spec.source);
        if (size < 0) throw fail(fmt::format(kNegative, text, size), d.range);
        shape.push_back(size);
        break;
      }
    }
  }
  return shape;
}

}  // namespace ein
