// What quantize.cpp and quantized_matmul.cpp share: the check that a QuantizedTensor's codes
// and scales have the shapes and dtypes its type and shape call for.
#pragma once

#include <string_view>

#include <ein/quantize.h>

namespace ein::detail {

/// Throws RuntimeError, naming `op`, when q's codes or scales do not match q.type and q.shape.
void check_quantized_layout(const QuantizedTensor& q, std::string_view op);

}  // namespace ein::detail
