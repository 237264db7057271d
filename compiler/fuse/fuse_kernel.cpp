// One fusion group → one Kernel IR kernel. Members are visited in topological order: a map's
// body is copied with its loads replaced by in-group values or by loads of the kernel's input
// buffers (one per distinct source and affine access); a reduce becomes one or two stages with
// torch's formulas (as tensor_kernels.cpp: mean = Σ·(1/n), logsumexp guarded for ±inf rows,
// var = Σ(x − μ)²/(n − ddof)); stored members become the output buffers. A kernel with one
// store and at most one stage that it can express is written in Kernel IR's single-output
// shorthand, the rest in the general form.
#include <algorithm>
#include <cctype>
#include <limits>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "compiler/fuse/fuse_internal.h"

namespace ein::detail {
namespace {

class Builder {
 public:
  Builder(const Graph& g, const Group& grp) : g_(g), grp_(grp) {
    k_.domain = grp.domain;
    k_.reduced = grp.reduced;
    k_.origin = g.origin;
    // f64 if any value is f64, or when i64/i32 values meet no float (integer arithmetic,
    // exact below 2^53; exec/tensor_kernels.h's compute_type is the same rule).
    bool f64 = false, wide_int = false, any_float = false;
    auto see = [&](DType t) {
      f64 = f64 || t == DType::f64;
      wide_int = wide_int || t == DType::i64 || t == DType::i32;
      any_float = any_float || t == DType::f32 || t == DType::f16 || t == DType::bf16 || is_fp8(t);
    };
    for (int m : grp.members) {
      see(g.nodes[m].dtype);
      for (int in : g.nodes[m].inputs)
        see(g.nodes[in].dtype);
    }
    k_.compute = f64 || (wide_int && !any_float) ? DType::f64 : DType::f32;
    value_.assign(grp.members.size(), -1);
  }

  GroupKernel build(const std::vector<bool>& store) {
    std::vector<std::string> names;
    for (size_t m = 0; m < grp_.members.size(); ++m) {
      const GraphNode& n = g_.nodes[grp_.members[m]];
      if (n.op == GraphOp::map) {
        value_[m] = map(m);
        const auto& body = *std::get<MapAttr>(n.attr).body;
        names.push_back(body.name.empty() ? "map" : body.name);
      } else if (n.op == GraphOp::cast) {  // widening, exact: the value itself
        value_[m] = read(resolve_operand(g_, grp_.members[m], 0), grp_.place[m]);
        names.push_back("cast");
      } else {
        value_[m] = reduce(m);
        names.push_back(std::string(reduction_name(std::get<ReduceAttr>(n.attr).reduction)));
      }
    }
    for (size_t m = 0; m < grp_.members.size(); ++m) {
      if (!store[m]) continue;
      const GraphNode& n = g_.nodes[grp_.members[m]];
      const int buffer = k_.add_output(n.dtype, Shape(k_.domain.size(), 0));
      k_.store(buffer, value_[m]);
      if (m < total_.size()) k_.stores.back().total = total_[m];
      row_store_ = true;  // only read when there is a single store
      for (int d : grp_.place[m])
        row_store_ = row_store_ && d < k_.parallel_dims();
      FusedOutput& o = out_.attr.outputs.emplace_back();
      o.shape = n.shape;
      o.dtype = n.dtype;
      o.dims = grp_.place[m];
      out_.stored.push_back(grp_.members[m]);
    }
    if (out_.stored.empty())
      throw std::logic_error("internal error: a fused kernel stores nothing");
    k_.name = kernel_name(names);
    shorthand_if_possible();
    out_.attr.members = grp_.members;
    out_.attr.stored = out_.stored;
    for (int l : grp_.folded)
      if (std::find(out_.attr.members.begin(), out_.attr.members.end(), l) ==
          out_.attr.members.end())
        out_.attr.members.push_back(l);
    std::sort(out_.attr.members.begin(), out_.attr.members.end());
    out_.attr.kernel = std::make_shared<const Kernel>(std::move(k_));
    return std::move(out_);
  }

 private:
  /// The value of operand `op` of a member placed at `at`: inline or a load.
  int read(const Operand& op, const std::vector<int>& at) {
    for (size_t m = 0; m < grp_.members.size(); ++m)
      if (grp_.members[m] == op.source) return value_[m];
    Affine place;  // reader index as a function of the domain index
    place.cols = k_.domain.size();
    place.m.assign(at.size(), std::vector<int64_t>(place.cols, 0));
    place.o.assign(at.size(), 0);
    for (size_t j = 0; j < at.size(); ++j)
      if (at[j] >= 0) place.m[j][at[j]] = 1;
    Affine access = op.access.after(place);
    const Shape& xs = g_.nodes[op.source].shape;
    for (size_t t = 0; t < xs.size(); ++t)
      if (xs[t] == 1) {  // always index 0: a canonical row, so equal reads share a buffer
        std::fill(access.m[t].begin(), access.m[t].end(), 0);
        access.o[t] = 0;
      }
    int input = -1;
    for (size_t i = 0; i < out_.sources.size(); ++i)
      if (out_.sources[i] == op.source) input = static_cast<int>(i);
    if (input < 0) {
      input = static_cast<int>(out_.sources.size());
      out_.sources.push_back(op.source);
    }
    for (size_t r = 0; r < out_.attr.reads.size(); ++r) {
      const FusedRead& e = out_.attr.reads[r];
      if (e.input == input && e.matrix == access.m && e.offset == access.o)
        return k_.load(static_cast<int>(r));
    }
    const DType dtype = is_fp8(g_.nodes[op.source].dtype) ? DType::f32 : g_.nodes[op.source].dtype;
    const int buffer = k_.add_buffer(dtype, Shape(k_.domain.size(), 0));
    out_.attr.reads.push_back({input, std::move(access.m), std::move(access.o)});
    return k_.load(buffer);
  }

  int map(size_t m) {
    const int id = grp_.members[m];
    const GraphNode& n = g_.nodes[id];
    const Kernel& body = *std::get<MapAttr>(n.attr).body;
    const std::vector<int>& at = grp_.place[m];
    std::vector<int> node(body.nodes.size(), -1);
    for (size_t i = 0; i < body.nodes.size(); ++i) {
      const ScalarNode& s = body.nodes[i];
      switch (s.op) {
        case ScalarOp::load:
          node[i] = read(resolve_operand(g_, id, s.buffer), at);
          break;
        case ScalarOp::constant:
          node[i] = k_.constant(s.value);
          break;
        case ScalarOp::index:
          node[i] = at[s.dim] >= 0 ? k_.index(at[s.dim]) : k_.constant(0);
          break;
        case ScalarOp::param:
          node[i] = k_.param(body.params[s.param]);
          break;
        case ScalarOp::acc:
          throw std::logic_error("internal error: acc in a map body");
        default:
          node[i] = k_.apply(s.op, s.a >= 0 ? node[s.a] : -1, s.b >= 0 ? node[s.b] : -1,
                             s.c >= 0 ? node[s.c] : -1);
      }
    }
    return node[body.result >= 0 ? body.result : body.body];
  }

  int reduce(size_t m) {
    const int id = grp_.members[m];
    const auto& a = std::get<ReduceAttr>(g_.nodes[id].attr);
    const int x = read(resolve_operand(g_, id, 0), grp_.in_place[m]);
    if (is_total(g_, grp_, m)) return total(m, a.reduction, x);
    double n = 1;
    for (size_t d = k_.domain.size() - k_.reduced; d < k_.domain.size(); ++d)
      n *= static_cast<double>(k_.domain[d]);
    auto c = [&](double v) { return k_.constant(v); };
    switch (a.reduction) {
      case Reduction::sum:
        return k_.reduce(Combine::sum, x);
      case Reduction::prod:
        return k_.reduce(Combine::prod, x);
      case Reduction::max:
        return k_.reduce(Combine::max, x);
      case Reduction::min:
        return k_.reduce(Combine::min, x);
      case Reduction::any:
        return k_.reduce(Combine::max, k_.apply(ScalarOp::ne, x, c(0)));
      case Reduction::all:
        return k_.reduce(Combine::min, k_.apply(ScalarOp::ne, x, c(0)));
      case Reduction::mean:
        return k_.apply(ScalarOp::mul, k_.reduce(Combine::sum, x), c(1.0 / n));
      case Reduction::logsumexp: {
        const int mx = k_.reduce(Combine::max, x);
        const int inf = k_.apply(ScalarOp::eq, k_.apply(ScalarOp::abs, mx),
                                 c(std::numeric_limits<double>::infinity()));
        const int safe = k_.apply(ScalarOp::where, inf, c(0), mx);
        const int s =
            k_.reduce(Combine::sum, k_.apply(ScalarOp::exp, k_.apply(ScalarOp::sub, x, safe)));
        return k_.apply(ScalarOp::add, safe, k_.apply(ScalarOp::log, s));
      }
      case Reduction::var:
      case Reduction::std: {
        if (!a.ddof) throw std::logic_error("internal error: var/std without ddof");
        const int mu = k_.apply(ScalarOp::mul, k_.reduce(Combine::sum, x), c(1.0 / n));
        const int ss =
            k_.reduce(Combine::sum, k_.apply(ScalarOp::square, k_.apply(ScalarOp::sub, x, mu)));
        const int v = k_.apply(ScalarOp::div, ss, c(n - static_cast<double>(*a.ddof)));
        return a.reduction == Reduction::std ? k_.apply(ScalarOp::sqrt, v) : v;
      }
      case Reduction::none:
        break;
    }
    throw std::logic_error("internal error: reduce without a reduction in a fused kernel");
  }

  /// `fused_` and the members' names (letters, digits and '_' only: it names a symbol).
  static std::string kernel_name(const std::vector<std::string>& names) {
    std::string name = "fused";
    for (const std::string& n : names) {
      if (name.size() > 48) {
        name += "_etc";
        break;
      }
      name += '_';
      for (char ch : n)
        name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    }
    return name;
  }

  /// One store and at most one stage whose store is over the rows (or no stage): the
  /// single-output shorthand, which every emitter reads.
  void shorthand_if_possible() {
    if (k_.stores.size() != 1 || k_.stages.size() > 1) return;
    const KernelStore st = k_.stores.front();
    if (st.total != Combine::none) return;  // the shorthand has no total stores
    if (!k_.stages.empty() && !row_store_) return;
    k_.combine = k_.stages.empty() ? Combine::none : k_.stages.front().combine;
    k_.body = k_.stages.empty() ? st.value : k_.stages.front().value;
    k_.result = st.value;
    k_.stages.clear();
    k_.stores.clear();
  }

  /// A total member's per-row value (scaled by 1/rows for a mean) and its combine.
  int total(size_t m, Reduction r, int x) {
    double rows = 1;
    for (int d = 0; d < k_.parallel_dims(); ++d)
      rows *= static_cast<double>(k_.domain[d]);
    total_.resize(grp_.members.size(), Combine::none);
    total_[m] = r == Reduction::prod  ? Combine::prod
                : r == Reduction::max ? Combine::max
                : r == Reduction::min ? Combine::min
                                      : Combine::sum;
    return r == Reduction::mean ? k_.apply(ScalarOp::mul, x, k_.constant(1.0 / rows)) : x;
  }

  const Graph& g_;
  const Group& grp_;
  Kernel k_;
  std::vector<int> value_;
  std::vector<Combine> total_;  ///< per member: its total store's combine (none: not a total)
  bool row_store_ = false;      ///< whether the last store added spans only the parallel dims
  GroupKernel out_;
};

}  // namespace

GroupKernel build_group_kernel(const Graph& g, const Group& group, const std::vector<bool>& store) {
  return Builder(g, group).build(store);
}

}  // namespace ein::detail
