// Named tensors in the safetensors format (https://github.com/huggingface/safetensors), the
// file Python's safetensors, numpy and PyTorch read: an 8-byte little-endian header size N,
// N bytes of JSON ({"__metadata__": {str: str}, name: {dtype, shape, data_offsets}}), then the
// tensors' bytes, contiguous, row-major, little-endian. Files are written atomically
// (runtime/atomic_file.h); loading checks every header fact against the file before reading a
// byte of tensor data. Each tensor's bytes carry an XXH3-64 checksum in the metadata
// ("xxh3_64:<name>": 16 hex digits, strings as the format requires, so other readers still read
// the file), verified by load_safetensors(); files without checksums (older ones, or written
// by other tools) still load. The training-run layer (step files, `latest`) is in
// include/ein/training_checkpoint.h. docs/checkpoints.md has the details.
//
//   ein::save_safetensors("w.safetensors", {{"wte", wte}, {"ln.bias", b}}, {{"seed", "0"}});
//   ein::Checkpoint c = ein::load_safetensors("w.safetensors");
//   ein::Tensor wte2 = c.at("wte");  // a contiguous CPU tensor, same dtype and shape
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ein/tensor.h>

namespace ein {

/// Named tensors (ordered by their place in the file's data) and string metadata.
struct Checkpoint {
  /// The file it was loaded from (for messages).
  std::string path;
  /// Each tensor is a contiguous CPU tensor that owns its storage.
  std::vector<std::pair<std::string, Tensor>> tensors;
  /// The header's "__metadata__" object (empty when the file has none), less the checksums.
  std::map<std::string, std::string> metadata;
  /// Whether every tensor had a checksum (all verified when loaded); false for older files.
  bool checksummed = false;

  /// The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
  /// The tensor called `name`; a RuntimeError listing the names there are when missing.
  const Tensor& at(const std::string& name) const;
};

/// The safetensors dtype name ("F32", "BF16", "F8_E4M3", "BOOL", ...) of `dtype`.
std::string_view safetensors_dtype_name(DType dtype);
/// The ein dtype of a safetensors dtype name, or nullopt for one ein does not have
/// (I16, U16, U32, U64, ...) or an unknown one.
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

/// The metadata key prefix of a tensor's checksum: key kChecksumKeyPrefix + name, value the
/// XXH3-64 (seed 0) of the tensor's bytes as 16 lowercase hex digits.
inline constexpr const char* kChecksumKeyPrefix = "xxh3_64:";

/// Named tensors in order, like torch's state_dict(): what Module::state_dict() and an
/// optimizer's state_dict() return and save_safetensors() writes.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

/// XXH3-64 of the names, dtypes and shapes (not the values) of `tensors`, sorted by name, as
/// 16 hex digits: two tensor lists with the same signature have the same layout.
std::string layout_signature(const std::vector<std::pair<std::string, Tensor>>& tensors);

/// A tensor's name, dtype and shape without its values (a sharded checkpoint's other shards).
struct TensorLayout {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};
/// The same signature from layouts alone.
std::string layout_signature(const std::vector<TensorLayout>& layouts);

/// Writes `tensors` (any device, dtype and strides; written contiguous) and `metadata` to
/// `path` atomically, with each tensor's checksum added to the metadata. Names must be unique,
/// non-empty and not "__metadata__"; metadata keys must not start with kChecksumKeyPrefix. The
/// header is compact JSON padded with spaces to a multiple of 8 bytes, tensors in the given
/// order. RuntimeError naming the file on an I/O failure or a bad name; `path` is then
/// untouched.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file. RuntimeError naming the file and the problem when it is missing,
/// not a regular file (a FIFO or device is refused before it is opened for reading), shorter than 8 bytes, its header size exceeds the file (or safetensors' 100 MB header
/// limit), the header is not a JSON object of the format's shape, a dtype is unknown, a
/// tensor's byte range disagrees with its shape, ranges overlap, leave gaps or leave the file,
/// bytes follow the last tensor, a BOOL byte is neither 0 nor 1, or a tensor's bytes do not
/// match their checksum.
Checkpoint load_safetensors(const std::string& path);
/// The same with only the tensors whose names `wanted` accepts read (the header is checked
/// whole): sampling from a training checkpoint reads the model's tensors, not the optimizer's
/// state, which is twice their size under AdamW.
Checkpoint load_safetensors(const std::string& path,
                            const std::function<bool(const std::string&)>& wanted);

/// Copies each target's tensor from the checkpoint (by name) into the target's elements: a
/// model's parameters or an optimizer's state on resume. Targets may be on any device, have
/// any strides and require grad. Checkpoint tensors no target names are ignored. RuntimeError
/// naming the file and listing every target the checkpoint lacks and every dtype or shape that
/// differs, before any target is written.
void copy_into(const Checkpoint& checkpoint,
               const std::vector<std::pair<std::string, Tensor>>& targets);
/// copy_into()'s check alone: the same RuntimeError when a target's tensor is missing from the
/// checkpoint or differs in dtype or shape, nothing written. A loader that makes the sources
/// one at a time (a quantized file's, dequantized as they are copied) checks stand-ins of
/// their dtypes and shapes first.
void check_fits(const Checkpoint& checkpoint,
                const std::vector<std::pair<std::string, Tensor>>& targets);

/// The header facts of a file without its tensor data: the checks of load_safetensors() except
/// the BOOL bytes and the checksums. Returns the metadata (less the checksums). Cheap, so it can vet candidates (a truncated
/// file fails it because its ranges leave the file).
std::map<std::string, std::string> check_safetensors(const std::string& path);

/// The tensors of a file as its header lists them (names, dtypes, shapes), in the file's order,
/// after the checks of check_safetensors(): what a file holds without reading it.
std::vector<TensorLayout> safetensors_layout(const std::string& path);

}  // namespace ein
