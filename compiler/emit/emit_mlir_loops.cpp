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

/// Stage `stage`'s value at this point, combined into `acc` (w lanes): one loop per reduced
/// dim from `dim` inwards; mode A vectorizes the innermost one and reduces the lanes at its end.
std::string FunctionEmitter::reduce_from(int stage, int dim, const Point& at, int w,
                                         const std::string& acc) {
  const int rank = static_cast<int>(k_.domain.size());
  const KernelStage& st = k_.stages[stage];
  if (dim == rank) return combine(st.combine, acc, stage_value(stage, at, w, s_.vector_dim), w);
  if (dim == rank - 1 && s_.vector_dim == dim) return reduce_vectorized(stage, dim, at, acc);
  const std::string ty = vec_type(w, compute_);
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
/// dependency chains hide the add latency), then one, then a scalar tail; `acc` is scalar.
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
  std::string quad = fresh(), qiv = fresh();
  std::string qa[4] = {fresh(), fresh(), fresh(), fresh()};
  const std::string init = literal(combine_identity(c), vw);
  line(fmt::format(
      "{}:4 = scf.for {} = {} to {} step {} iter_args({} = {}, {} = {}, {} = {}, {} = {}) -> "
      "({}, {}, {}, {}) {{",
      quad, qiv, index(0), nv4, index(4 * vw), qa[0], init, qa[1], init, qa[2], init, qa[3], init,
      vty, vty, vty, vty));
  indent_ += 2;
  {
    std::string next[4];
    for (int j = 0; j < 4; ++j) {
      const std::string pos = j == 0 ? qiv : add_index(qiv, index(j * vw));
      next[j] = combine(c, qa[j], stage_value(stage, advance(at, pos, dim), vw, dim), vw);
    }
    line(fmt::format("scf.yield {}, {}, {}, {} : {}, {}, {}, {}", next[0], next[1], next[2],
                     next[3], vty, vty, vty, vty));
  }
  indent_ -= 2;
  line("}");
  const std::string merged = combine(c, combine(c, quad + "#0", quad + "#1", vw),
                                     combine(c, quad + "#2", quad + "#3", vw), vw);
  std::string iv = fresh(), a = fresh(), vres = fresh();
  line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", vres, iv,
                   nv4, nv, index(vw), a, merged, vty));
  indent_ += 2;
  {
    std::string v = stage_value(stage, advance(at, iv, dim), vw, dim);
    line(fmt::format("scf.yield {} : {}", combine(c, a, v, vw), vty));
  }
  indent_ -= 2;
  line("}");
  std::string h = op(fmt::format("vector.reduction <{}>, {} : {} into {}", horizontal_kind(c), vres,
                                 vty, compute_));
  std::string start = combine(c, acc, h, 1);
  std::string tiv = fresh(), ta = fresh(), tres = fresh();
  line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", tres, tiv,
                   nv, n, index(1), ta, start, compute_));
  indent_ += 2;
  {
    std::string v = stage_value(stage, advance(at, tiv, dim), 1, dim);
    line(fmt::format("scf.yield {} : {}", combine(c, ta, v, 1), compute_));
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
  const size_t n = k_.stages.size();
  if (dim == rank) return single_pass_point(at, w, accs);
  const std::string ty = vec_type(w, compute_);
  std::string res = fresh(), iv = fresh(), args, types;
  std::vector<std::string> inner;
  for (size_t s = 0; s < n; ++s) {
    inner.push_back(fresh());
    args += fmt::format("{}{} = {}", s ? ", " : "", inner.back(), accs[s]);
    types += fmt::format("{}{}", s ? ", " : "", ty);
  }
  line(fmt::format("{}{} = scf.for {} = {} to {} step {} iter_args({}) -> ({}) {{", res,
                   n > 1 ? fmt::format(":{}", n) : "", iv, index(0), sizes_[dim], index(1), args,
                   types));
  indent_ += 2;
  const std::vector<std::string> next = single_pass_from(dim + 1, advance(at, iv, dim), w, inner);
  line(fmt::format("scf.yield {} : {}", fmt::join(next, ", "), types));
  indent_ -= 2;
  line("}");
  std::vector<std::string> out;
  for (size_t s = 0; s < n; ++s)
    out.push_back(n > 1 ? fmt::format("{}#{}", res, s) : res);
  return out;
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
  if (single_pass_) {
    std::vector<std::string> init;
    for (const KernelStage& st : k_.stages)
      init.push_back(literal(combine_identity(st.combine), lanes));
    accs_ = single_pass_from(p, at, lanes, init);
  } else {
    for (size_t s = 0; s < k_.stages.size(); ++s)
      accs_.push_back(reduce_from(static_cast<int>(s), p, at, lanes,
                                  literal(combine_identity(k_.stages[s].combine), lanes)));
    bool any_full = false;
    for (const KernelStore& st : k_.stores)
      any_full = any_full || !k_.row_buffer(st.buffer);
    if (any_full) full_stores_from(p, at, lanes);
  }
  store_values(true, at, lanes, std::max(s_.vector_dim, 0));
}

// ---- panels (mode B in one pass) ------------------------------------------------------------
// An outer iteration is a panel: points [lo, hi) of the last parallel dim. The stages'
// accumulators live in stack arrays (one per stage, index = point - lo); the panel's rows are
// walked in order, each row step running over the panel's points in vectors (then a scalar
// tail), so each buffer is read and written in runs of hi - lo contiguous elements. The sums
// are combined row by row in the same order as the register schedule: the results are the
// same bits.

std::string FunctionEmitter::panel_acc(int stage, const std::string& column, int w) {
  const std::string& memref = acc_memref_;
  if (w == 1)
    return op(fmt::format("memref.load {}[{}] : {}", panel_accs_[stage], column, memref));
  return op(fmt::format("vector.load {}[{}] : {}, {}", panel_accs_[stage], column, memref,
                        vec_type(w, compute_)));
}

void FunctionEmitter::set_panel_acc(int stage, const std::string& column, const std::string& v,
                                    int w) {
  const std::string& memref = acc_memref_;
  if (w == 1)
    line(fmt::format("memref.store {}, {}[{}] : {}", v, panel_accs_[stage], column, memref));
  else
    line(fmt::format("vector.store {}, {}[{}] : {}, {}", v, panel_accs_[stage], column, memref,
                     vec_type(w, compute_)));
}

/// Points [lo, hi) of the last parallel dim from `at`, in vectors then a scalar tail: `body`
/// gets the point's offset in the panel, its lanes and the point.
void FunctionEmitter::panel_columns(
    const std::string& lo, const std::string& hi, const Point& at,
    const std::function<void(const std::string&, int, const Point&)>& body) {
  const int last = k_.parallel_dims() - 1, vw = s_.vector_width;
  const std::string len = op(fmt::format("arith.subi {}, {} : index", hi, lo));
  const std::string nv = add_index(
      lo, mul_index(op(fmt::format("arith.divui {}, {} : index", len, index(vw))), index(vw)));
  for (int pass = 0; pass < 2; ++pass) {
    const std::string iv = fresh();
    line(fmt::format("scf.for {} = {} to {} step {} {{", iv, pass == 0 ? lo : nv,
                     pass == 0 ? nv : hi, index(pass == 0 ? vw : 1)));
    indent_ += 2;
    body(op(fmt::format("arith.subi {}, {} : index", iv, lo)), pass == 0 ? vw : 1,
         advance(at, iv, last));
    indent_ -= 2;
    line("}");
  }
}

/// One row of points [lo, hi) at `at`: every stage combined into its array, every full store
/// written.
void FunctionEmitter::panel_row(const std::string& lo, const std::string& hi, const Point& at) {
  panel_columns(lo, hi, at, [&](const std::string& col, int w, const Point& pt) {
    std::vector<std::string> accs;
    for (size_t s = 0; s < k_.stages.size(); ++s)
      accs.push_back(panel_acc(static_cast<int>(s), col, w));
    const std::vector<std::string> next = single_pass_point(pt, w, accs);
    for (size_t s = 0; s < next.size(); ++s)
      set_panel_acc(static_cast<int>(s), col, next[s], w);
  });
}

/// Every stage's array over points [lo, hi) set to the stage's identity.
void FunctionEmitter::reset_panel_accs(const std::string& lo, const std::string& hi,
                                       const Point& base) {
  panel_columns(lo, hi, base, [&](const std::string& col, int w, const Point&) {
    for (size_t s = 0; s < k_.stages.size(); ++s)
      set_panel_acc(static_cast<int>(s), col,
                    literal(combine_identity(k_.stages[s].combine), w), w);
  });
}

/// The rows of the panel: one loop per reduced dim from `dim` inwards, the panel's points
/// innermost (every stage combined into its array, every full store written).
void FunctionEmitter::panel_rows_from(int dim, const std::string& lo, const std::string& hi,
                                      const Point& at) {
  const int rank = static_cast<int>(k_.domain.size());
  if (dim == rank) {
    panel_row(lo, hi, at);
    return;
  }
  const std::string iv = fresh();
  line(fmt::format("scf.for {} = {} to {} step {} {{", iv, index(0), sizes_[dim], index(1)));
  indent_ += 2;
  panel_rows_from(dim + 1, lo, hi, advance(at, iv, dim));
  indent_ -= 2;
  line("}");
}

/// One panel: the arrays set to each stage's identity, the rows, then the row stores.
void FunctionEmitter::panel(const std::string& lo, const std::string& hi, const Point& base) {
  reset_panel_accs(lo, hi, base);
  panel_rows_from(k_.parallel_dims(), lo, hi, base);
  panel_columns(lo, hi, base, [&](const std::string& col, int w, const Point& pt) {
    accs_.clear();
    for (size_t s = 0; s < k_.stages.size(); ++s)
      accs_.push_back(panel_acc(static_cast<int>(s), col, w));
    acc_lanes_ = w;
    store_values(true, pt, w, s_.vector_dim);
  });
}

// ---- row blocks (mode B in one pass, one parallel and one reduced dim) -----------------------
// An outer iteration below the block count is a block of whole rows: the sums of its rows in
// stack arrays (one per stage, index = point), walked like a panel of every point, then
// written to the scratch area at [block][stage][point]. The iteration at the block count
// combines the blocks' sums in block order and writes the row stores.

std::string FunctionEmitter::scratch_at(const std::string& block, int stage,
                                        const std::string& column) {
  const std::string row = add_index(
      mul_index(block, index(static_cast<int64_t>(k_.stages.size()))), index(stage));
  return add_index(mul_index(row, sizes_[0]), column);
}

void FunctionEmitter::row_block(const std::string& block, const Point& zero) {
  const std::string n = sizes_[0], scratch = fmt::format("%m{}", k_.buffers.size() + 2);
  const std::string memref = fmt::format("memref<?x{}>", compute_);
  reset_panel_accs(index(0), n, zero);
  const std::string r0 = mul_index(block, chunk_);
  const std::string r1 =
      op(fmt::format("arith.minui {}, {} : index", add_index(r0, chunk_), sizes_[1]));
  const std::string iv = fresh();
  line(fmt::format("scf.for {} = {} to {} step {} {{", iv, r0, r1, index(1)));
  indent_ += 2;
  panel_row(index(0), n, advance(zero, iv, 1));
  indent_ -= 2;
  line("}");
  panel_columns(index(0), n, zero, [&](const std::string& col, int w, const Point&) {
    for (size_t s = 0; s < k_.stages.size(); ++s) {
      const std::string v = panel_acc(static_cast<int>(s), col, w),
                        at = scratch_at(block, static_cast<int>(s), col);
      if (w == 1)
        line(fmt::format("memref.store {}, {}[{}] : {}", v, scratch, at, memref));
      else
        line(fmt::format("vector.store {}, {}[{}] : {}, {}", v, scratch, at, memref,
                         vec_type(w, compute_)));
    }
  });
}

void FunctionEmitter::combine_blocks(const Point& zero) {
  const std::string scratch = fmt::format("%m{}", k_.buffers.size() + 2);
  const std::string memref = fmt::format("memref<?x{}>", compute_);
  panel_columns(index(0), sizes_[0], zero, [&](const std::string& col, int w, const Point& pt) {
    const std::string ty = vec_type(w, compute_);
    accs_.clear();
    for (size_t s = 0; s < k_.stages.size(); ++s) {
      const Combine c = k_.stages[s].combine;
      const std::string res = fresh(), b = fresh(), a = fresh();
      line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", res, b,
                       index(0), chunks_, index(1), a, literal(combine_identity(c), w), ty));
      indent_ += 2;
      const std::string at = scratch_at(b, static_cast<int>(s), col);
      const std::string v =
          w == 1 ? op(fmt::format("memref.load {}[{}] : {}", scratch, at, memref))
                 : op(fmt::format("vector.load {}[{}] : {}, {}", scratch, at, memref, ty));
      line(fmt::format("scf.yield {} : {}", combine(c, a, v, w), ty));
      indent_ -= 2;
      line("}");
      accs_.push_back(res);
    }
    acc_lanes_ = w;
    store_values(true, pt, w, s_.vector_dim);
  });
}

void FunctionEmitter::emit_outer_loop() {
  plan_single_pass();
  if (!single_pass_) plan_stash();
  const int p = k_.parallel_dims();
  // Panels and row blocks need the single pass (the register schedule runs any chunk size).
  const bool panels = s_.panel > 0 && single_pass_ && s_.vector_dim == p - 1;
  const bool blocks = s_.row_block > 0 && single_pass_ && s_.vector_dim == 0 && p == 1 &&
                      k_.domain.size() == 2;
  if (s_.row_block > 0 && !blocks)
    throw std::logic_error("internal error: a row-block schedule for a kernel it does not fit");
  if (panels || blocks) {
    acc_memref_ = panels ? fmt::format("memref<{}x{}>", s_.panel, compute_)
                         : fmt::format("memref<?x{}>", compute_);
    for (size_t s = 0; s < k_.stages.size(); ++s) {
      panel_accs_.push_back(fresh());
      line(fmt::format("{} = memref.alloca({}) : {}", panel_accs_.back(),
                       blocks ? sizes_[0] : "", acc_memref_));
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
