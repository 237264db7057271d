// Data parallel and ZeRO 1/2 gradient averaging (gradient_sync.h).
#include "runtime/dist/gradient_sync.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <unordered_map>
#include <stdexcept>

#include <ein/autograd.h>
#include <ein/errors.h>
#include <ein/storage.h>
#include <fmt/format.h>

namespace ein::dist {
namespace {

/// The tensor's elements as contiguous host bytes appended at `to`.
void read_bytes(const Tensor& t, char* to) {
  const Tensor host = t.device().kind == DeviceKind::cpu ? t.contiguous() : t.to(cpu()).contiguous();
  std::memcpy(to, host.data_ptr(), static_cast<size_t>(host.nbytes()));
}

/// Writes `from` (t's elements, contiguous) into `t` in place.
void write_bytes(const Tensor& t, const char* from) {
  if (t.device().kind == DeviceKind::cpu && t.is_contiguous()) {
    std::memcpy(t.data_ptr(), from, static_cast<size_t>(t.nbytes()));
    return;
  }
  Tensor host = empty(t.shape(), t.dtype(), cpu());
  std::memcpy(host.data_ptr(), from, static_cast<size_t>(host.nbytes()));
  t.copy_(host);
}

/// to[i] = (parts[0][i] + parts[1][i] + ... ) / n, added in that order.
template <class T>
void average(char* to, const char* first, int64_t stride_bytes, int n, int64_t count) {
  auto* out = reinterpret_cast<T*>(to);
  for (int64_t i = 0; i < count; ++i) {
    T acc = reinterpret_cast<const T*>(first)[i];
    for (int r = 1; r < n; ++r)
      acc += reinterpret_cast<const T*>(first + r * stride_bytes)[i];
    out[i] = acc / static_cast<T>(n);
  }
}

}  // namespace

std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int ranks) {
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  std::vector<int> owner(numels.size(), 0);
  // Parameter i goes to the rank whose equal share of the elements holds its middle element.
  int64_t before = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t middle = before + numels[i] / 2;
    owner[i] = total == 0 ? 0
                          : static_cast<int>(std::min<int64_t>(ranks - 1, middle * ranks / total));
    if (i > 0) owner[i] = std::max(owner[i], owner[i - 1]);  // runs stay consecutive
    before += numels[i];
  }
  return owner;
}

GradientSync::GradientSync(Communicator& comm, std::vector<Tensor> params, SyncOptions options)
    : comm_(comm), params_(std::move(params)), options_(options) {
  if (options_.zero < 0 || options_.zero > 3)
    throw RuntimeError(fmt::format("ZeRO stage {}: expected 0, 1, 2 or 3", options_.zero));
  if (options_.bucket_bytes <= 0) throw RuntimeError("the gradient bucket size must be positive");
  std::vector<int64_t> numels;
  for (const Tensor& p : params_) {
    if (p.dtype() != DType::f32 && p.dtype() != DType::f64)
      throw RuntimeError(fmt::format(
          "data-parallel training averages f32 or f64 parameters; one is {} (train bf16 and "
          "fp16 with --precision, which keeps f32 master weights)",
          dtype_name(p.dtype())));
    numels.push_back(p.numel());
  }
  if (comm_.device_memory()) {
    if (!options_.average)
      throw std::logic_error("GradientSync: a device-memory communicator needs SyncOptions::average");
    for (const Tensor& p : params_)
      if (p.dtype() != params_.front().dtype() || p.device() != params_.front().device())
        throw RuntimeError(fmt::format(
            "data-parallel training over {} needs every parameter on one device in one dtype; "
            "found {} on {} and {} on {}",
            comm_.backend(), dtype_name(params_.front().dtype()), params_.front().device().str(),
            dtype_name(p.dtype()), p.device().str()));
  }
  owner_ = partition_parameters(numels, comm_.size());
  grad_buckets_ = make_buckets(true);
  param_buckets_ = make_buckets(false);
  if (options_.overlap && comm_.size() > 1 && !comm_.device_memory())
    if (std::unique_ptr<Communicator> group = comm_.duplicate()) {
      lane_ = std::make_unique<Lane>(std::move(group));
      for (size_t i = 0; i < params_.size(); ++i)
        if (const auto& meta = params_[i].autograd())
          meta->post_accumulate_hook = [this, i] { gradient_final(i); };
    }
}

namespace {

/// Parameters in `order` cut into runs of at most `cap` bytes (a larger one alone): per
/// parameter, its run.
std::vector<int> cut_buckets(const std::vector<size_t>& order, const std::vector<int64_t>& bytes,
                             int64_t cap) {
  std::vector<int> bucket(bytes.size(), 0);
  int at = -1;
  int64_t filled = 0;
  for (size_t i : order) {
    if (at < 0 || (filled > 0 && filled + bytes[i] > cap)) {
      ++at;
      filled = 0;
    }
    bucket[i] = at;
    filled += bytes[i];
  }
  return bucket;
}

}  // namespace

std::vector<int> gradient_buckets(const std::vector<int64_t>& bytes, int64_t bucket_bytes) {
  std::vector<size_t> order(bytes.size());
  std::iota(order.rbegin(), order.rend(), size_t{0});
  return cut_buckets(order, bytes, bucket_bytes);
}

std::vector<GradientSync::Bucket> GradientSync::make_buckets(bool reverse) const {
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (reverse) std::reverse(order.begin(), order.end());
  std::vector<int64_t> bytes;
  for (const Tensor& p : params_)
    bytes.push_back(p.nbytes());
  const std::vector<int> of = cut_buckets(order, bytes, options_.bucket_bytes);
  std::vector<Bucket> buckets;
  for (size_t i : order) {
    if (static_cast<size_t>(of[i]) == buckets.size()) buckets.emplace_back();
    Bucket& b = buckets.back();
    b.params.push_back(i);
    b.offset.push_back(b.bytes);
    b.bytes += bytes[i];
  }
  const auto n = static_cast<size_t>(comm_.size());
  for (Bucket& b : buckets) {
    b.rank_bytes.assign(n, 0);
    b.rank_offset.assign(n, -1);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const auto r = static_cast<size_t>(owner_[b.params[k]]);
      if (b.rank_offset[r] < 0) b.rank_offset[r] = b.offset[k];
      b.rank_bytes[r] += params_[b.params[k]].nbytes();
    }
    // Ranks that own nothing here get an empty run at a valid offset.
    for (size_t r = 0; r < n; ++r)
      if (b.rank_offset[r] < 0) b.rank_offset[r] = 0;
  }
  return buckets;
}

void GradientSync::set_gradients(const Bucket& b,
                                 const std::function<void(const Tensor&, size_t)>& write) {
  const auto me = static_cast<size_t>(comm_.rank());
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]];
    auto& meta = p.autograd();
    if (!meta) continue;
    if (options_.zero > 0 && static_cast<size_t>(owner_[b.params[k]]) != me) {
      meta->grad = Tensor();  // another rank updates this parameter
      continue;
    }
    if (!meta->grad.defined()) meta->grad = zeros(p.shape(), p.dtype(), p.device());
    write(meta->grad, k);
  }
}

std::unique_ptr<GradientSync::Exchange> GradientSync::capture(const Bucket& b,
                                                               bool during_backward) {
  auto x = std::make_unique<Exchange>();
  for (size_t i : b.params)
    x->grads.push_back(params_[i].grad());
  if (during_backward && options_.zero >= 2) {
    pack(b, *x);
    for (size_t k = 0; k < b.params.size(); ++k) {
      if (owns(b.params[k])) continue;
      x->grads[k] = Tensor();
      if (const auto& meta = params_[b.params[k]].autograd()) meta->grad = Tensor();
    }
  }
  return x;
}

void GradientSync::pack(const Bucket& b, Exchange& x) const {
  x.send.assign(static_cast<size_t>(b.bytes), 0);
  for (size_t k = 0; k < b.params.size(); ++k)
    if (x.grads[k].defined()) read_bytes(x.grads[k], x.send.data() + b.offset[k]);
  x.packed = true;
}

void GradientSync::exchange(const Bucket& b, Exchange& x, Communicator& comm) const {
  NoGrad no_grad;
  const int n = comm.size();
  const auto me = static_cast<size_t>(comm.rank());
  if (!x.packed) pack(b, x);
  const int64_t mine = b.rank_bytes[me];
  std::vector<char> recv(static_cast<size_t>(mine * n));
  std::vector<int64_t> recv_counts(static_cast<size_t>(n), mine), recv_offsets(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    recv_offsets[static_cast<size_t>(i)] = i * mine;
  comm.all_to_all_v(x.send.data(), b.rank_bytes, b.rank_offset, recv.data(), recv_counts,
                    recv_offsets, "the gradient exchange");
  // This rank's run, averaged in rank order, back into its place in `send`.
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]];
    if (static_cast<size_t>(owner_[b.params[k]]) != me) continue;
    const char* first = recv.data() + (b.offset[k] - b.rank_offset[me]);
    char* to = x.send.data() + b.offset[k];
    if (p.dtype() == DType::f64) average<double>(to, first, mine, n, p.numel());
    else average<float>(to, first, mine, n, p.numel());
  }
  if (options_.zero == 0)
    comm.all_gather_v(x.send.data() + b.rank_offset[me], x.send.data(), b.rank_bytes,
                      b.rank_offset, "the gradient gather");
  // The averages straight into the gradients this rank keeps, where they are plain host
  // memory (the backward is done with them: they are final); finish() does the rest.
  x.written.assign(b.params.size(), 0);
  bool all = true;
  for (size_t k = 0; k < b.params.size(); ++k) {
    const bool kept = options_.zero == 0 || static_cast<size_t>(owner_[b.params[k]]) == me;
    const Tensor& g = x.grads[k];
    if (!kept) continue;
    if (g.defined() && g.device().kind == DeviceKind::cpu && g.is_contiguous()) {
      std::memcpy(g.data_ptr(), x.send.data() + b.offset[k], static_cast<size_t>(g.nbytes()));
      x.written[k] = 1;
    } else {
      all = false;
    }
  }
  if (all) x.send = std::vector<char>();  // nothing left to write: the buffer goes now
}

void GradientSync::finish(const Bucket& b, Exchange& x) {
  set_gradients(b, [&](const Tensor& grad, size_t k) {
    if (!x.written[k]) write_bytes(grad, x.send.data() + b.offset[k]);
  });
}

void GradientSync::arm() {
  if (!lane_) return;
  // A step that never reached reduce_gradients() (its backward threw) may have left
  // exchanges running: they finish before their buffers go.
  if (!exchanges_.empty()) lane_->wait_all();
  armed_ = true;
  final_.assign(params_.size(), 0);
  exchanges_.clear();
}

void GradientSync::gradient_final(size_t param) {
  if (!armed_) return;
  final_[param] = 1;
  while (exchanges_.size() < grad_buckets_.size()) {
    const Bucket& b = grad_buckets_[exchanges_.size()];
    for (size_t i : b.params)
      if (!final_[i]) return;
    exchanges_.push_back(capture(b, true));
    lane_->submit([this, &b, x = exchanges_.back().get()](Communicator& comm) {
      exchange(b, *x, comm);
    });
  }
}

void GradientSync::reduce_gradients() {
  if (comm_.device_memory()) return reduce_gradients_on_device();
  in_backward_ = armed_ ? exchanges_.size() : 0;
  if (!armed_) {  // one bucket after another, here
    for (const Bucket& b : grad_buckets_) {
      const std::unique_ptr<Exchange> x = capture(b, false);
      exchange(b, *x, comm_);
      finish(b, *x);
    }
    return;
  }
  // The buckets the backward did not finish (a parameter it gave no gradient), in order.
  armed_ = false;
  while (exchanges_.size() < grad_buckets_.size()) {
    const Bucket& b = grad_buckets_[exchanges_.size()];
    exchanges_.push_back(capture(b, false));
    lane_->submit([this, &b, x = exchanges_.back().get()](Communicator& comm) {
      exchange(b, *x, comm);
    });
  }
  lane_->wait_all();
  NoGrad no_grad;
  for (size_t i = 0; i < grad_buckets_.size(); ++i)
    finish(grad_buckets_[i], *exchanges_[i]);
  exchanges_.clear();
}

void GradientSync::gather_parameters() {
  if (options_.zero == 0 || options_.zero == 3) return;  // ZeRO 3: owners keep their own
  if (comm_.device_memory()) return gather_parameters_on_device();
  NoGrad no_grad;
  const auto me = static_cast<size_t>(comm_.rank());
  std::vector<char> buffer;
  for (const Bucket& b : param_buckets_) {
    buffer.assign(static_cast<size_t>(b.bytes), 0);
    for (size_t k = 0; k < b.params.size(); ++k)
      if (owns(b.params[k])) read_bytes(params_[b.params[k]].detach(), buffer.data() + b.offset[k]);
    comm_.all_gather_v(buffer.data() + b.rank_offset[me], buffer.data(), b.rank_bytes,
                       b.rank_offset, "the parameter gather");
    for (size_t k = 0; k < b.params.size(); ++k)
      if (!owns(b.params[k])) write_bytes(params_[b.params[k]].detach(), buffer.data() + b.offset[k]);
  }
}

void GradientSync::reduce_gradients_on_device() {
  NoGrad no_grad;
  const int n = comm_.size();
  const auto me = static_cast<size_t>(comm_.rank());
  const DType dtype = params_.front().dtype();
  const Device device = params_.front().device();
  const int64_t es = element_size(dtype);  // bucket offsets are whole elements: one dtype
  // The n elements [at, at + count) of a 1-d buffer, as a view.
  const auto part = [&](const Tensor& t, int64_t at_bytes, int64_t count) {
    return t.slice(0, at_bytes / es, at_bytes / es + count);
  };
  for (const Bucket& b : grad_buckets_) {
    const Tensor send = zeros({b.bytes / es}, dtype, device);  // undefined gradients: zeros
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor g = params_[b.params[k]].grad();
      if (g.defined()) part(send, b.offset[k], g.numel()).view(g.shape()).copy_(g);
    }
    const int64_t mine = b.rank_bytes[me];
    const Tensor recv = empty({mine * n / es}, dtype, device);
    std::vector<int64_t> recv_counts(static_cast<size_t>(n), mine), recv_offsets(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      recv_offsets[static_cast<size_t>(i)] = i * mine;
    comm_.all_to_all_v(send.device_ptr(), b.rank_bytes, b.rank_offset, recv.device_ptr(),
                       recv_counts, recv_offsets, "the gradient exchange");
    for (size_t k = 0; k < b.params.size(); ++k) {
      if (static_cast<size_t>(owner_[b.params[k]]) != me) continue;
      const int64_t numel = params_[b.params[k]].numel();
      std::vector<Tensor> parts;
      for (int i = 0; i < n; ++i)
        parts.push_back(part(recv, i * mine + b.offset[k] - b.rank_offset[me], numel));
      part(send, b.offset[k], numel).copy_(options_.average(parts));
    }
    if (options_.zero == 0)
      comm_.all_gather_v(static_cast<char*>(send.device_ptr()) + b.rank_offset[me],
                         send.device_ptr(), b.rank_bytes, b.rank_offset, "the gradient gather");
    set_gradients(b, [&](const Tensor& grad, size_t k) {
      grad.copy_(part(send, b.offset[k], grad.numel()).view(grad.shape()));
    });
  }
}

void GradientSync::gather_parameters_on_device() {
  NoGrad no_grad;
  const auto me = static_cast<size_t>(comm_.rank());
  const DType dtype = params_.front().dtype();
  const Device device = params_.front().device();
  const int64_t es = element_size(dtype);
  for (const Bucket& b : param_buckets_) {
    const Tensor buffer = empty({b.bytes / es}, dtype, device);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor p = params_[b.params[k]].detach();
      if (owns(b.params[k]))
        buffer.slice(0, b.offset[k] / es, b.offset[k] / es + p.numel()).view(p.shape()).copy_(p);
    }
    comm_.all_gather_v(static_cast<char*>(buffer.device_ptr()) + b.rank_offset[me],
                       buffer.device_ptr(), b.rank_bytes, b.rank_offset, "the parameter gather");
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor p = params_[b.params[k]].detach();
      if (!owns(b.params[k]))
        p.copy_(buffer.slice(0, b.offset[k] / es, b.offset[k] / es + p.numel()).view(p.shape()));
    }
  }
}

namespace {

/// The parameters of sharded runs, by their storage (the owner's too: it broadcasts).
struct Sharded {
  GradientSync* sync;
  size_t param;
};
std::mutex g_sharded_mutex;
std::unordered_map<const Storage*, Sharded> g_sharded;
thread_local bool g_fetching = false;

}  // namespace

GradientSync::~GradientSync() {
  lane_.reset();  // waits for what it runs
  for (const Tensor& p : params_)
    if (const auto& meta = p.autograd()) meta->post_accumulate_hook = nullptr;
  std::lock_guard lock(g_sharded_mutex);
  for (const Tensor& p : params_)
    g_sharded.erase(p.storage().get());
}

void GradientSync::shard() {
  if (options_.zero != 3 || sharded_) return;
  {
    std::lock_guard lock(g_sharded_mutex);
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i];
      if (p.offset() != 0 || !p.is_contiguous() || p.storage()->nbytes() != p.nbytes())
        throw std::logic_error("ZeRO 3 shards parameters that own their whole storage");
      g_sharded[p.storage().get()] = {this, i};
    }
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!owns(i)) params_[i].storage()->release();
  sharded_ = true;
}

void GradientSync::unshard() {
  if (!sharded_) return;
  NoGrad no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    p.storage()->refill();
    void* data = comm_.device_memory() ? p.device_ptr() : p.data_ptr();
    comm_.broadcast(data, p.nbytes(), owner_[i], "the parameter gather");
  }
  sharded_ = false;
}

Tensor GradientSync::fetch(size_t param, const Tensor& x) {
  const Tensor& p = params_[param];
  const int owner = owner_[param];
  if (owner == comm_.rank()) {  // the root: its parameter as it is
    comm_.broadcast(comm_.device_memory() ? p.device_ptr() : p.data_ptr(), p.nbytes(), owner,
                    "the parameter fetch");
    return x;
  }
  const Tensor full = empty(p.shape(), p.dtype(), p.device());
  comm_.broadcast(comm_.device_memory() ? full.device_ptr() : full.data_ptr(), p.nbytes(), owner,
                  "the parameter fetch");
  return full.as_strided(x.shape(), x.strides(), x.offset());
}

uint64_t GradientSync::start_fetch(size_t param, Tensor& full) {
  const Tensor& p = params_[param];
  const int owner = owner_[param];
  if (owner != comm_.rank()) full = empty(p.shape(), p.dtype(), p.device());
  void* data = owner == comm_.rank() ? (comm_.device_memory() ? p.device_ptr() : p.data_ptr())
                                     : (comm_.device_memory() ? full.device_ptr() : full.data_ptr());
  const int64_t bytes = p.nbytes();
  if (!lane_) {
    comm_.broadcast(data, bytes, owner, "the parameter fetch");
    return 0;
  }
  return lane_->submit([data, bytes, owner](Communicator& comm) {
    comm.broadcast(data, bytes, owner, "the parameter fetch");
  });
}

void GradientSync::wait(uint64_t ticket) {
  if (lane_ && ticket > 0) lane_->wait(ticket);
}

GraphFetches::GraphFetches(const std::vector<Tensor>& reads) : reads_(reads.size()) {
  if (!g_fetching) return;
  std::lock_guard lock(g_sharded_mutex);
  for (size_t k = 0; k < reads.size(); ++k) {
    if (!reads[k].defined()) continue;
    const auto it = g_sharded.find(reads[k].storage().get());
    if (it == g_sharded.end() || !it->second.sync->sharded()) continue;
    reads_[k].sync = it->second.sync;
    reads_[k].param = it->second.param;
    any_ = true;
  }
}

GraphFetches::~GraphFetches() {
  for (Read& r : reads_)
    if (r.started && r.sync) {
      try {
        r.sync->wait(r.ticket);
      } catch (...) {  // the lane failed: its error reached (or reaches) whoever waits next
      }
    }
}

void GraphFetches::start(size_t k) {
  Read& r = reads_[k];
  if (r.started || !r.sync) return;
  r.ticket = r.sync->start_fetch(r.param, r.full);
  r.started = true;
}

Tensor GraphFetches::take(size_t k, Tensor x) {
  Read& r = reads_.at(k);
  if (!r.sync) return x;
  start(k);
  // The next sharded read travels now, where a lane carries it beside this thread's work.
  for (size_t next = k + 1; next < reads_.size(); ++next)
    if (reads_[next].sync) {
      if (reads_[next].sync->overlaps() && !reads_[next].started) {
        start(next);
        ++reads_[next].sync->prefetched_;
      }
      break;
    }
  r.sync->wait(r.ticket);
  r.started = false;  // taken: nothing left to wait for
  if (!r.full.defined()) return x;  // the owner: its parameter as it is
  Tensor full = std::move(r.full);
  return full.as_strided(x.shape(), x.strides(), x.offset());
}

bool fetching() {
  return g_fetching;
}

Tensor fetch_sharded(Tensor x) {
  if (!g_fetching || !x.defined()) return x;  // every graph input: a move, no lookup
  Sharded found;
  {
    std::lock_guard lock(g_sharded_mutex);
    const auto it = g_sharded.find(x.storage().get());
    if (it == g_sharded.end() || !it->second.sync->sharded()) return x;
    found = it->second;
  }
  return found.sync->fetch(found.param, x);
}

FetchScope::FetchScope() : previous_(g_fetching) {
  g_fetching = true;
}
FetchScope::~FetchScope() {
  g_fetching = previous_;
}

int64_t step_bytes(const std::vector<int64_t>& numels, const std::vector<int64_t>& bytes,
                   int ranks, int rank) {
  const std::vector<int> owner = partition_parameters(numels, ranks);
  int64_t total = 0, own = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    total += bytes[i];
    if (owner[i] == rank) own += bytes[i];
  }
  return ranks == 1 ? 0 : total + own * (ranks - 2);
}

int64_t GradientSync::bytes_per_step() const {
  std::vector<int64_t> numels, bytes;
  int64_t total = 0, own = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    numels.push_back(params_[i].numel());
    bytes.push_back(params_[i].nbytes());
    total += params_[i].nbytes();
    if (owns(i)) own += params_[i].nbytes();
  }
  const int n = comm_.size();
  if (options_.zero == 3)  // the exchange, then two fetches per micro-step instead of a gather
    return n == 1 ? 0 : (total - own) + 2 * options_.micro_steps * own * (n - 1);
  return step_bytes(numels, bytes, n, comm_.rank());
}

}  // namespace ein::dist
