// The loop structure of an emitted kernel (see emit_mlir.cpp for the schedules): the outer
// parallel range split into chunks, and per point (or SIMD group of points) the stages, the
// full stores over the row and the row stores. Every value a point stores is computed before
// its first store, so an output may alias an input with the same strides.
//
// The stash (plan_stash): when the last stage reduces an expensive value e (softmax's
// exp(x − max)) and the full stores read the row only through e, the stage loop also writes e
// into a full output of the compute type, and the store loop reads it back from there (the row
// is still in L1) instead of recomputing it: softmax does one exp per element, not two, like
// PyTorch's CPU softmax, which writes the exponentials to the output and then scales them.
//
// The single pass (plan_single_pass): when nothing stored over the row reads a stage's result,
// the stages and the full stores share one loop over the row (modes B and scalar).
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "compiler/emit/emit_mlir_function.h"

namespace ein::detail {
namespace {

std::string_view horizontal_kind(Combine c) {
  switch (c) {
    case Combine::prod:
      return "mul";
    case Combine::max:
      return "maximumf";
    case Combine::min:
      return "minimumf";
    default:
      return "add";
  }
}

}  // namespace

std::string FunctionEmitter::combine(Combine c, const std::string& a, const std::string& b, int w) {
  switch (c) {
    case Combine::sum:
      return binary("arith.addf", a, b, w);
    case Combine::prod:
      return binary("arith.mulf", a, b, w);
    case Combine::max:
      return binary("arith.maximumf", a, b, w);
    case Combine::min:
      return binary("arith.minimumf", a, b, w);
    case Combine::none:
      break;
  }
  throw std::logic_error("internal error: combine without a reduction");
}

// ---- accumulators ----------------------------------------------------------------------------

bool FunctionEmitter::wide(int stage) const {
  return k_.compute == DType::f32 && k_.stages[stage].combine == Combine::sum;
}

bool FunctionEmitter::any_wide() const {
  for (int s = 0; s < static_cast<int>(k_.stages.size()); ++s)
    if (wide(s)) return true;
  return false;
}

std::string FunctionEmitter::wide_add(const std::string& carry, const std::string& part, int w) {
  const std::string part64 = convert(part, DType::f32, DType::f64, w);
  return op(fmt::format("arith.addf {}, {} : {}", carry, part64, vec_type(w, "f64")));
}

std::string FunctionEmitter::acc_type(int stage, int w) const {
  return vec_type(w, wide(stage) ? "f64" : compute_);
}

std::string FunctionEmitter::acc_identity(int stage, int w) {
  if (!wide(stage)) return literal(combine_identity(k_.stages[stage].combine), w);
  auto it = wide_zeros_.find(w);
  if (it != wide_zeros_.end()) return it->second;
  const std::string name = fmt::format("%wz{}", w);
  consts_ += w == 1
                 ? fmt::format("  {} = arith.constant 0.0 : f64\n", name)
                 : fmt::format("  {} = arith.constant dense<0.0> : {}\n", name, vec_type(w, "f64"));
  return wide_zeros_[w] = name;
}

std::string FunctionEmitter::accumulate(int stage, const std::string& acc, const std::string& v,
                                        int w) {
  return wide(stage) ? wide_add(acc, v, w) : combine(k_.stages[stage].combine, acc, v, w);
}

std::string FunctionEmitter::acc_result(int stage, const std::string& acc, int w) {
  return wide(stage) ? convert(acc, DType::f64, DType::f32, w) : acc;
}

std::string FunctionEmitter::to_scratch(int stage, const std::string& acc, int w) {
  // An f32 kernel's scratch area is f64: its other stages (max, min, prod) go through exactly.
  return k_.compute == DType::f32 && !wide(stage) ? convert(acc, DType::f32, DType::f64, w) : acc;
}

std::string FunctionEmitter::from_scratch(int stage, const std::string& v, int w) {
  return k_.compute == DType::f32 && !wide(stage) ? convert(v, DType::f64, DType::f32, w) : v;
}

FunctionEmitter::Point FunctionEmitter::advance(const Point& at, const std::string& iv, int dim) {
  Point next = at;
  next.ivs[dim] = iv;
  for (size_t b = 0; b < k_.buffers.size(); ++b) {
    const int64_t s = k_.buffers[b].strides[dim];
    if (s == 1)
      next.offsets[b] = add_index(at.offsets[b], iv);
    else if (s != 0)
      next.offsets[b] = add_index(at.offsets[b], mul_index(iv, strides_[b][dim]));
  }
  return next;
}

namespace {

bool expensive(ScalarOp op) {
  switch (op) {
    case ScalarOp::exp:
    case ScalarOp::log:
    case ScalarOp::tanh:
    case ScalarOp::erf:
    case ScalarOp::sin:
    case ScalarOp::cos:
    case ScalarOp::sigmoid:
    case ScalarOp::gelu:
    case ScalarOp::gelu_tanh:
    case ScalarOp::silu:
    case ScalarOp::pow:
      return true;
    default:
      return false;
  }
}

}  // namespace

void FunctionEmitter::plan_stash() {
  // 1. Only the last stage's value e, an op node whose DAG holds an expensive op, qualifies.
  // 2. Every full store must read non-row loads only through e (the output may alias an
  //    input: once e is stashed, the row's inputs may be gone), and at least one must use e.
  // 3. The stash buffer is the first full output of the compute type (no extra rounding).
  if (k_.stages.empty()) return;
  const int stage = static_cast<int>(k_.stages.size()) - 1;
  const int e = k_.stages[stage].value;
  const int n = static_cast<int>(k_.nodes.size());
  std::vector<char> costly(n, 0), outside(n, 0), uses(n, 0);
  for (int i = 0; i < n; ++i) {
    const ScalarNode& node = k_.nodes[i];
    costly[i] = expensive(node.op);
    outside[i] = node.op == ScalarOp::load && !k_.row_buffer(node.buffer);
    uses[i] = i == e;
    for (int o : {node.a, node.b, node.c}) {
      if (o < 0) continue;
      costly[i] = costly[i] || costly[o];
      outside[i] = outside[i] || (o != e && outside[o]);
      uses[i] = uses[i] || uses[o];
    }
  }
  if (!costly[e] || scalar_op_arity(k_.nodes[e].op) == 0) return;
  int buffer = -1;
  bool used = false;
  for (const KernelStore& st : k_.stores) {
    if (k_.row_buffer(st.buffer)) continue;
    if (outside[st.value]) return;
    used = used || uses[st.value];
    if (buffer < 0 && k_.buffers[st.buffer].dtype == k_.compute) buffer = st.buffer;
  }
  if (buffer < 0 || !used) return;
  stash_stage_ = stage;
  stash_buffer_ = buffer;
}

/// Stage `stage`'s value at `at` (w lanes along vdim); stashed when plan_stash() said so.
std::string FunctionEmitter::stage_value(int stage, const Point& at, int w, int vdim) {
  Memo memo;
  std::string v = value(k_.stages[stage].value, at, w, vdim, memo);
  if (stage == stash_stage_) store(stash_buffer_, v, at.offsets[stash_buffer_], w);
  return v;
}

/// Walks [lo, hi) in blocks of `step`, carrying `init` (of `types`): `block(b0, b1, carries)` emits
/// one block's loop and returns what it yields (partial sums from zero, in the compute type),
/// `merge(carries, parts)` the carries after the block. Returns the carries after the last.
std::vector<std::string> FunctionEmitter::in_blocks(
    const std::string& lo, const std::string& hi, int64_t step_size,
    const std::vector<std::string>& init, const std::vector<std::string>& types,
    const std::function<std::vector<std::string>(const std::string&, const std::string&,
                                                 const std::vector<std::string>&)>& block,
    const std::function<std::vector<std::string>(const std::vector<std::string>&,
                                                 const std::vector<std::string>&)>& merge) {
  const std::string b = fresh(), step = index(step_size);
  const Loop loop = open_loop(b, lo, hi, step, init, types);
  const std::string end = op(fmt::format("arith.minui {}, {} : index", add_index(b, step), hi));
  return close_loop(loop, merge(loop.carried, block(b, end, loop.carried)), types);
}

FunctionEmitter::Loop FunctionEmitter::open_loop(const std::string& iv, const std::string& lo,
                                                 const std::string& hi, const std::string& step,
                                                 const std::vector<std::string>& init,
                                                 const std::vector<std::string>& types) {
  const size_t n = init.size();
  Loop loop{fresh(), {}};
  std::string args;
  for (size_t i = 0; i < n; ++i) {
    loop.carried.push_back(fresh());
    args += fmt::format("{}{} = {}", i ? ", " : "", loop.carried.back(), init[i]);
  }
  if (n == 0)
    line(fmt::format("scf.for {} = {} to {} step {} {{", iv, lo, hi, step));
  else
    line(fmt::format("{}{} = scf.for {} = {} to {} step {} iter_args({}) -> ({}) {{", loop.res,
                     n > 1 ? fmt::format(":{}", n) : "", iv, lo, hi, step, args,
                     fmt::join(types, ", ")));
  indent_ += 2;
  return loop;
}

std::vector<std::string> FunctionEmitter::close_loop(const Loop& loop,
                                                     const std::vector<std::string>& next,
                                                     const std::vector<std::string>& types) {
  const size_t n = next.size();
  if (n > 0) line(fmt::format("scf.yield {} : {}", fmt::join(next, ", "), fmt::join(types, ", ")));
  indent_ -= 2;
  line("}");
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(n > 1 ? fmt::format("{}#{}", loop.res, i) : loop.res);
  return out;
}

/// Stage `stage`'s value at this point, combined into `acc` (w lanes, the stage's accumulator
/// type): one loop per reduced dim from `dim` inwards; mode A vectorizes the innermost one and
/// reduces the lanes at its end; a wide sum walks the innermost one in blocks of kRowTerms.
std::string FunctionEmitter::reduce_from(int stage, int dim, const Point& at, int w,
                                         const std::string& acc) {
  const int rank = static_cast<int>(k_.domain.size());
  const Combine c = k_.stages[stage].combine;
  if (dim == rank) return combine(c, acc, stage_value(stage, at, w, s_.vector_dim), w);
  if (dim == rank - 1 && s_.vector_dim == dim) return reduce_vectorized(stage, dim, at, acc);
  if (dim == rank - 1 && wide(stage)) {
    return in_blocks(
        index(0), sizes_[dim], kRowTerms, {acc}, {acc_type(stage, w)},
        [&](const std::string& lo, const std::string& hi, const std::vector<std::string>&) {
          const std::string part = fresh(), iv = fresh(), a = fresh(), ty = vec_type(w, compute_);
          line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", part,
                           iv, lo, hi, index(1), a, literal(0.0, w), ty));
          indent_ += 2;
          const std::string v = stage_value(stage, advance(at, iv, dim), w, s_.vector_dim);
          line(fmt::format("scf.yield {} : {}", combine(c, a, v, w), ty));
          indent_ -= 2;
          line("}");
          return std::vector<std::string>{part};
        },
        [&](const std::vector<std::string>& carry, const std::vector<std::string>& part) {
          return std::vector<std::string>{wide_add(carry[0], part[0], w)};
        })[0];
  }
  const std::string ty = acc_type(stage, w);
  std::string iv = fresh(), a = fresh(), res = fresh();
  line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", res, iv,
                   index(0), sizes_[dim], index(1), a, acc, ty));
  indent_ += 2;
  std::string next = reduce_from(stage, dim + 1, advance(at, iv, dim), w, a);
  line(fmt::format("scf.yield {} : {}", next, ty));
  indent_ -= 2;
  line("}");
  return res;
}

/// Mode A: lanes over the innermost reduced dim, four vector accumulators (four independent
/// dependency chains hide the add latency), then one, then a scalar tail; `acc` is scalar (in
/// the stage's accumulator type). A wide sum (an f32 kernel's) runs the four accumulators over
/// blocks of kSumTerms quads, from zero per block, and adds each block's lanes to an f64
/// accumulator: each f32 partial sums at most kSumTerms values.
std::string FunctionEmitter::reduce_vectorized(int stage, int dim, const Point& at,
                                               const std::string& acc) {
  const Combine c = k_.stages[stage].combine;
  const int vw = s_.vector_width;
  const std::string n = sizes_[dim];
  const std::string nv =
      mul_index(op(fmt::format("arith.divui {}, {} : index", n, index(vw))), index(vw));
  const std::string nv4 =
      mul_index(op(fmt::format("arith.divui {}, {} : index", n, index(4 * vw))), index(4 * vw));
  const std::string vty = vec_type(vw, compute_);
  const std::string init = literal(combine_identity(c), vw);
  // The four accumulators over [lo, hi) (a multiple of 4·vw), from the identity, merged.
  auto quads = [&](const std::string& lo, const std::string& hi) {
    std::string quad = fresh(), qiv = fresh();
    std::string qa[4] = {fresh(), fresh(), fresh(), fresh()};
    line(fmt::format(
        "{}:4 = scf.for {} = {} to {} step {} iter_args({} = {}, {} = {}, {} = {}, {} = {}) -> "
        "({}, {}, {}, {}) {{",
        quad, qiv, lo, hi, index(4 * vw), qa[0], init, qa[1], init, qa[2], init, qa[3], init, vty,
        vty, vty, vty));
    indent_ += 2;
    std::string next[4];
    for (int j = 0; j < 4; ++j) {
      const std::string pos = j == 0 ? qiv : add_index(qiv, index(j * vw));
      next[j] = combine(c, qa[j], stage_value(stage, advance(at, pos, dim), vw, dim), vw);
    }
    line(fmt::format("scf.yield {}, {}, {}, {} : {}, {}, {}, {}", next[0], next[1], next[2],
                     next[3], vty, vty, vty, vty));
    indent_ -= 2;
    line("}");
    return combine(c, combine(c, quad + "#0", quad + "#1", vw),
                   combine(c, quad + "#2", quad + "#3", vw), vw);
  };
  // One vector accumulator over [nv4, nv), from `from`.
  auto singles = [&](const std::string& from) {
    std::string iv = fresh(), a = fresh(), res = fresh();
    line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", res, iv,
                     nv4, nv, index(vw), a, from, vty));
    indent_ += 2;
    const std::string v = stage_value(stage, advance(at, iv, dim), vw, dim);
    line(fmt::format("scf.yield {} : {}", combine(c, a, v, vw), vty));
    indent_ -= 2;
    line("}");
    return res;
  };
  std::string start;
  if (!wide(stage)) {
    const std::string h =
        op(fmt::format("vector.reduction <{}>, {} : {} into {}", horizontal_kind(c),
                       singles(quads(index(0), nv4)), vty, compute_));
    start = combine(c, acc, h, 1);
  } else {
    // Each block's merged f32 vector is summed across its lanes (as a tree: reassociating
    // these few adds is what makes them cheap) and added to the f64 accumulator.
    auto lanes = [&](const std::string& v) {
      return op(fmt::format("vector.reduction <add>, {} fastmath<reassoc> : {} into {}", v, vty,
                            compute_));
    };
    const std::string blocks =
        // kSumTerms quads a block: each lane of each accumulator sums kSumTerms values
        in_blocks(
            index(0), nv4, 4 * vw * kSumTerms, {acc}, {"f64"},
            [&](const std::string& lo, const std::string& hi, const std::vector<std::string>&) {
              return std::vector<std::string>{lanes(quads(lo, hi))};
            },
            [&](const std::vector<std::string>& carry, const std::vector<std::string>& part) {
              return std::vector<std::string>{wide_add(carry[0], part[0], 1)};
            })[0];
    start = wide_add(blocks, lanes(singles(init)), 1);
  }
  const std::string scalar = acc_type(stage, 1);
  std::string tiv = fresh(), ta = fresh(), tres = fresh();
  line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", tres, tiv,
                   nv, n, index(1), ta, start, scalar));
  indent_ += 2;
  {
    std::string v = stage_value(stage, advance(at, tiv, dim), 1, dim);
    line(fmt::format("scf.yield {} : {}", accumulate(stage, ta, v, 1), scalar));
  }
  indent_ -= 2;
  line("}");
  return tres;
}

/// Computes every value stored at `at` (the row stores if `row`, else the full ones), then
/// stores them all.
void FunctionEmitter::store_values(bool row, const Point& at, int w, int vdim) {
  Memo memo;
  if (!row && stash_stage_ >= 0)  // the stage stashed its value here: read it back
    memo[k_.stages[stash_stage_].value] = load(stash_buffer_, at.offsets[stash_buffer_], w, vdim);
  std::vector<std::pair<int, std::string>> values;
  for (const KernelStore& st : k_.stores)
    if ((k_.reduced > 0 && k_.row_buffer(st.buffer)) == row)
      values.push_back({st.buffer, value(st.value, at, w, vdim, memo)});
  for (const auto& [buffer, v] : values)
    store(buffer, v, at.offsets[buffer], w);
}

/// The full stores: one loop per reduced dim from `dim` inwards; in mode A the innermost is
/// vectorized with a scalar tail.
void FunctionEmitter::full_stores_from(int dim, const Point& at, int w) {
  const int rank = static_cast<int>(k_.domain.size());
  if (dim == rank) {
    store_values(false, at, w, s_.vector_dim);
    return;
  }
  if (dim == rank - 1 && s_.vector_dim == dim) {
    const int vw = s_.vector_width;
    const std::string n = sizes_[dim];
    const std::string nv =
        mul_index(op(fmt::format("arith.divui {}, {} : index", n, index(vw))), index(vw));
    for (int pass = 0; pass < 2; ++pass) {
      std::string iv = fresh();
      line(fmt::format("scf.for {} = {} to {} step {} {{", iv, pass == 0 ? index(0) : nv,
                       pass == 0 ? nv : n, index(pass == 0 ? vw : 1)));
      indent_ += 2;
      store_values(false, advance(at, iv, dim), pass == 0 ? vw : 1, dim);
      indent_ -= 2;
      line("}");
    }
    return;
  }
  std::string iv = fresh();
  line(fmt::format("scf.for {} = {} to {} step {} {{", iv, index(0), sizes_[dim], index(1)));
  indent_ += 2;
  full_stores_from(dim + 1, advance(at, iv, dim), w);
  indent_ -= 2;
  line("}");
}

bool single_pass_possible(const Kernel& k) {
  const int rank = static_cast<int>(k.domain.size());
  if (k.reduced == 0 || k.stages.empty()) return false;
  const int n = static_cast<int>(k.nodes.size());
  std::vector<char> reads_acc(n, 0);
  for (int i = 0; i < n; ++i) {
    const ScalarNode& node = k.nodes[i];
    reads_acc[i] = node.op == ScalarOp::acc;
    for (int o : {node.a, node.b, node.c})
      if (o >= 0) reads_acc[i] = reads_acc[i] || reads_acc[o];
  }
  bool any_full = false;
  for (const KernelStage& st : k.stages)
    if (reads_acc[st.value]) return false;
  for (const KernelStore& st : k.stores) {
    if (k.row_buffer(st.buffer)) continue;
    if (reads_acc[st.value]) return false;
    any_full = true;
  }
  return any_full && rank > 0;
}

void FunctionEmitter::plan_single_pass() {
  // The stages and the full stores share one loop over the row when none of them reads a
  // stage's result: a pointwise map that also reduces what it computes (GELU's backward with
  // its bias gradient, Σ over the batch of the values it stores). Each value is computed once
  // and each input read once, instead of a reduction pass and a store pass that both compute
  // the expensive part. Mode A keeps its four-accumulator loops over contiguous rows.
  const int rank = static_cast<int>(k_.domain.size());
  single_pass_ = s_.vector_dim != rank - 1 && single_pass_possible(k_);
}

/// One point of the single pass: every stage value combined into its accumulator in `accs`
/// and every full store's value computed (shared nodes once), then the stores written.
/// Returns the accumulators after the point.
std::vector<std::string> FunctionEmitter::single_pass_point(const Point& at, int w,
                                                            const std::vector<std::string>& accs) {
  Memo memo;
  std::vector<std::string> next;
  for (size_t s = 0; s < k_.stages.size(); ++s)
    next.push_back(combine(k_.stages[s].combine, accs[s],
                           value(k_.stages[s].value, at, w, s_.vector_dim, memo), w));
  std::vector<std::pair<int, std::string>> values;
  for (const KernelStore& st : k_.stores)
    if (!k_.row_buffer(st.buffer))
      values.push_back({st.buffer, value(st.value, at, w, s_.vector_dim, memo)});
  for (const auto& [buffer, v] : values)
    store(buffer, v, at.offsets[buffer], w);
  return next;
}

/// The single pass (plan_single_pass): one loop per reduced dim from `dim` inwards, carrying
/// every stage's accumulator; at each point of the row, every stage value and every full
/// store's value is computed (shared nodes once), then the stores are written. Returns the
/// accumulators after the row.
std::vector<std::string> FunctionEmitter::single_pass_from(int dim, const Point& at, int w,
                                                           const std::vector<std::string>& accs) {
  const int rank = static_cast<int>(k_.domain.size());
  const int n = static_cast<int>(k_.stages.size());
  if (dim == rank) return single_pass_point(at, w, accs);
  // Rows [lo, hi) of dim, carrying `init` (of `types`).
  auto rows = [&](const std::string& lo, const std::string& hi,
                  const std::vector<std::string>& init, const std::vector<std::string>& types) {
    const std::string iv = fresh();
    const Loop loop = open_loop(iv, lo, hi, index(1), init, types);
    return close_loop(loop, single_pass_from(dim + 1, advance(at, iv, dim), w, loop.carried),
                      types);
  };
  std::vector<std::string> types, part_types;
  for (int s = 0; s < n; ++s) {
    types.push_back(acc_type(s, w));
    part_types.push_back(vec_type(w, compute_));
  }
  if (dim < rank - 1 || !any_wide()) return rows(index(0), sizes_[dim], accs, types);
  // The innermost dim with wide sums: blocks of kRowTerms rows, each wide sum from zero in
  // the compute type, then added to its f64 accumulator; the other stages carry on as they are.
  return in_blocks(
      index(0), sizes_[dim], kRowTerms, accs, types,
      [&](const std::string& lo, const std::string& hi, const std::vector<std::string>& carry) {
        std::vector<std::string> init;
        for (int s = 0; s < n; ++s)
          init.push_back(wide(s) ? literal(0.0, w) : carry[s]);
        return rows(lo, hi, init, part_types);
      },
      [&](const std::vector<std::string>& carry, const std::vector<std::string>& part) {
        std::vector<std::string> next;
        for (int s = 0; s < n; ++s)
          next.push_back(wide(s) ? wide_add(carry[s], part[s], w) : part[s]);
        return next;
      });
}

/// One point, or `w` points along the last parallel dim: stages, full stores, row stores.
void FunctionEmitter::point(const Point& at, int w) {
  const int p = k_.parallel_dims();
  if (k_.reduced == 0) {
    store_values(false, at, w, std::max(s_.vector_dim, 0));
    return;
  }
  const int lanes = s_.vector_dim == p - 1 ? w : 1;
  accs_.clear();
  acc_lanes_ = lanes;
  const int stages = static_cast<int>(k_.stages.size());
  if (single_pass_) {
    std::vector<std::string> init;
    for (int s = 0; s < stages; ++s)
      init.push_back(acc_identity(s, lanes));
    accs_ = single_pass_from(p, at, lanes, init);
    for (int s = 0; s < stages; ++s)
      accs_[s] = acc_result(s, accs_[s], lanes);
  } else {
    for (int s = 0; s < stages; ++s)
      accs_.push_back(acc_result(s, reduce_from(s, p, at, lanes, acc_identity(s, lanes)), lanes));
    bool any_full = false;
    for (const KernelStore& st : k_.stores)
      any_full = any_full || !k_.row_buffer(st.buffer);
    if (any_full) full_stores_from(p, at, lanes);
  }
  store_values(true, at, lanes, std::max(s_.vector_dim, 0));
}

void FunctionEmitter::emit_outer_loop() {
  plan_single_pass();
  if (!single_pass_) plan_stash();
  const int p = k_.parallel_dims();
  // Panels and row blocks need the single pass (the register schedule runs any chunk size).
  const bool panels = s_.panel > 0 && single_pass_ && s_.vector_dim == p - 1;
  const bool blocks =
      s_.row_block > 0 && single_pass_ && s_.vector_dim == 0 && p == 1 && k_.domain.size() == 2;
  if (s_.row_block > 0 && !blocks)
    throw std::logic_error("internal error: a row-block schedule for a kernel it does not fit");
  if (panels || blocks) {
    // Per stage an array of its accumulators in the compute type, and for a wide sum one of
    // f64 that the f32 ones are added to every kRowTerms rows (flush_rows_; a row block of at
    // most kRowTerms rows sums in f32 alone and widens its sums once, for the scratch area).
    array_length_ = panels ? std::to_string(s_.panel) : "?";
    flush_rows_ = any_wide() && (panels || s_.row_block > kRowTerms);
    auto array = [&](std::string_view scalar) {
      const std::string name = fresh();
      line(fmt::format("{} = memref.alloca({}) : memref<{}x{}>", name, blocks ? sizes_[0] : "",
                       array_length_, scalar));
      return name;
    };
    for (int s = 0; s < static_cast<int>(k_.stages.size()); ++s) {
      panel_accs_.push_back(array(compute_));
      wide_accs_.push_back(wide(s) && flush_rows_ ? array("f64") : "");
    }
  }
  Point zero{std::vector<std::string>(k_.buffers.size(), index(0)),
             std::vector<std::string>(k_.domain.size())};
  std::string it = fresh();
  line(fmt::format("scf.for {} = %begin to %end step {} {{", it, index(1)));
  indent_ += 2;
  if (blocks) {
    line(fmt::format("scf.if {} {{",
                     op(fmt::format("arith.cmpi ult, {}, {} : index", it, chunks_))));
    indent_ += 2;
    row_block(it, zero);
    indent_ -= 2;
    line("} else {");
    indent_ += 2;
    combine_blocks(zero);
    indent_ -= 2;
    line("}");
  } else if (p == 0) {
    point(zero, 1);
  } else {
    const int last = p - 1;
    const std::string n = sizes_[last];
    // it = ((i0 · n1 + i1) · … ) · chunks + chunk
    std::string rest = it;
    std::string chunk = op(fmt::format("arith.remui {}, {} : index", rest, chunks_));
    rest = op(fmt::format("arith.divui {}, {} : index", rest, chunks_));
    Point base = zero;
    for (int d = last - 1; d >= 0; --d) {
      std::string i =
          d == 0 ? rest : op(fmt::format("arith.remui {}, {} : index", rest, sizes_[d]));
      if (d > 0) rest = op(fmt::format("arith.divui {}, {} : index", rest, sizes_[d]));
      base = advance(base, i, d);
    }
    std::string lo = mul_index(chunk, chunk_);
    std::string hi = op(fmt::format("arith.minui {}, {} : index", add_index(lo, chunk_), n));
    if (panels) {
      panel(lo, hi, base);
    } else if (s_.vector_dim == last) {
      const int w = s_.vector_width;
      std::string len = op(fmt::format("arith.subi {}, {} : index", hi, lo));
      auto whole = [&](int step) {
        return add_index(
            lo, op(fmt::format("arith.muli {}, {} : index",
                               op(fmt::format("arith.divui {}, {} : index", len, index(step))),
                               index(step))));
      };
      std::string nv = whole(w);
      if (k_.reduced > 0 && s_.group > 1) {  // mode B: several vectors of points per row walk
        std::string ng = whole(s_.group * w);
        inner_loop(lo, ng, s_.group * w, base, last);
        inner_loop(ng, nv, w, base, last);
      } else {
        inner_loop(lo, nv, w, base, last);
      }
      inner_loop(nv, hi, 1, base, last);
    } else {
      inner_loop(lo, hi, 1, base, last);
    }
  }
  indent_ -= 2;
  line("}");
}

void FunctionEmitter::inner_loop(const std::string& lo, const std::string& hi, int w,
                                 const Point& base, int dim) {
  std::string iv = fresh();
  line(fmt::format("scf.for {} = {} to {} step {} {{", iv, lo, hi, index(w)));
  indent_ += 2;
  point(advance(base, iv, dim), w);
  indent_ -= 2;
  line("}");
}

}  // namespace ein::detail
