// The Trainer's side of a distributed run (api/trainer.cpp; runtime/dist does the transport and
// the gradient averaging): the start-up check that every rank runs the same thing, and the
// ZeRO checkpoint, whose sharded optimizer state is gathered to rank 0 and written as one
// ordinary checkpoint, so it resumes at any world size and ZeRO stage. Internal to api/.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ein/tensor.h>
#include <ein/trainer.h>

#include "runtime/dist/communicator.h"

namespace ein::detail {

/// UserError on every rank when some rank's parameters (names, dtypes, shapes) or training
/// settings differ from rank 0's, naming the ranks and what differs.
void check_same_run(dist::Communicator& comm, const TrainOptions& options,
                    const std::vector<NamedTensor>& params);

/// Every rank's `state` (ZeRO: the optimizer state of the parameters it owns), in rank order,
/// on rank 0 (as host tensors, "optim." + name); empty on the other ranks. Collective.
std::vector<std::pair<std::string, Tensor>> gather_state(dist::Communicator& comm,
                                                         const std::vector<NamedTensor>& state);

}  // namespace ein::detail
