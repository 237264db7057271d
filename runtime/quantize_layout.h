// What quantize.cpp and quantized_matmul.cpp share: the check that a QuantizedTensor's codes
// and scales have the shapes and dtypes its type and shape call for; and which instruction
// set quantized_matmul's kernels run on (tests run each one this CPU has).
#pragma once

#include <optional>
#include <string_view>

#include <ein/quantize.h>

namespace ein::detail {

/// Throws RuntimeError, naming `op`, when q's codes or scales do not match q.type and q.shape.
void check_quantized_layout(const QuantizedTensor& q, std::string_view op);

/// The instruction sets quantized_matmul's kernels are written for.
enum class QuantKernels { portable, avx2, avx512 };

/// The set quantized_matmul runs on: the best this CPU has, or the one forced below.
QuantKernels quant_kernels();

/// For tests: run on `kernels` (nullopt: the best again). Returns false, changing nothing,
/// when this CPU lacks that set.
bool force_quant_kernels(std::optional<QuantKernels> kernels);

/// "portable", "avx2" or "avx512".
std::string_view quant_kernels_name(QuantKernels kernels);

}  // namespace ein::detail
