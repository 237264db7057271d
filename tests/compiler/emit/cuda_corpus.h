// The corpus of kernels the CUDA tests compile: every fused kernel of the graphs the op and
// fusion suites use (the standard functions forward and backward, map expressions with
// broadcasts, reductions over leading, trailing and middle axes, permuting rearranges), in
// f32, bf16 and f16 (one f64), plus broadcast, strided and zero-size shapes and hand-built
// fp8 conversions. Shapes are chosen to reach every CUDA strategy and both sides of its
// thresholds (rows in registers or not, vectors or not).
#pragma once

#include <string>
#include <vector>

#include "compiler/graph/graph.h"
#include <ein/patterns.h>
#include "api/ops/ops_test_support.h"
#include <ein/tensor.h>

namespace ein::testing {

/// One kernel of the corpus.
struct CorpusKernel {
  std::string label;  ///< what it is: "softmax bf16 (8, 1000) #1", unique, for messages
  Kernel kernel;
};

/// The kernel of every fused node of fuse(g), inputs bound contiguous (or, with `transposed`,
/// with their last two dims swapped in memory).
std::vector<Kernel> fused_kernels(const Graph& g, bool transposed = false);

/// rearrange(x, pattern) then exp: a permute folded into a pointwise kernel's reads.
Graph rearrange_exp(const std::string& pattern, const Shape& shape, DType dtype,
                    const std::vector<AxisSize>& sizes = {});

/// Every corpus kernel, in a fixed order.
const std::vector<CorpusKernel>& cuda_corpus();

/// The gtest name of corpus kernel `index` in a parameterised suite: "k007_mse_loss_f32__1".
std::string corpus_test_name(int index);

/// Elements a buffer spans: 1 + Σ (size − 1) · stride over the dims it moves along, or 0 when
/// one of those is empty (a sum's output over an empty row still has its rows).
int64_t buffer_extent(const Kernel& k, const KernelBuffer& b);

/// Tolerance for an output of `dtype` after `terms` terms of f32 arithmetic (fp8: half an ulp
/// of 3 (e4m3) or 2 (e5m2) mantissa bits, the rounding of the stored result).
Tolerance corpus_tolerance(DType dtype, int64_t terms);

/// A total store's result from its per-row scratch values, combined on the host as the
/// runtime does (cross-entropy's mean over rows): one value.
std::vector<double> combine_total(const Kernel& general, int buffer, const std::vector<double>& per_row);

/// Random kernel inputs: normal values rounded to the dtype; small class indices for integers.
Tensor corpus_input(DType dtype, int64_t n, uint64_t seed);

/// The float64 oracle of corpus kernel `index`, shared by the emulated and the GPU runs: the
/// kernel's general form, its random inputs, and what each output must hold after a launch
/// (Kernel IR's evaluate() with totals kept as totals; 16-bit stores rounded as stored).
struct CorpusOracle {
  static constexpr double kUnwritten = 7;  ///< what an output slot holds before the launch
  Kernel general;
  std::vector<bool> total;    ///< per buffer: a total store (its slot is per-row scratch)
  int64_t rows = 1, row = 1;  ///< points of the parallel and of the reduced dims
  std::vector<Tensor> inputs;  ///< per input buffer (undefined for outputs)
  std::vector<std::vector<double>> want;  ///< per output buffer

  /// What buffer `b`'s slot holds before the launch: the input, or kUnwritten in the slot's
  /// dtype and size (a total's slot: one compute-type value per row, emit_cuda.h's ABI).
  Tensor initial_slot(size_t b) const;
  /// Checks output `b` from its slot's values after the launch.
  void expect_output(size_t b, std::vector<double> slot, const std::string& context) const;
};
CorpusOracle corpus_oracle(int index);

}  // namespace ein::testing
