// Sizes as formulas of a script's dims, for `ein report`'s symbolic shapes and FLOP formulas
// (`2·B·T·D²`). The graph holds numbers only, so the symbols are recovered by experiment: the
// function is traced again with one dim doubled at a time; an axis whose size doubles with D
// has one factor of D, one that halves with H has H in its denominator, and so on. A size that
// does not scale as a product of powers of the dims (D + 1) stays a number, and a dim whose
// doubling changes the graph's structure (the layer count L) is "structural": it repeats nodes
// instead of sizing them and appears in no formula.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"
#include "script/script.h"

namespace ein::report {

/// c · Π dimᵉ with a rational coefficient c = num / den (den > 0, in lowest terms).
struct Monomial {
  int64_t num = 1, den = 1;
  std::vector<int> exp;  ///< one exponent per dim of DimSymbols::dims
  /// The product; false (and *this unchanged) on int64 overflow.
  bool multiply(const Monomial& other);
  bool same_dims(const Monomial& other) const { return exp == other.exp; }
};

/// Per node and axis of a traced graph, its size as a Monomial of the script's dims.
class DimSymbols {
 public:
  DimSymbols() = default;
  /// Retraces `fn` of `file` once per dim of `dims` with that dim doubled (on top of `sets`)
  /// and compares each retrace with `graph` (the trace at the given sizes).
  DimSymbols(const Graph& graph, const std::string& file, const std::vector<script::Setting>& sets,
             const std::string& fn, std::vector<script::DimInfo> dims);

  const std::vector<script::DimInfo>& dims() const { return dims_; }
  /// Dims whose doubling changed the graph (or failed a check): in no formula.
  const std::vector<std::string>& structural() const { return structural_; }
  /// Axis `axis` of node `node` as a monomial; a bare number when it is not one.
  Monomial axis(int node, int axis) const;
  /// Writes the dims found in these nodes' shapes first, in order of appearance (the batch
  /// and sequence of the token argument: 2·B·T·V·D), the rest in declaration order.
  void lead_with(const std::vector<int>& nodes);
  /// "B T 3·D" for a node's shape.
  std::string shape(int node) const;
  /// The monomial as text: "2·B·T·D²", "D/H", "64" (dims in declaration order).
  std::string text(const Monomial& m) const;
  /// Terms with the same dims combined; "2·B·T·D² + 4·B·T²·D".
  std::string sum_text(const std::vector<Monomial>& terms) const;

 private:
  const Graph* graph_ = nullptr;
  std::vector<script::DimInfo> dims_;
  std::vector<std::string> structural_;
  std::vector<size_t> order_;  ///< the dims' order in text
  /// doubled_[d][node][axis]: the axis size with dim d doubled; empty for structural dims.
  std::vector<std::vector<Shape>> doubled_;
};

}  // namespace ein::report
