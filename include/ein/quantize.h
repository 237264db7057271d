// Weight quantization: GGUF's block formats Q8_0 and Q4_0 (llama.cpp), lossy compression of a
// trained model's weights to 8.5 and 4.5 bits a weight, and checkpoints that hold them.
//
// A tensor is cut into blocks of kQuantBlock consecutive values along its last axis (the last
// block of a row may be shorter); each block keeps one f16 scale d and a small integer code per
// value, and the value read back is code · d:
//
//   q8_0: d = max|x| / 127, codes round(x / d) in [-127, 127]             (34 bytes per 32 values)
//   q4_0: d = m / -8 with m the block's value of largest magnitude,
//         codes round(x / d) in [-8, 7], stored as code + 8 in 4 bits     (18 bytes per 32 values)
//
// as llama.cpp defines them, but for two choices that make the error bound hold in every block:
// d is rounded to f16 away from zero (so no code needs clamping at the block's largest value),
// and the codes are computed from that rounded d, so every value reads back within d/2 of itself
// (q4_0: within |d| for values of the opposite sign to m beyond 7.5·|d|). Ties round away from
// zero, as C's round(). A scale below f16's smallest subnormal rounds up to it, so only a block
// of zeros has d = 0; a block beyond f16's range, or a NaN or infinity, is an error naming the
// tensor and the element.
//
//   ein::QuantizedTensor q = ein::quantize(w, ein::QuantType::q8_0);
//   ein::Tensor w2 = ein::dequantize(q);            // f32, |w2 - w| <= d/2 blockwise
//   ein::quantize_checkpoint("model.safetensors", "model.q8_0.safetensors", {...});
//   ein::Checkpoint c =
//   ein::dequantize_checkpoint(ein::load_safetensors("model.q8_0.safetensors"));
//
//   ein::Tensor y = ein::quantized_matmul(x, q);    // x @ w from the codes (a decode step)
//
// quantized_matmul() computes with the codes; `ein sample` runs a script's cached decode step
// from them (its matrices' products; docs/quantization.md). Otherwise a quantized checkpoint
// loads dequantized (`ein train --init`, dequantize_checkpoint): there it measures what the
// compression costs in loss and saves on disk and in transfer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ein/checkpoint.h>
#include <ein/quant_type.h>
#include <ein/tensor.h>

namespace ein {

/// "q8_0" or "q4_0".
std::string_view quant_type_name(QuantType type);
/// Parses "q8_0" / "q4_0" (also upper case, as llama.cpp writes them).
std::optional<QuantType> parse_quant_type(std::string_view name);
/// Storage bits per weight for full blocks: 8.5 (q8_0) or 4.5 (q4_0).
double quant_bits_per_weight(QuantType type);

/// A quantized tensor: `codes` and `scales` hold everything; `shape` and `dtype` say what it
/// stands for.
struct QuantizedTensor {
  QuantType type = QuantType::q8_0;
  DType dtype = DType::f32;  ///< the dtype dequantize() returns (the original's)
  Shape shape;               ///< the original shape (at least 1 dimension)
  /// q8_0: i8, `shape`. q4_0: u8, `shape` with the last size halved, rounded up: byte j of a
  /// row holds the codes (+ 8) of values 2j (low 4 bits) and 2j + 1 (high 4 bits; 0 past the
  /// row's end).
  Tensor codes;
  /// f16, `shape` with the last size n replaced by ceil(n / kQuantBlock): one scale a block.
  Tensor scales;
  /// Bytes of codes and scales.
  int64_t nbytes() const { return codes.nbytes() + scales.nbytes(); }
};

/// Quantizes `x` (a floating tensor of at least one dimension, any device and strides) in
/// blocks along its last axis. RuntimeError naming `name` (or "the tensor") and the element's
/// index for a NaN or an infinity, or a block whose scale exceeds f16's range (q8_0: values
/// beyond 65504 · 127 ≈ 8.3e6 in magnitude; q4_0: 65504 · 8).
QuantizedTensor quantize(const Tensor& x, QuantType type, const std::string& name = "");

/// The values a quantized tensor stands for: code · scale, as a CPU tensor of q.dtype.
/// RuntimeError when the codes' or scales' dtype or shape does not fit q.shape and q.type.
Tensor dequantize(const QuantizedTensor& q);

/// x @ w (or x @ wᵀ, `layout`), reading w's codes where a float copy of w would be read: x is
/// [..., k] on the CPU (f32, bf16 or f16, any strides), w a quantized matrix; the result is
/// [..., n] in x's dtype: each product of x with the exact dequantized weight, summed in f32,
/// so matmul(x, dequantize(w)) up to the order of the sums. Up to 8 rows of x (decoding a token
/// at a time) decode each block of codes in registers as it is used and read 8.5 (q8_0) or 4.5
/// (q4_0) bits a weight instead of an f32 GEMV's 32; more rows dequantize panels of w and
/// multiply them by the BLAS GEMM. The result does not depend on the number of threads. No
/// gradient (inference): x must not require one while autograd records. FlopCounter counts
/// 2·rows·k·n FLOPs and the quantized bytes read.
Tensor quantized_matmul(const Tensor& x, const QuantizedTensor& w,
                        WeightLayout layout = WeightLayout::in_out);

/// How far a dequantized tensor is from the original, over all elements (computed in f64).
struct QuantError {
  double rms = 0;           ///< sqrt(mean((x' - x)^2))
  double relative_rms = 0;  ///< rms / sqrt(mean(x^2)) (0 for a zero or empty tensor)
  double max_abs = 0;       ///< max |x' - x|
};
QuantError quant_error(const Tensor& original, const Tensor& dequantized);

/// What quantize_checkpoint() quantizes: floating tensors of at least `min_dims` dimensions,
/// `min_elements` elements and a last axis of at least kQuantBlock values, as llama.cpp
/// quantizes a model's matrices and embeddings and keeps its norms and biases. Tensors whose
/// name starts with one of `drop_prefixes` are left out of the output (a training checkpoint's
/// optimizer state); the rest are kept as they are.
struct QuantizeCheckpointOptions {
  QuantType type = QuantType::q8_0;
  int64_t min_dims = 2;
  int64_t min_elements = 1024;
  std::vector<std::string> drop_prefixes = {"optim."};
};

/// Whether quantize_checkpoint() under `options` quantizes a tensor of this dtype and shape
/// (the rule above; names aside). `ein report` prices a script's weights by it.
bool quantizes(DType dtype, const Shape& shape, const QuantizeCheckpointOptions& options = {});

/// Whether quantize_checkpoint() under `options` leaves the tensor `name` out (drop_prefixes).
bool drops(const std::string& name, const QuantizeCheckpointOptions& options = {});

/// Bytes a quantized tensor of `shape` takes (codes and scales, as QuantizedTensor::nbytes()).
int64_t quantized_nbytes(const Shape& shape, QuantType type);

/// One tensor of a quantize_checkpoint() run.
struct QuantizedEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::string action;  ///< "q8_0"/"q4_0", "kept" or "dropped"
  int64_t bytes_before = 0;
  int64_t bytes_after = 0;  ///< 0 when dropped
  QuantError error;         ///< zeros unless quantized
};

/// A checkpoint's tensors quantized as `options` says, in a form save_safetensors() writes:
/// a quantized tensor NAME becomes NAME + ".qcodes" and NAME + ".qscales", and the metadata key
/// kQuantMetadataPrefix + NAME says how to read them back (`{"type":"q8_0","dtype":"F32",
/// "shape":[768,3072]}`); kept tensors keep their names. `entries` (when given) receives a row
/// per input tensor, in the file's order.
std::pair<StateDict, std::map<std::string, std::string>> quantize_checkpoint(
    const Checkpoint& checkpoint, const QuantizeCheckpointOptions& options,
    std::vector<QuantizedEntry>* entries = nullptr);

/// The metadata key prefix of a quantized tensor.
inline constexpr const char* kQuantMetadataPrefix = "quant:";

/// Whether a loaded checkpoint holds quantized tensors.
bool is_quantized(const Checkpoint& checkpoint);

/// The type its quantized tensors have (the first's in the metadata, should they differ);
/// nullopt when it holds none or their metadata does not say.
std::optional<QuantType> quantized_type(const Checkpoint& checkpoint);

/// The quantized tensors a loaded checkpoint holds, by name (their codes and scales are the
/// checkpoint's own tensors, not copies): what a Decoder reads in place of the floats
/// (DecoderOptions::codes). RuntimeError as dequantize_checkpoint() for a malformed entry.
std::map<std::string, QuantizedTensor> quantized_tensors(const Checkpoint& checkpoint);

/// The checkpoint with each quantized tensor replaced by its dequantized values under its own
/// name (and those metadata keys removed); a checkpoint without any is returned as it is.
/// RuntimeError naming the file and the tensor for a malformed entry (a missing or mistyped
/// ".qcodes"/".qscales", a shape that does not fit, unparsable metadata).
Checkpoint dequantize_checkpoint(const Checkpoint& checkpoint);

}  // namespace ein
