// The standard functions as unfused graphs: each row-wise function is reductions over the last
// dim (kept dims in order) and maps that broadcast the row values back by axis position.
#include "compiler/graph/stdlib_graphs.h"

#include <numeric>

#include <fmt/format.h>

#include "compiler/graph/graph_builder.h"

namespace ein {
namespace {

std::vector<int> iota(size_t n, int from = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

int last(const Shape& s) {
  return static_cast<int>(s.size()) - 1;
}

std::string origin(std::string_view name, const Shape& x) {
  return fmt::format("{}({})", name, fmt::join(x, ", "));
}

void need_rank(const Shape& x, size_t rank, std::string_view name) {
  if (x.size() < rank)
    throw std::invalid_argument(
        fmt::format("{} needs at least {} dims, got ({})", name, rank, fmt::join(x, ", ")));
}

using Op = ScalarOp;

/// The start softmax and log_softmax share, over the last dim: the input x, its row max m,
/// e = exp(x − m) and the row sums s of e, with the axes of a full and a row value.
struct ExpSums {
  int x, m, e, s;
  std::vector<int> all, rows;
};
ExpSums exp_sums(GraphBuilder& b, const Shape& shape, DType dtype) {
  ExpSums r{};
  r.x = b.input(shape, dtype);
  r.all = iota(shape.size());
  r.rows = iota(shape.size() - 1);
  r.m = b.reduce_dims(r.x, Reduction::max, {last(shape)});
  r.e = b.map({r.x, r.m}, {r.all, r.rows}, shape, dtype, "exp_sub",
              [](Kernel& k, const auto& in) { return k.apply(Op::exp, k.apply(Op::sub, in[0], in[1])); });
  r.s = b.reduce_dims(r.e, Reduction::sum, {last(shape)});
  return r;
}

}  // namespace

Graph softmax_graph(const Shape& shape, DType dtype) {
  need_rank(shape, 1, "softmax");
  GraphBuilder b(origin("softmax", shape));
  const auto [x, m, e, s, all, rows] = exp_sums(b, shape, dtype);
  const int y = b.map({e, s}, {all, rows}, shape, dtype, "div",
                      [](Kernel& k, const auto& in) { return k.apply(Op::div, in[0], in[1]); });
  return b.finish({y});
}

Graph log_softmax_graph(const Shape& shape, DType dtype) {
  need_rank(shape, 1, "log_softmax");
  GraphBuilder b(origin("log_softmax", shape));
  const auto [x, m, e, s, all, rows] = exp_sums(b, shape, dtype);
  (void)e;
  const int y =
      b.map({x, m, s}, {all, rows, rows}, shape, dtype, "sub_log", [](Kernel& k, const auto& in) {
        return k.apply(Op::sub, k.apply(Op::sub, in[0], in[1]), k.apply(Op::log, in[2]));
      });
  return b.finish({y});
}

Graph layer_norm_graph(const Shape& shape, DType dtype, double eps) {
  need_rank(shape, 1, "layer_norm");
  GraphBuilder b(origin("layer_norm", shape));
  const int x = b.input(shape, dtype), w = b.input({shape.back()}, dtype),
            bias = b.input({shape.back()}, dtype);
  const auto all = iota(shape.size()), rows = iota(shape.size() - 1);
  const std::vector<int> col{last(shape)};
  const int mu = b.reduce_dims(x, Reduction::mean, col);
  const int sq =
      b.map({x, mu}, {all, rows}, shape, dtype, "sub_square", [](Kernel& k, const auto& in) {
        return k.apply(Op::square, k.apply(Op::sub, in[0], in[1]));
      });
  const int var = b.reduce_dims(sq, Reduction::mean, col);
  const int y = b.map({x, mu, var, w, bias}, {all, rows, rows, col, col}, shape, dtype,
                      "normalize_affine", [eps](Kernel& k, const auto& in) {
                        const int r = k.apply(Op::rsqrt, k.apply(Op::add, in[2], k.constant(eps)));
                        const int n = k.apply(Op::mul, k.apply(Op::sub, in[0], in[1]), r);
                        return k.apply(Op::add, k.apply(Op::mul, n, in[3]), in[4]);
                      });
  return b.finish({y});
}

Graph rms_norm_graph(const Shape& shape, DType dtype, double eps) {
  need_rank(shape, 1, "rms_norm");
  GraphBuilder b(origin("rms_norm", shape));
  const int x = b.input(shape, dtype), w = b.input({shape.back()}, dtype);
  const auto all = iota(shape.size()), rows = iota(shape.size() - 1);
  const std::vector<int> col{last(shape)};
  const int sq = b.map({x}, {all}, shape, dtype, "square",
                       [](Kernel& k, const auto& in) { return k.apply(Op::square, in[0]); });
  const int ms = b.reduce_dims(sq, Reduction::mean, col);
  const int y =
      b.map({x, ms, w}, {all, rows, col}, shape, dtype, "scale", [eps](Kernel& k, const auto& in) {
        const int r = k.apply(Op::rsqrt, k.apply(Op::add, in[1], k.constant(eps)));
        return k.apply(Op::mul, k.apply(Op::mul, in[0], r), in[2]);
      });
  return b.finish({y});
}

Graph cross_entropy_graph(const Shape& shape, DType dtype) {
  if (shape.size() != 2)
    throw std::invalid_argument(
        fmt::format("cross_entropy takes logits (rows classes), got ({})", fmt::join(shape, ", ")));
  GraphBuilder b(origin("cross_entropy", shape));
  const int x = b.input(shape, dtype), t = b.input({shape[0]}, DType::i64);
  const Shape rows_shape{shape[0]};
  const std::vector<int> all{0, 1}, rows{0};
  const int m = b.reduce_dims(x, Reduction::max, {1});
  const int e = b.map({x, m}, {all, rows}, shape, dtype, "exp_sub", [](Kernel& k, const auto& in) {
    return k.apply(Op::exp, k.apply(Op::sub, in[0], in[1]));
  });
  const int s = b.reduce_dims(e, Reduction::sum, {1});
  const int picked =
      b.map({x, t}, {all, rows}, shape, dtype, "at_target", [](Kernel& k, const auto& in) {
        const int hit = k.apply(Op::eq, k.index(1), in[1]);
        return k.apply(Op::where, hit, in[0], k.constant(0));
      });
  const int xt = b.reduce_dims(picked, Reduction::sum, {1});
  const int loss = b.map(
      {m, s, xt}, {rows, rows, rows}, rows_shape, dtype, "nll", [](Kernel& k, const auto& in) {
        return k.apply(Op::sub, k.apply(Op::add, in[0], k.apply(Op::log, in[1])), in[2]);
      });
  return b.finish({b.reduce_dims(loss, Reduction::mean, {0})});
}

Graph mse_loss_graph(const Shape& shape, DType dtype) {
  GraphBuilder b(origin("mse_loss", shape));
  const int p = b.input(shape, dtype), t = b.input(shape, dtype);
  const auto all = iota(shape.size());
  const int d =
      b.map({p, t}, {all, all}, shape, dtype, "sub_square", [](Kernel& k, const auto& in) {
        return k.apply(Op::square, k.apply(Op::sub, in[0], in[1]));
      });
  return b.finish({b.reduce_dims(d, Reduction::mean, all)});
}

Graph adamw_graph(const Shape& shape, DType dtype) {
  GraphBuilder b(origin("adamw", shape));
  const int p = b.input(shape, dtype), g = b.input(shape, dtype), m = b.input(shape, dtype),
            v = b.input(shape, dtype);
  const int lr = b.input({}, dtype), beta1 = b.input({}, dtype), beta2 = b.input({}, dtype),
            eps = b.input({}, dtype);
  const int wd = b.input({}, dtype), step = b.input({}, dtype);
  const auto all = iota(shape.size());
  const std::vector<int> scalar;
  // β·a + (1 − β)·c
  auto mix = [](Kernel& k, int beta, int a, int c) {
    const int rest = k.apply(Op::sub, k.constant(1), beta);
    return k.apply(Op::add, k.apply(Op::mul, beta, a), k.apply(Op::mul, rest, c));
  };
  const int m1 = b.map({m, g, beta1}, {all, all, scalar}, shape, dtype, "exp_avg",
                       [&](Kernel& k, const auto& in) { return mix(k, in[2], in[0], in[1]); });
  const int v1 = b.map(
      {v, g, beta2}, {all, all, scalar}, shape, dtype, "exp_avg_sq",
      [&](Kernel& k, const auto& in) { return mix(k, in[2], in[0], k.apply(Op::square, in[1])); });
  // in: p, m', v', lr, β1, β2, eps, wd, t
  const int p1 = b.map(
      {p, m1, v1, lr, beta1, beta2, eps, wd, step},
      {all, all, all, scalar, scalar, scalar, scalar, scalar, scalar}, shape, dtype, "adamw_param",
      [](Kernel& k, const auto& in) {
        const int one = k.constant(1);
        const int decayed =
            k.apply(Op::mul, in[0], k.apply(Op::sub, one, k.apply(Op::mul, in[3], in[7])));
        const int bc1 = k.apply(Op::sub, one, k.apply(Op::pow, in[4], in[8]));
        const int bc2 = k.apply(Op::sub, one, k.apply(Op::pow, in[5], in[8]));
        const int denom = k.apply(
            Op::add, k.apply(Op::div, k.apply(Op::sqrt, in[2]), k.apply(Op::sqrt, bc2)), in[6]);
        const int step_size = k.apply(Op::div, in[3], bc1);
        return k.apply(Op::sub, decayed,
                       k.apply(Op::mul, step_size, k.apply(Op::div, in[1], denom)));
      });
  return b.finish({p1, m1, v1});
}

const std::vector<StandardFunction>& standard_functions() {
  static const std::vector<StandardFunction> table = {
      {"softmax", "x (... n) -> exp(x - max) / sum exp(x - max) over n", softmax_graph},
      {"log_softmax", "x (... n) -> x - max - log sum exp(x - max) over n", log_softmax_graph},
      {"layer_norm",
       "x (... n), weight (n), bias (n) -> (x - mean) rsqrt(var + 1e-5) weight + bias",
       [](const Shape& s, DType t) { return layer_norm_graph(s, t); }},
      {"rms_norm", "x (... n), weight (n) -> x rsqrt(mean(x^2) + 1e-6) weight",
       [](const Shape& s, DType t) { return rms_norm_graph(s, t); }},
      {"cross_entropy",
       "logits (r c), target (r) i64 -> mean over r of logsumexp - logit at target",
       cross_entropy_graph},
      {"mse_loss", "pred, target (same shape) -> mean (pred - target)^2", mse_loss_graph},
      {"adamw",
       "param, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step -> "
       "param, exp_avg, exp_avg_sq",
       adamw_graph},
  };
  return table;
}

const StandardFunction* find_standard_function(std::string_view name) {
  for (const StandardFunction& f : standard_functions())
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace ein
