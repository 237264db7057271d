// Fuzz target: safetensors files through the reader (load_safetensors, check_safetensors) and
// the training-checkpoint layer that picks a file to resume from (find_latest_checkpoint: the
// `latest` file, the step metadata). The input is the file's bytes, written as
// `ckpt/step_7.safetensors` beside a `latest` naming it. RuntimeError is the expected outcome
// of a bad file; anything else escaping is a finding, as is a sanitizer report on reading a
// loaded tensor's bytes.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <ein/checkpoint.h>
#include <ein/errors.h>
#include <ein/training_checkpoint.h>

#include "fuzz_support.h"

namespace {
volatile uint8_t sink = 0;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const uint8_t kLatest[] = "step_7.safetensors\n";
  static const std::string latest = ein::fuzz::scratch_file("ckpt/latest", kLatest, sizeof kLatest - 1);
  const std::string path = ein::fuzz::scratch_file("ckpt/step_7.safetensors", data, size);
  const std::string dir = std::filesystem::path(path).parent_path();
  try {
    ein::check_safetensors(path);
  } catch (const ein::RuntimeError&) {
  }
  try {
    const ein::Checkpoint c = ein::load_safetensors(path);
    for (const auto& [name, t] : c.tensors) {  // every byte read: ASan sees a short buffer
      const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
      for (int64_t i = 0; i < t.nbytes(); ++i) sink = static_cast<uint8_t>(sink + bytes[i]);
    }
    ein::layout_signature(c.tensors);
  } catch (const ein::RuntimeError&) {
  }
  ein::find_latest_checkpoint(dir);
  return 0;
}
