// Data parallelism and ZeRO stages 1 and 2 over a Communicator (communicator.h): averaging
// gradients across ranks, the global gradient norm, and gathering the parameters each rank
// updated. Torch's DistributedDataParallel and ZeroRedundancyOptimizer are the models.
//
// Ownership: the parameters are split into `size` runs of consecutive parameters with about
// equal numbers of elements; rank r owns run r. Under ZeRO (stage >= 1) a rank keeps optimizer
// state only for what it owns and updates only that; the others receive the new values.
// Whole parameters (rather than flat slices) keep any optimizer's per-parameter semantics —
// weight decay on matrices only, per-tensor norms — and make a checkpoint's state reshard by
// name.
//
// The global gradient norm (clipping, fp16's overflow check) is each rank's norm over what it
// owns, squared and added in rank order (api/trainer.cpp): the same bits on every rank and at
// every ZeRO stage.
//
// Reduction: gradients travel in buckets (reverse parameter order, as the backward finishes
// them; 25 MiB by default, as DDP's bucket_cap_mb) through one personalised exchange each, and
// the owner of each element adds the ranks' contributions in rank order 0, 1, ..., then
// divides by the world size. The order is fixed, so the average is bitwise the same run to run
// and the same under plain data parallelism (which then gathers it back to every rank) and
// under ZeRO 1 and 2 (which leave each rank its own part). With a communicator on device
// memory (NCCL) the buckets are device tensors and the average a kernel adding in the same
// order, so a CUDA run never stages gradients through the host.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ein/tensor.h>

#include "runtime/dist/communicator.h"

namespace ein::dist {

/// (parts[0] + parts[1] + ... + parts[n−1]) / n elementwise, added in that order: how a
/// communicator on device memory averages (a map kernel, which the api layer provides; the
/// runtime has no kernels of its own). The parts are 1-d, of one shape and dtype.
using Average = std::function<Tensor(const std::vector<Tensor>& parts)>;

struct SyncOptions {
  int zero = 0;                      ///< 0 (plain data parallel), 1 or 2
  int64_t bucket_bytes = 25 << 20;   ///< gradient bytes per exchange
  Average average;                   ///< needed when the communicator is on device memory
};

/// The owner of each parameter: consecutive runs, balanced by element count. Every rank gets
/// a run (possibly empty when there are fewer parameters than ranks).
std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int ranks);

/// Bytes rank `rank` of `ranks` sends in one training step for parameters of `numels`
/// elements and `bytes` bytes each, at any stage: the exchange sends the P − own bytes of the
/// others' parameters, and the gather (of averages, or under ZeRO of updated parameters) sends
/// its own to N − 1 ranks: P + own·(N − 2). `ein report --gpus N` prints it; GradientSync sends it.
int64_t step_bytes(const std::vector<int64_t>& numels, const std::vector<int64_t>& bytes,
                   int ranks, int rank);

class GradientSync {
 public:
  GradientSync(Communicator& comm, std::vector<Tensor> params, SyncOptions options);

  int zero() const { return options_.zero; }
  bool owns(size_t param) const { return owner_.at(param) == comm_.rank(); }
  const std::vector<int>& owners() const { return owner_; }

  /// Averages every parameter's gradient over the ranks (an undefined gradient counts as
  /// zeros). Plain data parallel: every rank ends with every average. ZeRO 1 and 2: each rank
  /// ends with the averages of the parameters it owns, and the others' gradients are dropped.
  void reduce_gradients();
  /// ZeRO: every rank receives the parameters their owners just updated (no-op without ZeRO).
  void gather_parameters();
  /// Bytes this rank sends per reduce_gradients() + gather_parameters() (what ein report
  /// predicts; CommStats::sent_bytes counts what was sent).
  int64_t bytes_per_step() const;

 private:
  struct Bucket {
    std::vector<size_t> params;       ///< in exchange order
    std::vector<int64_t> offset;      ///< byte offset of each param in the bucket
    std::vector<int64_t> rank_bytes;  ///< bytes of the params each rank owns
    std::vector<int64_t> rank_offset; ///< where each rank's run starts in the bucket
    int64_t bytes = 0;
  };
  std::vector<Bucket> make_buckets(bool reverse) const;
  /// reduce_gradients() and gather_parameters() with buffers on the parameters' device
  /// (NCCL): the same bytes to the same ranks, averaged by options_.average.
  void reduce_gradients_on_device();
  void gather_parameters_on_device();

  Communicator& comm_;
  std::vector<Tensor> params_;
  SyncOptions options_;
  std::vector<int> owner_;
  std::vector<Bucket> grad_buckets_, param_buckets_;
};

}  // namespace ein::dist
