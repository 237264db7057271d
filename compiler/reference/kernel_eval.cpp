// The float64 semantics of Kernel IR: a direct loop-by-loop reading of the semantics at the top
// of kernel_ir.h, with every value in double. It is the oracle the emitter tests compare the
// generated code with; it is never used for speed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <utility>
#include <vector>

#include "compiler/reference/kernel_eval.h"
#include "compiler/kernel/scalar_math.h"

namespace ein {
namespace {



/// Evaluates nodes at one point (memoised, only the nodes asked for).
class PointEval {
 public:
  PointEval(const Kernel& k, std::vector<std::vector<double>>& data,
            const std::vector<int64_t>& index, const std::vector<double>& accs)
      : k_(k),
        data_(data),
        index_(index),
        accs_(accs),
        memo_(k.nodes.size()),
        done_(k.nodes.size(), false) {}

  double at(int i) {
    if (done_[i]) return memo_[i];
    const ScalarNode& n = k_.nodes[i];
    double v = 0;
    switch (n.op) {
      case ScalarOp::load:
        v = data_[n.buffer][offset(n.buffer)];
        break;
      case ScalarOp::constant:
        v = n.value;
        break;
      case ScalarOp::acc:
        v = accs_[n.stage];
        break;
      case ScalarOp::index:
        v = static_cast<double>(index_[n.dim]);
        break;
      case ScalarOp::param:
        v = k_.params[n.param];
        break;
      default: {
        const int arity = scalar_op_arity(n.op);
        v = apply_scalar_op(n.op, at(n.a), arity > 1 ? at(n.b) : 0, arity > 2 ? at(n.c) : 0);
      }
    }
    done_[i] = true;
    return memo_[i] = v;
  }

  int64_t offset(int b) const {
    int64_t o = 0;
    for (size_t d = 0; d < index_.size(); ++d)
      o += index_[d] * k_.buffers[b].strides[d];
    return o;
  }

 private:
  const Kernel& k_;
  std::vector<std::vector<double>>& data_;
  const std::vector<int64_t>& index_;
  const std::vector<double>& accs_;
  std::vector<double> memo_;
  std::vector<bool> done_;
};

/// Calls f for every index of dims [from, to) of `domain`, odometer order, with `index` set.
template <class F>
void for_each(const Shape& domain, int from, int to, std::vector<int64_t>& index, F&& f) {
  for (int d = from; d < to; ++d)
    if (domain[d] == 0) return;
  for (int d = from; d < to; ++d)
    index[d] = 0;
  while (true) {
    f();
    int d = to - 1;
    for (; d >= from; --d) {
      if (++index[d] < domain[d]) break;
      index[d] = 0;
    }
    if (d < from) return;
  }
}

}  // namespace

void evaluate(const Kernel& kernel_in, std::vector<std::vector<double>>& data) {
  verify(kernel_in);
  const Kernel k = to_general_form(kernel_in);
  const int rank = static_cast<int>(k.domain.size()), p = k.parallel_dims();
  std::vector<int64_t> index(rank, 0);
  std::vector<double> accs(k.stages.size());
  // Total stores combine over P: start from the identity, fold each row's value in.
  for (const KernelStore& st : k.stores)
    if (st.total != Combine::none) data[st.buffer][0] = combine_identity(st.total);
  for_each(k.domain, 0, p, index, [&] {
    for (size_t s = 0; s < k.stages.size(); ++s) {
      double acc = combine_identity(k.stages[s].combine);
      for_each(k.domain, p, rank, index, [&] {
        PointEval e(k, data, index, accs);
        acc = combine_values(k.stages[s].combine, acc, e.at(k.stages[s].value));
      });
      accs[s] = acc;
    }
    // Every value of a point is computed before any store, so outputs may alias inputs.
    auto store_all = [&](bool row) {
      PointEval e(k, data, index, accs);
      std::vector<std::pair<int64_t, double>> values;
      for (const KernelStore& st : k.stores)
        if ((k.reduced > 0 && k.row_buffer(st.buffer)) == row)
          values.push_back({e.offset(st.buffer), e.at(st.value)});
      size_t i = 0;
      for (const KernelStore& st : k.stores)
        if ((k.reduced > 0 && k.row_buffer(st.buffer)) == row) {
          double& slot = data[st.buffer][values[i].first];
          slot = st.total == Combine::none ? values[i].second
                                           : combine_values(st.total, slot, values[i].second);
          ++i;
        }
    };
    for_each(k.domain, p, rank, index, [&] { store_all(false); });
    for (int d = p; d < rank; ++d)
      index[d] = 0;
    store_all(true);
  });
}

}  // namespace ein
