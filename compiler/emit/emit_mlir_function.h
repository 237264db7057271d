// Internal to the MLIR emitter (emit_mlir.cpp, emit_mlir_loops.cpp, emit_mlir_columns.cpp):
// the class that writes one kernel function as MLIR text. emit_mlir.cpp holds the text helpers,
// the buffer prologue and the scalar DAG; emit_mlir_loops.cpp holds the loop structure
// (parallel range, stages, stores); emit_mlir_columns.cpp the panels and row blocks. Nobody
// else includes this header.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/emit_mlir.h"

namespace ein::detail {

/// Terms an f32 partial sum of an f32 kernel's sum takes before it is added to the sum's f64
/// accumulator (emit_mlir.cpp, "Accumulators"): per lane in mode A (blocks of kSumTerms quads),
/// per point along the rows in the other schedules (blocks of kRowTerms rows: in panels and row
/// blocks, adding the partials is a pass over the points' arrays, a 64th of the rows' work).
inline constexpr int kSumTerms = 16;
inline constexpr int kRowTerms = 64;

/// How MLIR spells an element type (bool and u8 are i8).
std::string_view mlir_type(DType t);

/// Whether a reducing kernel's stages and full stores can share one loop over the row: no
/// stage and no full store reads a stage's result (and something is stored over the row).
bool single_pass_possible(const Kernel& k);

/// Emits one function; SSA names are %vN, constants are hoisted to the entry block.
class FunctionEmitter {
 public:
  /// Emits for `k` (general form, coalesced, verified) with schedule `s`.
  FunctionEmitter(const Kernel& k, const CpuSchedule& s);
  /// The function's text.
  std::string run(std::string_view symbol);

 private:
  /// Where the loops are: per buffer the element offset, per domain dim the index ("" when the
  /// dim's loop is not open or sits at 0).
  struct Point {
    std::vector<std::string> offsets;
    std::vector<std::string> ivs;
  };
  using Memo = std::map<int, std::string>;

  // ---- text helpers (emit_mlir.cpp) ------------------------------------------------------
  std::string fresh() { return fmt::format("%v{}", next_++); }
  void line(const std::string& text) { body_ += std::string(indent_, ' ') + text + "\n"; }
  std::string index(int64_t v);
  std::string vec_type(int w, std::string_view scalar) const;
  std::string literal(double v, int w);
  std::string op(const std::string& text);
  std::string add_index(const std::string& a, const std::string& b);
  std::string mul_index(const std::string& a, const std::string& b);

  // ---- buffers (emit_mlir.cpp) -----------------------------------------------------------
  void emit_prologue();
  std::string convert(const std::string& v, DType from, DType to, int w);
  std::string f32_to_bf16(const std::string& v, int w);
  std::string zero_of(DType t, int w);
  std::string load(int b, const std::string& offset, int w, int vdim);
  void store(int b, const std::string& value, const std::string& offset, int w);

  // ---- scalar DAG (emit_mlir.cpp) --------------------------------------------------------
  std::string unary(std::string_view mnemonic, const std::string& x, int w);
  std::string binary(std::string_view mnemonic, const std::string& x, const std::string& y, int w);
  std::string compare(std::string_view predicate, const std::string& x, const std::string& y,
                      int w);
  std::string select(const std::string& cond, const std::string& x, const std::string& y, int w);
  std::string sigmoid(const std::string& x, int w);
  std::string broadcast(const std::string& scalar, int w);
  std::string index_value(const Point& at, int dim, int w, int vdim);
  /// The value of node `i` at `at`, `w` lanes along `vdim`; stage results from accs_.
  std::string value(int i, const Point& at, int w, int vdim, Memo& memo);

  // ---- loops (emit_mlir_loops.cpp) -------------------------------------------------------
  void plan_stash();
  void plan_single_pass();
  std::vector<std::string> single_pass_from(int dim, const Point& at, int w,
                                            const std::vector<std::string>& accs);
  std::vector<std::string> single_pass_point(const Point& at, int w,
                                             const std::vector<std::string>& accs);
  std::string stage_value(int stage, const Point& at, int w, int vdim);
  std::string combine(Combine c, const std::string& a, const std::string& b, int w);
  Point advance(const Point& at, const std::string& iv, int dim);
  std::string reduce_from(int stage, int dim, const Point& at, int w, const std::string& acc);
  std::string reduce_vectorized(int stage, int dim, const Point& at, const std::string& acc);
  void store_values(bool row, const Point& at, int w, int vdim);
  void full_stores_from(int dim, const Point& at, int w);
  void point(const Point& at, int w);
  void emit_outer_loop();
  void inner_loop(const std::string& lo, const std::string& hi, int w, const Point& base, int dim);

  // An scf.for whose iteration values are `carried` inside and whose results are `res`.
  struct Loop {
    std::string res;
    std::vector<std::string> carried;
  };
  Loop open_loop(const std::string& iv, const std::string& lo, const std::string& hi,
                 const std::string& step, const std::vector<std::string>& init,
                 const std::vector<std::string>& types);
  std::vector<std::string> close_loop(const Loop& loop, const std::vector<std::string>& next,
                                      const std::vector<std::string>& types);
  std::vector<std::string> in_blocks(
      const std::string& lo, const std::string& hi, int64_t step,
      const std::vector<std::string>& init, const std::vector<std::string>& types,
      const std::function<std::vector<std::string>(const std::string&, const std::string&,
                                                   const std::vector<std::string>&)>& block,
      const std::function<std::vector<std::string>(const std::vector<std::string>&,
                                                   const std::vector<std::string>&)>& merge);

  // An f32 kernel's sums accumulate in f64 (emit_mlir.cpp, "Accumulators"): whether a stage
  // is such a sum ("wide"), its accumulator type and identity, a value or an f32 partial sum
  // added, the result in the compute type, and the row blocks' scratch values.
  bool wide(int stage) const;
  bool any_wide() const;
  std::string acc_type(int stage, int w) const;
  std::string acc_identity(int stage, int w);
  std::string wide_add(const std::string& carry, const std::string& part, int w);
  std::string accumulate(int stage, const std::string& acc, const std::string& v, int w);
  std::string acc_result(int stage, const std::string& acc, int w);
  std::string to_scratch(int stage, const std::string& acc, int w);
  std::string from_scratch(int stage, const std::string& v, int w);

  // ---- panels and row blocks (emit_mlir_columns.cpp) --------------------------------------
  void panel(const std::string& lo, const std::string& hi, const Point& base);
  void panel_row(const std::string& lo, const std::string& hi, const Point& at);
  void reset_panel_accs(const std::string& lo, const std::string& hi, const Point& base);
  void panel_rows_from(int dim, const std::string& lo, const std::string& hi, const Point& at);
  void panel_rows(const std::string& r0, const std::string& r1, const std::string& lo,
                  const std::string& hi, const Point& at,
                  const std::function<void(const std::string&)>& row);
  void panel_columns(const std::string& lo, const std::string& hi, const Point& at,
                     const std::function<void(const std::string&, int, const Point&)>& body);
  /// w elements (a scalar when w is 1) of the 1-D `memref` (of MLIR type memref<`length`x
  /// `scalar`>, length "?" for a dynamic one) from `at`, or stored there.
  std::string memref_load(const std::string& memref, const std::string& length,
                          std::string_view scalar, const std::string& at, int w);
  void memref_store(const std::string& memref, const std::string& length, std::string_view scalar,
                    const std::string& at, const std::string& v, int w);
  /// The same on a panel's stack array (array_length_ elements).
  std::string array_load(const std::string& array, std::string_view scalar,
                         const std::string& column, int w);
  void array_store(const std::string& array, std::string_view scalar, const std::string& column,
                   const std::string& v, int w);
  std::string panel_acc(int stage, const std::string& column, int w);
  void set_panel_acc(int stage, const std::string& column, const std::string& v, int w);
  std::string panel_result(int stage, const std::string& column, int w);
  void flush_wide(const std::string& lo, const std::string& hi, const Point& at);
  std::string scratch_at(const std::string& block, int stage, const std::string& column);
  void row_block(const std::string& block, const Point& zero);
  void combine_blocks(const Point& zero);

  const Kernel& k_;
  const CpuSchedule& s_;
  std::string compute_;
  std::vector<std::string> sizes_;                 // per domain dim, an index value
  std::vector<std::vector<std::string>> strides_;  // per buffer and dim, when neither 0 nor 1
  std::vector<std::string> params_;                // per run-time parameter, a compute scalar
  std::string chunk_, chunks_;
  std::vector<std::string> accs_;  // per stage, its result once computed
  int acc_lanes_ = 1;              // lanes of accs_
  int stash_stage_ = -1;           // see plan_stash(): the stage whose value is kept ...
  int stash_buffer_ = -1;          // ... in this full output, read back by the full stores
  bool single_pass_ = false;       // see plan_single_pass(): stages and full stores in one loop
  std::vector<std::string> panel_accs_;  // per stage, its accumulators' stack array (panels,
                                         // row blocks) ...
  std::vector<std::string> wide_accs_;   // ... and a wide sum's f64 array ("" for others)
  std::string array_length_;             // the arrays' memref length: the panel or "?"
  bool flush_rows_ = false;              // wide sums go to f64 arrays every kRowTerms rows
  std::string scratch_type_;             // the row blocks' scratch area's element type
  std::string consts_, body_;
  std::map<int64_t, std::string> index_consts_;
  std::map<std::pair<uint64_t, int>, std::string> float_consts_;
  std::map<int, std::string> wide_zeros_;  // f64 zeros by lanes
  int next_ = 0;
  int indent_ = 2;
};

}  // namespace ein::detail
