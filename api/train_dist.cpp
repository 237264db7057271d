// Start-up agreement and ZeRO checkpoint gathering for distributed runs (train_dist.h).
#include "api/train_dist.h"

#include "runtime/dist/nccl_communicator.h"

#include <functional>

#include <ein/checkpoint.h>
#include <ein/diagnostic.h>
#include <ein/ops.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ein::detail {
namespace {

/// What must agree across ranks, as text: the settings that shape the step.
std::string settings_text(const TrainOptions& o) {
  std::string data = o.data ? fmt::format("{} B={} T={} {}", o.data->kind, o.data->batch,
                                          o.data->context, o.data->order)
                            : "fn batch";
  return fmt::format(
      "steps={} seed={} precision={} recompute={} activation_budget={} lr={} "
      "schedule={} warmup={} clip={} accumulate={} zero={} bucket_mb={} "
      "overlap={} data={} resume={}",
      o.steps, o.seed, o.precision, o.recompute, o.activation_budget, o.lr, o.schedule, o.warmup,
      o.clip, o.accumulate, o.zero, o.bucket_mb, o.overlap, data, o.resume);
}

std::string parameters_text(const std::vector<NamedTensor>& params) {
  std::string text;
  for (const auto& p : params)
    text += fmt::format("{} {} {}\n", p.name, dtype_name(p.tensor.dtype()), shape_str(p.tensor.shape()));
  return text;
}

/// Every rank's `bytes`, in rank order.
std::vector<std::string> all_gather_bytes(dist::Communicator& comm, const std::string& bytes,
                                          std::string_view what) {
  const std::vector<uint64_t> sizes = comm.all_gather(static_cast<uint64_t>(bytes.size()), what);
  std::vector<int64_t> counts, offsets;
  int64_t total = 0;
  for (uint64_t n : sizes) {
    offsets.push_back(total);
    counts.push_back(static_cast<int64_t>(n));
    total += static_cast<int64_t>(n);
  }
  std::string all(static_cast<size_t>(total), '\0');
  comm.all_gather_v(bytes.data(), all.data(), counts, offsets, what);
  std::vector<std::string> out;
  for (size_t r = 0; r < sizes.size(); ++r)
    out.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(counts[r])));
  return out;
}

}  // namespace

void check_same_run(dist::Communicator& comm, const TrainOptions& options,
                    const std::vector<NamedTensor>& params) {
  const std::hash<std::string> hash;
  const auto model = comm.all_gather(static_cast<uint64_t>(hash(parameters_text(params))),
                                     "the start-up check");
  const std::string mine = settings_text(options);
  const auto settings = all_gather_bytes(comm, mine, "the start-up check");
  std::string problems;
  for (size_t r = 1; r < model.size(); ++r) {
    if (model[r] != model[0])
      problems += fmt::format("\n  rank {}'s parameters (names, dtypes or shapes) differ from rank 0's", r);
    if (settings[r] != settings[0])
      problems += fmt::format("\n  rank {} trains with {}\n  rank 0 trains with {}", r, settings[r],
                              settings[0]);
  }
  if (!problems.empty() && comm.rank() != 0)  // rank 0 explains; the others stop with it
    throw UserError(fmt::format("rank {}: the ranks of this run disagree (rank 0 says how)", comm.rank()));
  if (!problems.empty())
    throw UserError(fmt::format("the {} ranks of this run do not run the same training (the same "
                                "script, --set sizes and flags on every rank):{}",
                                comm.size(), problems));
}

std::vector<TensorLayout> gather_layouts(dist::Communicator& comm,
                                         const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& [name, t] : tensors)
    mine.push_back({{"name", name}, {"dtype", std::string(dtype_name(t.dtype()))}, {"shape", t.shape()}});
  std::vector<TensorLayout> out;
  for (const std::string& text : all_gather_bytes(comm, mine.dump(), "the checkpoint's shard layouts"))
    for (const auto& e : nlohmann::json::parse(text))
      out.push_back({e.at("name").get<std::string>(), *parse_dtype_name(e.at("dtype").get<std::string>()),
                     e.at("shape").get<Shape>()});
  return out;
}

dist::Average rank_order_average() {
  return [](const std::vector<Tensor>& parts) {
    std::string inputs, sum;
    for (size_t i = 0; i < parts.size(); ++i) {
      inputs += fmt::format("{}t{}[i]", i ? ", " : "", i);
      sum += fmt::format("{}t{}", i ? " + " : "", i);
    }
    return map(fmt::format("{} -> ({}) / {}", inputs, sum, parts.size()), parts);
  };
}

dist::Communicator& gradient_communicator(dist::Communicator& world, Device device,
                                          std::unique_ptr<dist::Communicator>& owned,
                                          std::string& note) {
  if (device.kind != DeviceKind::cuda) return world;
  std::string why;
  if (!dist::nccl_available(&why)) {
    note = fmt::format("gradients are averaged through the host over {}: {}", world.backend(), why);
    return world;
  }
  owned = dist::make_nccl_communicator(world, device.index);
  note = fmt::format("gradients are averaged on {} by NCCL", device.str());
  return *owned;
}

}  // namespace ein::detail
