// The Trainer's side of a distributed run (api/trainer.cpp; runtime/dist does the transport and
// the gradient averaging): the start-up check that every rank runs the same thing, and the
// layouts of a ZeRO checkpoint's shards (each rank writes the optimizer state it owns; rank 0's
// step file records the layout of them all). Internal to api/.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ein/checkpoint.h>
#include <ein/tensor.h>
#include <ein/trainer.h>

#include "runtime/dist/communicator.h"
#include "runtime/dist/gradient_sync.h"

namespace ein::detail {

/// UserError on every rank when some rank's parameters (names, dtypes, shapes) or training
/// settings differ from rank 0's, naming the ranks and what differs.
void check_same_run(dist::Communicator& comm, const TrainOptions& options,
                    const std::vector<NamedTensor>& params);

/// The names, dtypes and shapes of every rank's `tensors`, in rank order, on every rank.
/// Collective.
std::vector<TensorLayout> gather_layouts(dist::Communicator& comm,
                                         const std::vector<std::pair<std::string, Tensor>>& tensors);

/// GradientSync's average over device buffers: (parts[0] + ... + parts[n−1]) / n as one map
/// kernel, added in rank order as the host path adds, so both give the same bits.
dist::Average rank_order_average();

/// The communicator that averages the gradients of parameters on `device`: NCCL over `world`'s
/// ranks for a CUDA device, where NCCL loads (`note` then says so); `world` itself otherwise
/// (CUDA gradients are then staged through the host, and `note` says why).
dist::Communicator& gradient_communicator(dist::Communicator& world, Device device,
                                          std::unique_ptr<dist::Communicator>& owned,
                                          std::string& note);

}  // namespace ein::detail
