// Every row of einops_identities.tsv, evaluated on ein's VALUES: the same evaluator as
// tests/compiler/reference/reference_identities_test.cpp (compiled here unchanged), but with the einops
// calls it makes (rearrange, reduce, repeat, einops.einsum, pack) answered by ein's ops on
// float64 tensors instead of the reference interpreter. The numpy sides still run on
// numpy_subset, written independently of both; so each row compares ein with ein (einops ==
// einops rows) or ein with numpy (einops == numpy rows), with the evaluator's 1e-12 bound
// (float64 sums in another order: a few ulps).
//
// The adapter: the evaluator names the interpreter as `reference::f(...)` from inside
// namespace ein::testing, so a namespace ein::testing::reference declared before it is found
// first (C++ name lookup takes the innermost scope) and routes the calls to ein. The inputs
// alternate between contiguous, column-major and strided layouts, so both sides of a row run on
// non-contiguous tensors too. The evaluator's test is renamed EinIdentities here.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include <ein/ops.h>

#include "compiler/reference/numpy_subset.h"
#include <ein/pattern_cache.h>
#include "compiler/reference/reference.h"
#include "conformance/tsv.h"
#include "api/ops/ops_test_support.h"

namespace ein::testing::reference {

using Array = ein::reference::Array;

/// The next input layout: contiguous, column-major, strided, in turn.
inline Layout next_layout() {
  static int n = 0;
  const Layout layouts[] = {Layout::contiguous, Layout::column_major, Layout::strided};
  return layouts[n++ % 3];
}

inline Tensor to_ein(const Array& a) {
  return tensor_of(a.data, a.shape, DType::f64, next_layout());
}

inline std::vector<Tensor> to_ein(const std::vector<Array>& xs) {
  std::vector<Tensor> out;
  for (const Array& a : xs)
    out.push_back(to_ein(a));
  return out;
}

inline Array rearrange(const Array& x, std::string_view pattern,
                       const std::vector<AxisSize>& sizes = {}) {
  return to_array(ein::rearrange(to_ein(x), pattern, sizes));
}

inline Array rearrange(const std::vector<Array>& xs, std::string_view pattern,
                       const std::vector<AxisSize>& sizes = {}) {
  return to_array(ein::rearrange(to_ein(xs), pattern, sizes));
}

inline Array reduce(const Array& x, std::string_view pattern, Reduction r,
                    const std::vector<AxisSize>& sizes = {}, std::optional<int64_t> ddof = {}) {
  return to_array(ein::reduce(to_ein(x), pattern, reduction_name(r), sizes, ddof));
}

inline Array reduce(const std::vector<Array>& xs, std::string_view pattern, Reduction r,
                    const std::vector<AxisSize>& sizes = {}, std::optional<int64_t> ddof = {}) {
  // ein::reduce takes one tensor: stack the list with ein (a list rearrange) first.
  const Tensor stacked = ein::rearrange(to_ein(xs), "n ... -> n ...");
  return to_array(ein::reduce(stacked, pattern, reduction_name(r), sizes, ddof));
}

inline Array repeat(const Array& x, std::string_view pattern,
                    const std::vector<AxisSize>& sizes = {}) {
  return to_array(ein::repeat(to_ein(x), pattern, sizes));
}

inline Array einsum(std::string_view pattern, const std::vector<Array>& operands) {
  return to_array(ein::einsum(pattern, to_ein(operands)));
}

inline std::pair<Array, std::vector<Shape>> pack(const std::vector<Array>& xs,
                                                 std::string_view pattern) {
  auto [packed, ps] = ein::pack(to_ein(xs), pattern);
  return {to_array(packed), ps};
}

}  // namespace ein::testing::reference

#define ReferenceIdentities EinIdentities
#include "compiler/reference/reference_identities_test.cpp"
#undef ReferenceIdentities
