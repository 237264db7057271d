// apply_scalar_op() (scalar_math.h): every scalar op of scalar_ops.def on doubles.
#include "compiler/kernel/scalar_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

namespace ein {

double apply_scalar_op(ScalarOp op, double x, double y, double z) {
  switch (op) {
    case ScalarOp::load:
    case ScalarOp::constant:
    case ScalarOp::acc:
    case ScalarOp::index:
    case ScalarOp::param:
      break;  // leaves: the caller reads them
    case ScalarOp::neg:
      return -x;
    case ScalarOp::abs:
      return std::fabs(x);
    case ScalarOp::exp:
      return std::exp(x);
    case ScalarOp::log:
      return std::log(x);
    case ScalarOp::sqrt:
      return std::sqrt(x);
    case ScalarOp::rsqrt:
      return 1.0 / std::sqrt(x);
    case ScalarOp::tanh:
      return std::tanh(x);
    case ScalarOp::erf:
      return std::erf(x);
    case ScalarOp::sin:
      return std::sin(x);
    case ScalarOp::cos:
      return std::cos(x);
    case ScalarOp::sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case ScalarOp::relu:  // keeps -0 and NaN (torch.relu)
      return x < 0 ? 0.0 : x;
    case ScalarOp::gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    case ScalarOp::gelu_tanh: {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case ScalarOp::silu:
      return x / (1.0 + std::exp(-x));
    case ScalarOp::square:
      return x * x;
    case ScalarOp::reciprocal:
      return 1.0 / x;
    case ScalarOp::sign:  // 0 for ±0 and NaN (torch.sign)
      return (x > 0 ? 1.0 : 0.0) - (x < 0 ? 1.0 : 0.0);
    case ScalarOp::floor:
      return std::floor(x);
    case ScalarOp::ceil:
      return std::ceil(x);
    case ScalarOp::round:  // half to even (torch.round): nearbyint in the default rounding mode
      return std::nearbyint(x);
    case ScalarOp::trunc:
      return std::trunc(x);
    case ScalarOp::add:
      return x + y;
    case ScalarOp::sub:
      return x - y;
    case ScalarOp::mul:
      return x * y;
    case ScalarOp::div:
      return x / y;
    case ScalarOp::pow:
      return std::pow(x, y);
    case ScalarOp::maximum:  // IEEE 754-2019 maximum: NaN wins, -0 < +0
      if (std::isnan(x) || std::isnan(y)) return x + y;
      if (x == y) return std::signbit(x) ? y : x;
      return x > y ? x : y;
    case ScalarOp::minimum:
      if (std::isnan(x) || std::isnan(y)) return x + y;
      if (x == y) return std::signbit(x) ? x : y;
      return x < y ? x : y;
    case ScalarOp::eq:
      return x == y ? 1 : 0;
    case ScalarOp::ne:
      return x != y ? 1 : 0;
    case ScalarOp::lt:
      return x < y ? 1 : 0;
    case ScalarOp::le:
      return x <= y ? 1 : 0;
    case ScalarOp::gt:
      return x > y ? 1 : 0;
    case ScalarOp::ge:
      return x >= y ? 1 : 0;
    case ScalarOp::where:
      return x != 0 ? y : z;
  }
  throw std::logic_error("internal error: evaluate: a leaf reached scalar()");
}

}  // namespace ein
