// Named tensors in the safetensors format (https://github.com/huggingface/safetensors), the
// file Python's safetensors, numpy and PyTorch read: an 8-byte little-endian header size N,
// N bytes of JSON ({"__metadata__": {str: str}, name: {dtype, shape, data_offsets}}), then the
// tensors' bytes, contiguous, row-major, little-endian. Files are written atomically
// (runtime/atomic_file.h); loading checks every header fact against the file before reading a
// byte of tensor data. The training-run layer (step files, `latest`) is in
// include/ein/training_checkpoint.h. docs/checkpoints.md has the details.
//
//   ein::save_safetensors("w.safetensors", {{"wte", wte}, {"ln.bias", b}}, {{"seed", "0"}});
//   ein::Checkpoint c = ein::load_safetensors("w.safetensors");
//   ein::Tensor wte2 = c.at("wte");  // a contiguous CPU tensor, same dtype and shape
#pragma once

#include <cstdint>
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
  /// The header's "__metadata__" object (empty when the file has none).
  std::map<std::string, std::string> metadata;

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

/// Writes `tensors` (any device, dtype and strides; written contiguous) and `metadata` to
/// `path` atomically. Names must be unique, non-empty and not "__metadata__". The header is
/// compact JSON padded with spaces to a multiple of 8 bytes, tensors in the given order.
/// RuntimeError naming the file on an I/O failure or a bad name; `path` is then untouched.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file. RuntimeError naming the file and the problem when it is missing,
/// shorter than 8 bytes, its header size exceeds the file (or safetensors' 100 MB header
/// limit), the header is not a JSON object of the format's shape, a dtype is unknown, a
/// tensor's byte range disagrees with its shape, ranges overlap, leave gaps or leave the file,
/// bytes follow the last tensor, or a BOOL byte is neither 0 nor 1.
Checkpoint load_safetensors(const std::string& path);

/// Copies each target's tensor from the checkpoint (by name) into the target's elements: a
/// model's parameters or an optimizer's state on resume. Targets may be on any device, have
/// any strides and require grad. Checkpoint tensors no target names are ignored. RuntimeError
/// naming the file and listing every target the checkpoint lacks and every dtype or shape that
/// differs, before any target is written.
void copy_into(const Checkpoint& checkpoint,
               const std::vector<std::pair<std::string, Tensor>>& targets);

/// The header facts of a file without its tensor data: the checks of load_safetensors() except
/// the BOOL bytes. Returns the metadata. Cheap, so it can vet candidates (a truncated
/// file fails it because its ranges leave the file).
std::map<std::string, std::string> check_safetensors(const std::string& path);

}  // namespace ein
