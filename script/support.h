// Small helpers shared by the interpreter's files (script/load.cpp,
// script_eval.cpp, script_interp.cpp): numbers, seeds, operators and shape-spec names.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/kernel/kernel_ir.h"
#include "runtime/random.h"
#include <ein/shape_spec_ast.h>

namespace ein::script {

/// Whether a number is a finite integer (a size, an index).
inline bool is_integral(double v) { return std::isfinite(v) && v == std::floor(v); }

/// Whether an integral number converts to int64_t exactly: |v| < 2^63 (a cast of anything
/// larger is undefined, and wraps to INT64_MIN on x86).
inline bool fits_int64(double v) { return v > -0x1p63 && v < 0x1p63; }

/// A number as scripts write it: integers without a fraction.
inline std::string format_number(double v) {
  if (is_integral(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

/// splitmix64: mixes seeds and counters into independent streams.
inline uint64_t mix(uint64_t a, uint64_t b) {
  return mix_seeds(a, b);
}

/// The scalar op of a binary operator's spelling ("+", "**", "<=", ...), if it has one.
inline std::optional<ScalarOp> binary_op(const std::string& op) {
  static const std::map<std::string, ScalarOp> ops = {
      {"+", ScalarOp::add}, {"-", ScalarOp::sub}, {"*", ScalarOp::mul},  {"/", ScalarOp::div},
      {"**", ScalarOp::pow}, {"<", ScalarOp::lt}, {"<=", ScalarOp::le}, {">", ScalarOp::gt},
      {">=", ScalarOp::ge}, {"==", ScalarOp::eq}, {"!=", ScalarOp::ne}};
  if (auto it = ops.find(op); it != ops.end()) return it->second;
  return std::nullopt;
}

inline bool is_comparison(ScalarOp op) {
  return op == ScalarOp::lt || op == ScalarOp::le || op == ScalarOp::gt || op == ScalarOp::ge ||
         op == ScalarOp::eq || op == ScalarOp::ne;
}

/// Names a size expression reads.
inline void spec_names(const SizeExpr& e, std::vector<std::string>& out) {
  if (e.kind == SizeExpr::Kind::name) out.push_back(e.name);
  for (const SizeExpr& a : e.args)
    spec_names(a, out);
}
/// Names a shape spec reads (named dims and the names inside symbolic dims).
inline std::vector<std::string> spec_names(const ShapeSpec& spec) {
  std::vector<std::string> out;
  for (const Dim& d : spec.dims) {
    if (d.kind == DimKind::named) out.push_back(d.name);
    if (d.kind == DimKind::symbolic) spec_names(d.expr, out);
  }
  return out;
}

/// The dtype a parameter or example input of this spec gets: f32 when allowed, else the first.
inline DType spec_dtype(const ShapeSpec& spec) {
  const DTypeSet s = accepted_dtypes(spec);
  if (s.contains(DType::f32)) return DType::f32;
  for (DType d : kAllDTypes)
    if (s.contains(d)) return d;
  return DType::f32;
}

}  // namespace ein::script
