// Internal to the CUDA emitter (emit_cuda.cpp, emit_cuda_map.cpp, emit_cuda_reduce.cpp): the
// text writer shared by the strategies. emit_cuda.cpp holds the writer (types, conversions,
// literals, index arithmetic, the scalar DAG) and the dispatch; emit_cuda_map.cpp the pointwise
// strategies; emit_cuda_reduce.cpp the row and column reductions. Nobody else includes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/emit/emit_cuda.h"

namespace ein::detail {

/// How CUDA C++ spells a buffer's storage type ("float", "__nv_bfloat16", "long long", ...).
std::string_view cuda_storage_type(DType t);

/// Writes the body of one kernel. Variables: b<i> buffer pointers, p<j> the double params and
/// q<j> them in the compute type, i<d> the index along domain dim d, a<s> stage s's result,
/// v<n> node n's value at the current point.
class CudaWriter {
 public:
  /// Per buffer, a C expression for its element at the current point in storage type (empty
  /// when the point does not read it), and per domain dim an integer index expression.
  struct Point {
    std::vector<std::string> load;
    std::vector<std::string> index;
  };
  using Memo = std::map<int, std::string>;

  /// `k` is in the general form, coalesced and verified.
  explicit CudaWriter(const Kernel& k);

  /// Appends one line at the current indentation.
  void line(std::string_view text);
  /// Opens a `{` block after `head` (e.g. "for (...)"), indenting what follows.
  void open(std::string_view head);
  /// Closes the innermost block.
  void close();

  /// A compute-type literal (exact: shortest round-trip digits; ±inf and NaN by bit pattern).
  std::string literal(double v) const;
  /// `a` combined with `b` by `c` (max and min propagate NaN, like combine_values()).
  std::string combine(Combine c, const std::string& a, const std::string& b) const;
  /// The functor type the reduce helpers of the prelude take for `c` ("EinSum", ...).
  static std::string_view combine_functor(Combine c);
  /// Storage value `expr` of buffer `b` as the compute type.
  std::string to_compute(int b, const std::string& expr) const;
  /// Compute value `expr` rounded to buffer `b`'s storage type.
  std::string to_storage(int b, const std::string& expr) const;

  /// Declares i<d> for `dims` (outermost first) from the flat index `flat` (row-major over
  /// those dims' sizes); `rest` names the scratch variable.
  void decompose(const std::string& flat, const std::vector<int>& dims, const std::string& rest);
  /// Σ index[d] · stride of buffer `b` over dims with a nonzero stride ("0" when none).
  std::string offset(int b, const std::vector<std::string>& index) const;
  /// The index expressions i<d> for every dim.
  std::vector<std::string> index_names() const;
  /// A Point whose loads read each buffer at offset(b, index) (loaded inputs only).
  Point direct_point(const std::vector<std::string>& index) const;

  /// Emits declarations for node `i` at `at` (and the nodes it needs); returns its value.
  std::string value(int i, const Point& at, Memo& memo);
  /// Emits, for every store selected by `row` (row stores if true, else full ones, every
  /// store for a pointwise kernel), its value and then the stores (all values before any
  /// store, so an output may alias an input). `target(b)` is where buffer b's value goes.
  template <class Target>
  void store_all(bool row, const Point& at, Memo& memo, Target target) {
    std::vector<std::pair<int, std::string>> values;
    for (const KernelStore& st : k.stores)
      if (is_row_store(st) == row) values.push_back({st.buffer, value(st.value, at, memo)});
    for (const auto& [b, v] : values)
      line(target(b) + " = " + to_storage(b, v) + ";");
  }
  /// Whether store `st` is a row store (the kernel reduces and its buffer is a row buffer).
  bool is_row_store(const KernelStore& st) const {
    return k.reduced > 0 && k.row_buffer(st.buffer);
  }
  /// Whether some node loads buffer `b`.
  bool loaded(int b) const { return loaded_[b]; }
  /// Product of the sizes of `dims`.
  int64_t extent(const std::vector<int>& dims) const;

  const Kernel& k;
  std::string ct;   ///< compute type: float, double, or the storage type of a copy
  std::string idx;  ///< index type: int, or long long when an offset may reach 2^30
  std::string body;

 private:
  std::string math(std::string_view name) const;  ///< expf for float, exp for double
  std::vector<bool> loaded_;
  int indent_ = 1;
};

/// Pointwise kernels (emit_cuda_map.cpp): tiled when an input is transposed, else elementwise.
void emit_pointwise(CudaWriter& w, CudaKernel& out);
/// Kernels with stages (emit_cuda_reduce.cpp): row_warp, row_block or column.
void emit_reduction(CudaWriter& w, CudaKernel& out);

/// Blocks for `items` units of work at `per_block` units per block, at most 65536 (each
/// strategy loops, so fewer blocks are still correct); 0 for no work.
int64_t grid_for(int64_t items, int64_t per_block);

}  // namespace ein::detail
