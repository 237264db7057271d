// Checked evaluation of symbolic sizes. Names resolve to single dims only: jaxtyping evaluates
// the expression with the single-dim memo as globals, so variadic dims are not visible either.
#include "compiler/sema/symbolic.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include <ein/diagnostic.h>
#include <ein/shape_spec_printer.h>

namespace ein {
namespace {

// --- Messages ----------------------------------------------------------------------------

constexpr const char* kUnbound = "symbolic size '{}' reads dim '{}', which is not bound";
constexpr const char* kUnboundNote =
    "a symbolic size can use dims bound by earlier tensors or by the plain dims of its own spec";
constexpr const char* kDivisionByZero = "division by zero in symbolic size '{}'";
constexpr const char* kOverflow = "symbolic size '{}' overflows a 64-bit integer";

// -------------------------------------------------------------------------------------------

class Evaluator {
 public:
  Evaluator(const SizeExpr& root, const SizeLookup& lookup, const SourcePtr& source)
      : root_(root), lookup_(lookup), source_(source) {}

  int64_t eval(const SizeExpr& e) const {
    switch (e.kind) {
      case SizeExpr::Kind::integer:
        return e.value;
      case SizeExpr::Kind::name: {
        if (const std::optional<int64_t> v = lookup_(e.name)) return *v;
        throw UserError(fmt::format(kUnbound, text(), e.name), source_, e.range).note(kUnboundNote);
      }
      case SizeExpr::Kind::call: {
        int64_t out = eval(e.args[0]);
        for (size_t i = 1; i < e.args.size(); ++i) {
          const int64_t v = eval(e.args[i]);
          out = e.fn == SizeFn::min ? std::min(out, v) : std::max(out, v);
        }
        return out;
      }
      case SizeExpr::Kind::binary:
        return binary(e, eval(e.args[0]), eval(e.args[1]));
    }
    return 0;
  }

 private:
  std::string text() const {
    return source_ ? std::string(source_->slice(root_.range)) : print(root_);
  }

  int64_t binary(const SizeExpr& e, int64_t a, int64_t b) const {
    int64_t out = 0;
    bool overflow = false;
    switch (e.op) {
      case SizeOp::add:
        overflow = __builtin_add_overflow(a, b, &out);
        break;
      case SizeOp::sub:
        overflow = __builtin_sub_overflow(a, b, &out);
        break;
      case SizeOp::mul:
        overflow = __builtin_mul_overflow(a, b, &out);
        break;
      case SizeOp::floordiv:
        if (b == 0) throw UserError(fmt::format(kDivisionByZero, text()), source_, e.range);
        if (a == std::numeric_limits<int64_t>::min() && b == -1) {
          overflow = true;
          break;
        }
        // Python's // rounds toward minus infinity; C++'s / truncates toward zero.
        out = a / b;
        if (a % b != 0 && ((a < 0) != (b < 0))) --out;
        break;
    }
    if (overflow) throw UserError(fmt::format(kOverflow, text()), source_, e.range);
    return out;
  }

  const SizeExpr& root_;
  const SizeLookup& lookup_;
  const SourcePtr& source_;
};

void collect_names(const SizeExpr& e, std::vector<std::string>& out) {
  if (e.kind == SizeExpr::Kind::name && std::find(out.begin(), out.end(), e.name) == out.end())
    out.push_back(e.name);
  for (const SizeExpr& arg : e.args)
    collect_names(arg, out);
}

}  // namespace

int64_t evaluate_size(const SizeExpr& expr, const SizeLookup& lookup, const SourcePtr& source) {
  return Evaluator(expr, lookup, source).eval(expr);
}

std::vector<std::string> size_names(const SizeExpr& expr) {
  std::vector<std::string> out;
  collect_names(expr, out);
  return out;
}

}  // namespace ein
