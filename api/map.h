// The library's own entry points to ein::map (api/map.cpp) beyond include/ein/ops.h's: a map
// whose result dtype the caller picks, and the dtype map() would pick. The C++ operators
// (api/tensor_math.cpp) use them to fuse a chain of operators into one map with the dtype
// each operator alone would give.
#pragma once

#include <string_view>
#include <vector>

#include <ein/dtype.h>
#include <ein/tensor.h>

namespace ein {

/// map(expression, inputs) whose kernel stores its result as `out` (converted at the store:
/// floats round to nearest even, bool is "!= 0").
Tensor map_as(std::string_view expression, const std::vector<Tensor>& inputs, DType out);
/// The dtype map(expression, ...) gives inputs of these dtypes (docs/map_expressions.md).
DType map_result_dtype(std::string_view expression, std::vector<DType> dtypes);

}  // namespace ein
