// The names of a quantized weight's format and layout (include/ein/quantize.h has the
// functions): small enough for the Graph IR's headers to name them.
#pragma once

#include <cstdint>

namespace ein {

/// A block quantization format.
enum class QuantType : uint8_t { q8_0, q4_0 };

/// Values per block (both formats).
inline constexpr int64_t kQuantBlock = 32;

/// How quantized_matmul() reads its weight: which of w's axes is summed over. The blocks of
/// 32 run along w's last axis either way.
enum class WeightLayout : uint8_t {
  in_out,  ///< w is [k, n]: x @ w (ein's Linear, stored (in, out); blocks along the outputs)
  out_in,  ///< w is [n, k]: x @ wᵀ (torch's Linear, GGUF's matrices, an embedding used as the
           ///< LM head; blocks along the summed axis)
};

}  // namespace ein
