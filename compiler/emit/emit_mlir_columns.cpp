// The column schedules of an emitted kernel (mode B in one pass; see emit_mlir.cpp): panels,
// a thread's share of the points walked row by row with the sums in stack arrays, and row
// blocks, blocks of whole rows whose sums one last iteration combines. An f32 kernel's sums
// take kRowTerms rows in f32 arrays, then are added to f64 arrays (flush_wide).
#include <string>
#include <vector>

#include "compiler/emit/emit_mlir_function.h"

namespace ein::detail {

// ---- panels (mode B in one pass) ------------------------------------------------------------
// An outer iteration is a panel: points [lo, hi) of the last parallel dim. The stages'
// accumulators live in stack arrays (one per stage, index = point - lo); the panel's rows are
// walked in order, each row step running over the panel's points in vectors (then a scalar
// tail), so each buffer is read and written in runs of hi - lo contiguous elements. The sums
// are combined row by row in the same order as the register schedule: the results are the
// same bits.

std::string FunctionEmitter::array_load(const std::string& array, std::string_view scalar,
                                        const std::string& column, int w) {
  return memref_load(array, array_length_, scalar, column, w);
}

void FunctionEmitter::array_store(const std::string& array, std::string_view scalar,
                                  const std::string& column, const std::string& v, int w) {
  memref_store(array, array_length_, scalar, column, v, w);
}

std::string FunctionEmitter::panel_acc(int stage, const std::string& column, int w) {
  return array_load(panel_accs_[stage], compute_, column, w);
}

void FunctionEmitter::set_panel_acc(int stage, const std::string& column, const std::string& v,
                                    int w) {
  array_store(panel_accs_[stage], compute_, column, v, w);
}

/// Stage `stage`'s accumulator at `column`, in its accumulator type: a wide sum's f64 one
/// (after flush_wide; without flushes, its f32 partial widened), else the panel array's.
std::string FunctionEmitter::panel_result(int stage, const std::string& column, int w) {
  if (!wide(stage)) return panel_acc(stage, column, w);
  if (flush_rows_) return array_load(wide_accs_[stage], "f64", column, w);
  return convert(panel_acc(stage, column, w), DType::f32, DType::f64, w);
}

/// Every wide sum's f32 partials over points [lo, hi) added to its f64 array, and reset.
void FunctionEmitter::flush_wide(const std::string& lo, const std::string& hi, const Point& at) {
  panel_columns(lo, hi, at, [&](const std::string& col, int w, const Point&) {
    for (int s = 0; s < static_cast<int>(k_.stages.size()); ++s) {
      if (!wide(s)) continue;
      const std::string sum =
          wide_add(array_load(wide_accs_[s], "f64", col, w), panel_acc(s, col, w), w);
      array_store(wide_accs_[s], "f64", col, sum, w);
      set_panel_acc(s, col, literal(0.0, w), w);
    }
  });
}

/// Rows [r0, r1) over points [lo, hi) from `at`: `row(iv)` walks one; with wide sums over
/// more than kRowTerms rows (flush_rows_), in blocks of kRowTerms rows, each followed by
/// flush_wide.
void FunctionEmitter::panel_rows(const std::string& r0, const std::string& r1,
                                 const std::string& lo, const std::string& hi, const Point& at,
                                 const std::function<void(const std::string&)>& row) {
  auto walk = [&](const std::string& from, const std::string& to) {
    const std::string iv = fresh();
    line(fmt::format("scf.for {} = {} to {} step {} {{", iv, from, to, index(1)));
    indent_ += 2;
    row(iv);
    indent_ -= 2;
    line("}");
  };
  if (!flush_rows_) {
    walk(r0, r1);
    return;
  }
  in_blocks(
      r0, r1, kRowTerms, {}, {},
      [&](const std::string& b0, const std::string& b1, const std::vector<std::string>&) {
        walk(b0, b1);
        flush_wide(lo, hi, at);
        return std::vector<std::string>{};
      },
      [](const std::vector<std::string>&, const std::vector<std::string>&) {
        return std::vector<std::string>{};
      });
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

/// Every stage's arrays over points [lo, hi) set to the stage's identity.
void FunctionEmitter::reset_panel_accs(const std::string& lo, const std::string& hi,
                                       const Point& base) {
  panel_columns(lo, hi, base, [&](const std::string& col, int w, const Point&) {
    for (int s = 0; s < static_cast<int>(k_.stages.size()); ++s) {
      set_panel_acc(s, col, literal(combine_identity(k_.stages[s].combine), w), w);
      if (wide(s) && flush_rows_) array_store(wide_accs_[s], "f64", col, acc_identity(s, w), w);
    }
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
  if (dim == rank - 1) {
    panel_rows(index(0), sizes_[dim], lo, hi, at,
               [&](const std::string& iv) { panel_row(lo, hi, advance(at, iv, dim)); });
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
    for (int s = 0; s < static_cast<int>(k_.stages.size()); ++s)
      accs_.push_back(acc_result(s, panel_result(s, col, w), w));
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
  const std::string row =
      add_index(mul_index(block, index(static_cast<int64_t>(k_.stages.size()))), index(stage));
  return add_index(mul_index(row, sizes_[0]), column);
}

void FunctionEmitter::row_block(const std::string& block, const Point& zero) {
  const std::string n = sizes_[0], scratch = fmt::format("%m{}", k_.buffers.size() + 2);
  reset_panel_accs(index(0), n, zero);
  const std::string r0 = mul_index(block, chunk_);
  const std::string r1 =
      op(fmt::format("arith.minui {}, {} : index", add_index(r0, chunk_), sizes_[1]));
  panel_rows(r0, r1, index(0), n, zero,
             [&](const std::string& iv) { panel_row(index(0), n, advance(zero, iv, 1)); });
  panel_columns(index(0), n, zero, [&](const std::string& col, int w, const Point&) {
    for (int s = 0; s < static_cast<int>(k_.stages.size()); ++s) {
      memref_store(scratch, "?", scratch_type_, scratch_at(block, s, col),
                   to_scratch(s, panel_result(s, col, w), w), w);
    }
  });
}

void FunctionEmitter::combine_blocks(const Point& zero) {
  const std::string scratch = fmt::format("%m{}", k_.buffers.size() + 2);
  panel_columns(index(0), sizes_[0], zero, [&](const std::string& col, int w, const Point& pt) {
    accs_.clear();
    for (int s = 0; s < static_cast<int>(k_.stages.size()); ++s) {
      const std::string ty = acc_type(s, w);
      const std::string res = fresh(), b = fresh(), a = fresh();
      line(fmt::format("{} = scf.for {} = {} to {} step {} iter_args({} = {}) -> ({}) {{", res, b,
                       index(0), chunks_, index(1), a, acc_identity(s, w), ty));
      indent_ += 2;
      const std::string v =
          from_scratch(s, memref_load(scratch, "?", scratch_type_, scratch_at(b, s, col), w), w);
      // the blocks' sums (already in the accumulator type) added as they are
      const std::string next = wide(s) ? op(fmt::format("arith.addf {}, {} : {}", a, v, ty))
                                       : combine(k_.stages[s].combine, a, v, w);
      line(fmt::format("scf.yield {} : {}", next, ty));
      indent_ -= 2;
      line("}");
      accs_.push_back(acc_result(s, res, w));
    }
    acc_lanes_ = w;
    store_values(true, pt, w, s_.vector_dim);
  });
}

}  // namespace ein::detail
