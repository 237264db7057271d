// Data parallelism and ZeRO stages 1, 2 and 3 over a Communicator (communicator.h): averaging
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
// under ZeRO 1 and 2 (which leave each rank its own part). ZeRO 2 (and 3) drops the others'
// gradients as soon as their bucket goes to the overlapped exchange, during the backward;
// ZeRO 1 keeps them until the exchange is waited for. With a communicator on device
// memory (NCCL) the buckets are device tensors and the average a kernel adding in the same
// order, so a CUDA run never stages gradients through the host.
//
// Overlap: after arm(), each parameter's gradient reports when the backward has finished it
// (AutogradMeta::post_accumulate_hook; a whole backward graph hands its outputs over one by
// one, exec/execute.h), and a bucket whose gradients are all final goes to a lane (lane.h) at
// once, in bucket order, so the exchange runs while the backward computes the rest, as DDP's
// buckets do. reduce_gradients() hands over what is left and waits. The bytes and the
// additions are the same as without overlap, so the results are bitwise the same.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ein/tensor.h>

#include "runtime/dist/communicator.h"
#include "runtime/dist/lane.h"

namespace ein::dist {

/// (parts[0] + parts[1] + ... + parts[n−1]) / n elementwise, added in that order: how a
/// communicator on device memory averages (a map kernel, which the api layer provides; the
/// runtime has no kernels of its own). The parts are 1-d, of one shape and dtype.
using Average = std::function<Tensor(const std::vector<Tensor>& parts)>;

struct SyncOptions {
  int zero = 0;                      ///< 0 (plain data parallel), 1, 2 or 3
  int64_t bucket_bytes = 25 << 20;   ///< gradient bytes per exchange
  Average average;                   ///< needed when the communicator is on device memory
  /// ZeRO 3: forward-and-backward passes per optimizer step (gradient accumulation's
  /// micro-steps), each of which fetches every parameter twice (bytes_per_step()).
  int64_t micro_steps = 1;
  /// Exchange buckets while the backward runs (arm()), where the communicator can duplicate
  /// its group (Communicator::duplicate(): MPI with MPI_THREAD_MULTIPLE; host memory).
  bool overlap = true;
};

/// The owner of each parameter: consecutive runs, balanced by element count. Every rank gets
/// a run (possibly empty when there are fewer parameters than ranks).
std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int ranks);

/// The gradient buckets of parameters of `bytes` bytes each: the parameters in reverse order
/// (as the backward finishes them) cut into runs of at most `bucket_bytes` (a larger
/// parameter goes alone). Per parameter, its bucket, 0 being the first the backward finishes.
/// GradientSync's buckets and `ein report`'s ZeRO 2 memory both come from it.
std::vector<int> gradient_buckets(const std::vector<int64_t>& bytes, int64_t bucket_bytes);

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
  /// After arm(), the exchanges the backward already started are waited for.
  void reduce_gradients();
  /// The next backward is the step's last (its gradients are final when it has added to
  /// them): exchange each bucket as soon as the backward finishes it. No-op where nothing
  /// overlaps (overlaps()).
  void arm();
  /// Whether exchanges overlap the backward (a lane exists).
  bool overlaps() const { return lane_ != nullptr; }
  /// The gradient buckets, and how many of them the last reduce_gradients() found already
  /// handed to the exchange by the backward (0 without overlap).
  size_t buckets() const { return grad_buckets_.size(); }
  size_t buckets_in_backward() const { return in_backward_; }
  /// Bytes the overlapped exchanges sent so far (besides the communicator's own stats).
  int64_t lane_sent_bytes() const { return lane_ ? lane_->sent_bytes() : 0; }
  /// ZeRO: every rank receives the parameters their owners just updated (no-op without ZeRO).
  void gather_parameters();
  /// Bytes this rank sends per reduce_gradients() + gather_parameters() (what ein report
  /// predicts; CommStats::sent_bytes counts what was sent). ZeRO 3 adds the parameter
  /// fetches, counted as two per parameter and micro-step: an upper bound, since the forward
  /// fetches every parameter once but the backward only those its gradient rules read.
  int64_t bytes_per_step() const;

  // ---- ZeRO 3: parameters sharded too ----
  // A rank keeps the memory of the parameters it owns only. Graph execution reads the others
  // through fetch_sharded(): while a FetchScope is active (the forward and backward, which
  // every rank runs alike, so the fetches line up as collectives), each parameter a graph
  // reads is broadcast by its owner into a temporary that the graph frees after its last
  // reader: forward and backward each hold only the parameters of the nodes running now.
  // Owners update their parameters in place; nothing is gathered after the step.

  /// Gives back the memory of the parameters other ranks own (Storage::release()).
  void shard();
  /// Every rank holds every parameter again (collective): before a checkpoint is written,
  /// and when training ends (sampling, the caller's use of the model).
  void unshard();
  /// Whether the parameters are sharded now.
  bool sharded() const { return sharded_; }
  /// The value of parameter-viewing tensor `x` (collective; see fetch_sharded()).
  Tensor fetch(size_t param, const Tensor& x);
  /// fetch() started on the lane (prefetch; GraphFetches): `full` receives parameter
  /// `param` (the owner sends from its own memory and gets `full` undefined); wait for the
  /// returned ticket before reading it. Without a lane, the fetch is done when this returns.
  uint64_t start_fetch(size_t param, Tensor& full);
  void wait(uint64_t ticket);
  /// ZeRO 3: fetches started ahead of their read so far (GraphFetches' prefetch).
  int64_t prefetched() const { return prefetched_; }

  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

 private:
  struct Bucket {
    std::vector<size_t> params;       ///< in exchange order
    std::vector<int64_t> offset;      ///< byte offset of each param in the bucket
    std::vector<int64_t> rank_bytes;  ///< bytes of the params each rank owns
    std::vector<int64_t> rank_offset; ///< where each rank's run starts in the bucket
    int64_t bytes = 0;
  };
  /// One bucket's exchange: the gradients (captured when the bucket was handed over), the
  /// bytes sent and received, and which gradients already hold their averages.
  struct Exchange {
    std::vector<Tensor> grads;   ///< per bucket parameter, its gradient (may be undefined)
    std::vector<char> send;      ///< the bucket; after the exchange, the averages
    std::vector<char> written;   ///< per bucket parameter: its gradient holds the average
    bool packed = false;         ///< `send` holds the gradients already (ZeRO 2 and 3)
  };
  std::vector<Bucket> make_buckets(bool reverse) const;
  /// The host exchange of bucket `b` on `comm` (this group, or the lane's): packs the
  /// gradients, averages this rank's run in rank order, gathers (plain data parallel) and
  /// writes the averages into the contiguous host gradients this rank keeps.
  void exchange(const Bucket& b, Exchange& x, Communicator& comm) const;
  /// On the calling thread after exchange(): the gradients it could not write, and ZeRO's drops.
  void finish(const Bucket& b, Exchange& x);
  /// Bucket `b`'s gradients for its exchange. `during_backward` under ZeRO 2 and 3: packed
  /// here, and the gradients of parameters other ranks own dropped at once, so their memory
  /// goes while the backward goes on (the point of stage 2).
  std::unique_ptr<Exchange> capture(const Bucket& b, bool during_backward);
  void pack(const Bucket& b, Exchange& x) const;
  /// A parameter's gradient is final (its post_accumulate_hook): hand over the buckets, in
  /// order, whose gradients are all final.
  void gradient_final(size_t param);
  /// After a bucket's exchange: drops the gradients of parameters other ranks own (ZeRO) and
  /// has `write(grad, k)` fill the kept gradient of the bucket's k-th parameter.
  void set_gradients(const Bucket& b, const std::function<void(const Tensor&, size_t)>& write);
  /// reduce_gradients() and gather_parameters() with buffers on the parameters' device
  /// (NCCL): the same bytes to the same ranks, averaged by options_.average.
  void reduce_gradients_on_device();
  void gather_parameters_on_device();

  Communicator& comm_;
  std::vector<Tensor> params_;
  SyncOptions options_;
  std::vector<int> owner_;
  std::vector<Bucket> grad_buckets_, param_buckets_;
  bool sharded_ = false;
  // Overlap (arm()).
  std::unique_ptr<Lane> lane_;
  bool armed_ = false;
  std::vector<char> final_;  ///< per parameter: the armed backward finished its gradient
  std::vector<std::unique_ptr<Exchange>> exchanges_;  ///< handed to the lane, in bucket order
  size_t in_backward_ = 0;
  int64_t prefetched_ = 0;
  friend class GraphFetches;
};

/// Graph execution's read of a graph input (exec/execute.cpp): a parameter of a sharded
/// ZeRO 3 run, while a FetchScope is active on this thread, comes back as its full value
/// (GradientSync::fetch, a broadcast from its owner); any other tensor as it is.
Tensor fetch_sharded(Tensor x);

/// ZeRO 3's reads in one graph run (exec/execute.cpp): the graph's input nodes, in the order
/// they run, with the tensors they read. Each read of a sharded parameter is fetched from its
/// owner, and the next sharded read's fetch is started on the lane (GradientSync::start_fetch)
/// as soon as this one's is taken, so it travels while the nodes reading this one compute
/// (prefetch, one parameter ahead: memory grows by at most one parameter). Outside a
/// FetchScope, or for other tensors, take() returns the tensor as it is.
class GraphFetches {
 public:
  explicit GraphFetches(const std::vector<Tensor>& reads);
  /// Waits for fetches still travelling (a graph that stopped early) before their buffers go.
  ~GraphFetches();
  GraphFetches(const GraphFetches&) = delete;
  GraphFetches& operator=(const GraphFetches&) = delete;
  /// Whether any read is of a sharded parameter.
  bool any() const { return any_; }
  /// The value for read `k`, whose tensor is `x` (moved in: the caller's last reference).
  Tensor take(size_t k, Tensor x);

 private:
  struct Read {
    GradientSync* sync = nullptr;  ///< null: not a sharded parameter
    size_t param = 0;
    Tensor full;                   ///< the fetched parameter (non-owners)
    uint64_t ticket = 0;
    bool started = false;
  };
  void start(size_t k);
  std::vector<Read> reads_;
  bool any_ = false;
};

/// Whether a FetchScope is active on this thread.
bool fetching();

/// Makes fetch_sharded() fetch on this thread for its lifetime (a training step's forward and
/// backward, which every rank runs alike).
class FetchScope {
 public:
  FetchScope();
  ~FetchScope();
  FetchScope(const FetchScope&) = delete;
  FetchScope& operator=(const FetchScope&) = delete;

 private:
  bool previous_;
};

}  // namespace ein::dist
