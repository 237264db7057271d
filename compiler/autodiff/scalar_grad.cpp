// Symbolic derivatives of scalar DAGs, forward mode over the DAG: d(node) is built from the
// derivatives of its operands by one rule per ScalarOp. Zero derivatives are -1 and propagate
// without building nodes, and products with a derivative of exactly 1 are folded, so
// ∂(x + b)/∂x is the constant 1 and the VJP of a bias add is the cotangent itself.
#include "compiler/autodiff/scalar_grad.h"

#include <cmath>
#include <iterator>
#include <numbers>
#include <stdexcept>
#include <vector>

namespace ein {
namespace {

constexpr int kZero = -1;

/// Builds derivative nodes with zero/one folding.
class Deriv {
 public:
  Deriv(Kernel& k, int wrt) : k_(k), wrt_(wrt), d_(k.nodes.size(), kUnset) {}

  int of(int node) {
    if (d_[node] != kUnset) return d_[node];
    return d_[node] = rule(node);
  }

  // Arithmetic on derivative nodes (kZero is 0; is_one() nodes are exactly 1).
  int c(double v) { return k_.constant(v); }
  int op(ScalarOp o, int a, int b = -1, int cc = -1) { return k_.apply(o, a, b, cc); }
  bool is_one(int n) const {
    return n >= 0 && k_.nodes[n].op == ScalarOp::constant && k_.nodes[n].value == 1.0;
  }
  int mul(int a, int b) {
    if (a == kZero || b == kZero) return kZero;
    if (is_one(a)) return b;
    if (is_one(b)) return a;
    return op(ScalarOp::mul, a, b);
  }
  int add(int a, int b) {
    if (a == kZero) return b;
    if (b == kZero) return a;
    return op(ScalarOp::add, a, b);
  }
  int neg(int a) { return a == kZero ? kZero : op(ScalarOp::neg, a); }
  int sub(int a, int b) { return add(a, neg(b)); }
  int where(int cond, int a, int b) {
    if (a == kZero && b == kZero) return kZero;
    return op(ScalarOp::where, cond, a == kZero ? c(0) : a, b == kZero ? c(0) : b);
  }

  Kernel& k_;

 private:
  static constexpr int kUnset = -2;
  int rule(int node);

  int wrt_;
  std::vector<int> d_;
};

using Rule = int (*)(Deriv& d, int self, const ScalarNode& n);

// Unary rules get the operand's derivative as da through d.of(n.a).
int d_leaf(Deriv&, int, const ScalarNode&) {
  return kZero;
}
int d_neg(Deriv& d, int, const ScalarNode& n) {
  return d.neg(d.of(n.a));
}
int d_abs(Deriv& d, int, const ScalarNode& n) {
  return d.mul(d.op(ScalarOp::sign, n.a), d.of(n.a));
}
int d_exp(Deriv& d, int self, const ScalarNode& n) {
  return d.mul(self, d.of(n.a));
}
int d_log(Deriv& d, int, const ScalarNode& n) {
  const int da = d.of(n.a);
  return da == kZero ? kZero : d.op(ScalarOp::div, da, n.a);
}
int d_sqrt(Deriv& d, int self, const ScalarNode& n) {  // 1 / (2 √x)
  const int da = d.of(n.a);
  return da == kZero ? kZero : d.op(ScalarOp::div, d.mul(d.c(0.5), da), self);
}
int d_rsqrt(Deriv& d, int self, const ScalarNode& n) {  // -x^{-3/2} / 2 = -y / (2x)
  const int da = d.of(n.a);
  if (da == kZero) return kZero;
  return d.mul(d.op(ScalarOp::div, d.mul(d.c(-0.5), self), n.a), da);
}
int d_tanh(Deriv& d, int self, const ScalarNode& n) {  // 1 - y²
  const int da = d.of(n.a);
  if (da == kZero) return kZero;
  return d.mul(d.op(ScalarOp::sub, d.c(1), d.op(ScalarOp::mul, self, self)), da);
}
int d_erf(Deriv& d, int, const ScalarNode& n) {  // 2/√π · exp(-x²)
  const int da = d.of(n.a);
  if (da == kZero) return kZero;
  const int e = d.op(ScalarOp::exp, d.op(ScalarOp::neg, d.op(ScalarOp::square, n.a)));
  return d.mul(d.mul(d.c(2 / std::sqrt(std::numbers::pi)), e), da);
}
int d_sin(Deriv& d, int, const ScalarNode& n) {
  return d.mul(d.op(ScalarOp::cos, n.a), d.of(n.a));
}
int d_cos(Deriv& d, int, const ScalarNode& n) {
  return d.mul(d.op(ScalarOp::neg, d.op(ScalarOp::sin, n.a)), d.of(n.a));
}
int d_sigmoid(Deriv& d, int self, const ScalarNode& n) {  // y (1 - y)
  const int da = d.of(n.a);
  if (da == kZero) return kZero;
  return d.mul(d.op(ScalarOp::mul, self, d.op(ScalarOp::sub, d.c(1), self)), da);
}
int d_relu(Deriv& d, int, const ScalarNode& n) {  // 1 where x > 0 (0 at the kink, like torch)
  return d.mul(d.op(ScalarOp::gt, n.a, d.c(0)), d.of(n.a));
}
int d_gelu(Deriv& d, int, const ScalarNode& n) {  // Φ(x) + x φ(x)
  const int da = d.of(n.a);
  if (da == kZero) return kZero;
  const int x = n.a;
  const int cdf =
      d.op(ScalarOp::mul, d.c(0.5),
           d.op(ScalarOp::add, d.c(1),
                d.op(ScalarOp::erf, d.op(ScalarOp::mul, x, d.c(std::numbers::sqrt2 / 2)))));
  const int pdf =
      d.op(ScalarOp::mul, d.c(1 / std::sqrt(2 * std::numbers::pi)),
           d.op(ScalarOp::exp, d.op(ScalarOp::mul, d.c(-0.5), d.op(ScalarOp::square, x))));
  return d.mul(d.op(ScalarOp::add, cdf, d.op(ScalarOp::mul, x, pdf)), da);
}
int d_gelu_tanh(Deriv& d, int, const ScalarNode& n) {
  // y = x/2 (1 + t), t = tanh(k (x + c x³)): y' = (1 + t)/2 + x/2 (1 - t²) k (1 + 3c x²).
  const int da = d.of(n.a);
  if (da == kZero) return kZero;
  const double k = std::sqrt(2 / std::numbers::pi), cc = 0.044715;
  const int x = n.a;
  const int x2 = d.op(ScalarOp::square, x);
  const int inner =
      d.op(ScalarOp::mul, d.c(k),
           d.op(ScalarOp::add, x, d.op(ScalarOp::mul, d.c(cc), d.op(ScalarOp::mul, x2, x))));
  const int t = d.op(ScalarOp::tanh, inner);
  const int half_1pt = d.op(ScalarOp::mul, d.c(0.5), d.op(ScalarOp::add, d.c(1), t));
  const int sech2 = d.op(ScalarOp::sub, d.c(1), d.op(ScalarOp::square, t));
  const int dinner = d.op(ScalarOp::mul, d.c(k),
                          d.op(ScalarOp::add, d.c(1), d.op(ScalarOp::mul, d.c(3 * cc), x2)));
  const int rest =
      d.op(ScalarOp::mul, d.op(ScalarOp::mul, d.c(0.5), x), d.op(ScalarOp::mul, sech2, dinner));
  return d.mul(d.op(ScalarOp::add, half_1pt, rest), da);
}
int d_silu(Deriv& d, int, const ScalarNode& n) {  // s (1 + x (1 - s)), s = sigmoid(x)
  const int da = d.of(n.a);
  if (da == kZero) return kZero;
  const int s = d.op(ScalarOp::sigmoid, n.a);
  const int inner =
      d.op(ScalarOp::add, d.c(1), d.op(ScalarOp::mul, n.a, d.op(ScalarOp::sub, d.c(1), s)));
  return d.mul(d.op(ScalarOp::mul, s, inner), da);
}
int d_square(Deriv& d, int, const ScalarNode& n) {
  return d.mul(d.op(ScalarOp::mul, d.c(2), n.a), d.of(n.a));
}
int d_reciprocal(Deriv& d, int self, const ScalarNode& n) {  // -y²
  return d.mul(d.op(ScalarOp::neg, d.op(ScalarOp::mul, self, self)), d.of(n.a));
}
int d_add(Deriv& d, int, const ScalarNode& n) {
  return d.add(d.of(n.a), d.of(n.b));
}
int d_sub(Deriv& d, int, const ScalarNode& n) {
  return d.sub(d.of(n.a), d.of(n.b));
}
int d_mul(Deriv& d, int, const ScalarNode& n) {
  return d.add(d.mul(d.of(n.a), n.b), d.mul(n.a, d.of(n.b)));
}
int d_div(Deriv& d, int self, const ScalarNode& n) {  // (da - y db) / b
  const int num = d.sub(d.of(n.a), d.mul(self, d.of(n.b)));
  return num == kZero ? kZero : d.op(ScalarOp::div, num, n.b);
}
int d_pow(Deriv& d, int self, const ScalarNode& n) {  // b a^(b-1) da + y log(a) db
  const int da = d.of(n.a), db = d.of(n.b);
  int out = kZero;
  if (da != kZero) {
    const int p = d.op(ScalarOp::pow, n.a, d.op(ScalarOp::sub, n.b, d.c(1)));
    out = d.mul(d.op(ScalarOp::mul, n.b, p), da);
  }
  if (db != kZero) out = d.add(out, d.mul(d.op(ScalarOp::mul, self, d.op(ScalarOp::log, n.a)), db));
  return out;
}
// maximum/minimum: the winner takes the derivative; a tie splits it evenly between the two
// (torch.maximum's rule: where(a == b, g/2, g), masked where the operand lost).
int d_extremum(Deriv& d, const ScalarNode& n, ScalarOp a_loses, ScalarOp b_loses) {
  const int da = d.of(n.a), db = d.of(n.b);
  if (da == kZero && db == kZero) return kZero;
  const int tie = d.op(ScalarOp::eq, n.a, n.b);
  auto share = [&](int dx, ScalarOp loses) {
    if (dx == kZero) return kZero;
    return d.where(d.op(loses, n.a, n.b), kZero, d.where(tie, d.mul(dx, d.c(0.5)), dx));
  };
  return d.add(share(da, a_loses), share(db, b_loses));
}
int d_maximum(Deriv& d, int, const ScalarNode& n) {
  return d_extremum(d, n, ScalarOp::lt, ScalarOp::gt);
}
int d_minimum(Deriv& d, int, const ScalarNode& n) {
  return d_extremum(d, n, ScalarOp::gt, ScalarOp::lt);
}
int d_where(Deriv& d, int, const ScalarNode& n) {
  return d.where(n.a, d.of(n.b), d.of(n.c));
}

// One rule per ScalarOp, in scalar_ops.def order.
constexpr Rule kRules[] = {
    d_leaf,  // load: handled in Deriv::rule (depends on the buffer)
    d_leaf,  // constant
    d_leaf,  // acc
    d_leaf,  // index
    d_leaf,  // param
    d_neg,   d_abs,     d_exp,  d_log,  d_sqrt,      d_rsqrt,   d_tanh,    d_erf,        d_sin,
    d_cos,   d_sigmoid, d_relu, d_gelu, d_gelu_tanh, d_silu,    d_square,  d_reciprocal,
    d_leaf,  // sign
    d_leaf,  d_leaf,    d_leaf, d_leaf,  // floor, ceil, round, trunc: zero almost everywhere
    d_add,   d_sub,     d_mul,  d_div,  d_pow,       d_maximum, d_minimum, d_leaf,       d_leaf,
    d_leaf,  d_leaf,    d_leaf, d_leaf,  // comparisons
    d_where,
};
static_assert(std::size(kRules) == kScalarOpCount, "a derivative rule per op in scalar_ops.def");

int Deriv::rule(int node) {
  const ScalarNode n = k_.nodes[node];  // a copy: rules append to k_.nodes
  if (n.op == ScalarOp::load) return n.buffer == wrt_ ? c(1) : kZero;
  if (n.op == ScalarOp::acc)
    throw std::logic_error("differentiate_scalar: a map body cannot read a reduction accumulator");
  return kRules[static_cast<int>(n.op)](*this, node, n);
}

}  // namespace

int differentiate_scalar(Kernel& kernel, int of, int wrt) {
  Deriv d(kernel, wrt);
  return d.of(of);
}

}  // namespace ein
