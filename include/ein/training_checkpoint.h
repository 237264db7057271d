// Checkpoints of a training run in one directory: `step_<N>.safetensors` files (model and
// optimizer tensors, the step and whatever else resuming needs as metadata) and a `latest`
// file naming the newest durable one. A run killed at any moment, even while writing, leaves
// a checkpoint to resume from. Old checkpoints go only when prune_checkpoints() is called.
//
//   ein::save_training_checkpoint("ckpt", 100, {{"model.wte", wte}, {"optim.m.wte", m}},
//                                 {{"seed", "1"}, {"data_position", "51200"}});
//   if (auto latest = ein::find_latest_checkpoint("ckpt")) {
//     ein::Checkpoint c = ein::load_safetensors(latest->path);  // latest->step == 100
//   }
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ein/checkpoint.h>

namespace ein {

/// The metadata key holding a training checkpoint's step (decimal).
inline constexpr const char* kStepMetadataKey = "step";
/// The metadata key holding the held-out loss of a checkpoint's weights, when the run scored
/// them (TrainOptions::eval_data), as a decimal that reads back to the same double.
inline constexpr const char* kEvalLossMetadataKey = "eval_loss";

/// Writes `dir/step_<step>.safetensors` atomically with `tensors` and `metadata` plus
/// kStepMetadataKey, creating `dir` if needed; then, once that file is durable, points
/// `dir/latest` at it (also atomically). Returns the checkpoint's path. By convention tensor
/// names start with "model." or "optim.". RuntimeError when step < 0, when `metadata` already
/// has the step key, or on an I/O failure (the previous checkpoints stay intact).
std::string save_training_checkpoint(const std::string& dir, int64_t step,
                                     const std::vector<std::pair<std::string, Tensor>>& tensors,
                                     std::map<std::string, std::string> metadata = {});

/// Sharded checkpoints (a ZeRO run: each rank holds part of the optimizer state): shard r >= 1
/// is `dir/step_<N>.shard_<r>.safetensors`, written by its rank; shard 0 is the step file,
/// written last (after every other shard is durable) with kShardsMetadataKey = the shard
/// count, so its presence commits the set. Resuming loads every shard; prune_checkpoints()
/// removes a step's shards with it.
inline constexpr const char* kShardsMetadataKey = "shards";
std::string shard_file_path(const std::string& dir, int64_t step, int shard);

/// The checkpoint find_latest_checkpoint() chose.
struct LatestCheckpoint {
  std::string path;                  ///< dir/step_<N>.safetensors
  int64_t step = 0;                  ///< N
  std::vector<std::string> skipped;  ///< candidates passed over, each "path: reason"
};

/// The checkpoint to resume from: the one `dir/latest` names when it passes
/// check_safetensors() and its step metadata matches its name; otherwise (latest missing,
/// unreadable, or naming a missing or corrupt file) the highest-step valid
/// `step_<N>.safetensors`. Temporary files (`*.tmp.<pid>`) are never candidates. nullopt when
/// `dir` holds no valid checkpoint.
std::optional<LatestCheckpoint> find_latest_checkpoint(const std::string& dir);

/// What load_latest_checkpoint() found.
struct LoadedCheckpoint {
  LatestCheckpoint latest;  ///< path and step (when loaded), and every candidate passed over
  /// Loaded with load_safetensors() (checksums verified); nullopt when no candidate loads.
  std::optional<Checkpoint> checkpoint;
};

/// Like find_latest_checkpoint(), but loads each candidate in turn (newest first) and falls
/// back past one whose data fails to load (a checksum mismatch, a file shrunk meanwhile),
/// adding it to `latest.skipped`, which lists every candidate passed over even when none loads.
LoadedCheckpoint load_latest_checkpoint(const std::string& dir);

/// Checks, before a run does any work, that checkpoints can be written to `dir`: creates it
/// when missing and creates and removes a temporary file in it. RuntimeError naming `dir` and
/// the system's reason (read-only, not a directory, no space, ...).
void check_checkpoint_directory(const std::string& dir);

/// Deletes old step files of `dir`, keeping the one find_latest_checkpoint() picks, every step
/// file with a higher step, the `keep` - 1 highest-step files below it, and the one with the
/// lowest finite kEvalLossMetadataKey (the best weights on held-out data, as nanoGPT keeps
/// them; the earliest of equals; a file whose header does not read counts as having none);
/// nothing when no checkpoint is valid. Call it after save_training_checkpoint(). Returns the
/// removed paths. RuntimeError when keep < 1 or a file cannot be removed.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep);

}  // namespace ein
