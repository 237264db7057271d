// The NCCL group (nccl_communicator.h). nccl.h is not needed: the few types and entry points
// are declared here ABI-compatibly, as runtime/cuda/driver.h does for the driver.
#include "runtime/dist/nccl_communicator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include <ein/errors.h>
#include <fmt/format.h>

#include "runtime/cuda/driver.h"
#include "runtime/cuda/stream.h"
#include "runtime/dist/watchdog.h"
#include "runtime/dynamic_library.h"

namespace ein::dist {
namespace {

using NcclComm = struct NcclCommOpaque*;
struct NcclUniqueId {  // nccl.h's ncclUniqueId
  char internal[128];
};
constexpr int kNcclSuccess = 0;
constexpr int kNcclUint8 = 1;  // ncclUint8: counts are bytes

struct NcclApi {
  const char* (*get_error_string)(int) = nullptr;
  int (*get_version)(int*) = nullptr;
  int (*get_unique_id)(NcclUniqueId*) = nullptr;
  int (*comm_init_rank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  int (*comm_destroy)(NcclComm) = nullptr;
  int (*comm_abort)(NcclComm) = nullptr;
  int (*comm_get_async_error)(NcclComm, int*) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int (*send)(const void*, size_t, int, int, NcclComm, CuStream) = nullptr;
  int (*recv)(void*, size_t, int, int, NcclComm, CuStream) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, NcclComm, CuStream) = nullptr;
};

struct Loaded {
  NcclApi api;
  std::string error;  // empty when usable
  std::string library;
  int version = 0;
};

const Loaded& nccl() {
  static const Loaded loaded = [] {
    Loaded l;
    std::vector<std::string> candidates = {"libnccl.so.2", "libnccl.so"};
    if (const char* path = std::getenv("EIN_NCCL_LIBRARY"); path && *path) candidates = {path};
    detail::DynamicLibrary lib = detail::DynamicLibrary::open(candidates);
    if (!lib.handle) {
      l.error = "NCCL not found (the CUDA toolkit's libnccl.so.2; EIN_NCCL_LIBRARY names another "
                "file):" + lib.tried;
      return l;
    }
    NcclApi& a = l.api;
    lib.bind(a.get_error_string, "ncclGetErrorString");
    lib.bind(a.get_version, "ncclGetVersion");
    lib.bind(a.get_unique_id, "ncclGetUniqueId");
    lib.bind(a.comm_init_rank, "ncclCommInitRank");
    lib.bind(a.comm_destroy, "ncclCommDestroy");
    lib.bind(a.comm_abort, "ncclCommAbort");
    lib.bind(a.comm_get_async_error, "ncclCommGetAsyncError");
    lib.bind(a.group_start, "ncclGroupStart");
    lib.bind(a.group_end, "ncclGroupEnd");
    lib.bind(a.send, "ncclSend");
    lib.bind(a.recv, "ncclRecv");
    lib.bind(a.broadcast, "ncclBroadcast");
    if (!lib.missing.empty()) {
      l.error = fmt::format("{} lacks {} (NCCL 2.7 or newer is needed)", lib.name, lib.missing);
      return l;
    }
    l.library = lib.name;
    a.get_version(&l.version);
    return l;
  }();
  return loaded;
}

void check(int result, std::string_view call) {
  if (result == kNcclSuccess) return;
  const char* text = nccl().api.get_error_string ? nccl().api.get_error_string(result) : nullptr;
  throw RuntimeError(fmt::format("{} failed: NCCL error {} ({})", call, result,
                                 text ? text : "no description"));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device) : boot_(bootstrap), device_(device) {
    timeout_seconds = bootstrap.timeout_seconds;
    const NcclApi& a = nccl().api;
    NcclUniqueId id{};
    if (boot_.rank() == 0) check(a.get_unique_id(&id), "ncclGetUniqueId");
    boot_.broadcast(&id, sizeof id, 0, "the NCCL id");
    if (real_driver()) make_cuda_context_current(device_);
    check(a.comm_init_rank(&comm_, boot_.size(), id, boot_.rank()), "ncclCommInitRank");
    watchdog_ = std::make_unique<Watchdog>(boot_.rank(), timeout_seconds,
                                           [this] { nccl().api.comm_abort(comm_); });
  }
  ~NcclCommunicator() override {
    watchdog_.reset();
    if (comm_) nccl().api.comm_destroy(comm_);
  }

  int rank() const override { return boot_.rank(); }
  int size() const override { return boot_.size(); }
  int local_rank() const override { return boot_.local_rank(); }
  std::string_view backend() const override { return "nccl"; }
  bool device_memory() const override { return true; }

  void all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& send_offsets, void* recv,
                    const std::vector<int64_t>& recv_counts,
                    const std::vector<int64_t>& recv_offsets, std::string_view what) override {
    Watchdog::Scope scope(*watchdog_, what);
    ++stats.collectives;
    const NcclApi& a = nccl().api;
    const CuStream s = stream();
    check(a.group_start(), "ncclGroupStart");
    for (int j = 0; j < size(); ++j) {
      const auto k = static_cast<size_t>(j);
      if (j != rank()) stats.sent_bytes += send_counts.at(k);
      if (send_counts.at(k) > 0)
        check(a.send(static_cast<const char*>(send) + send_offsets.at(k),
                     static_cast<size_t>(send_counts[k]), kNcclUint8, j, comm_, s),
              what);
      if (recv_counts.at(k) > 0)
        check(a.recv(static_cast<char*>(recv) + recv_offsets.at(k),
                     static_cast<size_t>(recv_counts[k]), kNcclUint8, j, comm_, s),
              what);
    }
    check(a.group_end(), "ncclGroupEnd");
    finish(what);
  }

  void all_gather_v(const void* send, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& offsets, std::string_view what) override {
    Watchdog::Scope scope(*watchdog_, what);
    ++stats.collectives;
    const NcclApi& a = nccl().api;
    const CuStream s = stream();
    const auto me = static_cast<size_t>(rank());
    stats.sent_bytes += counts.at(me) * (size() - 1);
    // A rank's own part is moved within the group too, unless it is already in place.
    const bool in_place = send == static_cast<const char*>(recv) + offsets.at(me);
    check(a.group_start(), "ncclGroupStart");
    for (int j = 0; j < size(); ++j) {
      const auto k = static_cast<size_t>(j);
      if (j == rank() && in_place) continue;
      if (counts.at(me) > 0)
        check(a.send(send, static_cast<size_t>(counts[me]), kNcclUint8, j, comm_, s), what);
      if (counts.at(k) > 0)
        check(a.recv(static_cast<char*>(recv) + offsets.at(k), static_cast<size_t>(counts[k]),
                     kNcclUint8, j, comm_, s),
              what);
    }
    check(a.group_end(), "ncclGroupEnd");
    finish(what);
  }

  void broadcast(void* data, int64_t bytes, int root, std::string_view what) override {
    Watchdog::Scope scope(*watchdog_, what);
    ++stats.collectives;
    if (rank() == root) stats.sent_bytes += bytes * (size() - 1);
    check(nccl().api.broadcast(data, data, static_cast<size_t>(bytes), kNcclUint8, root, comm_,
                               stream()),
          what);
    finish(what);
  }

  void barrier(std::string_view what) override { boot_.barrier(what); }

  [[noreturn]] void abort(const std::string& why) override {
    nccl().api.comm_abort(comm_);
    boot_.abort(why);
    std::_Exit(1);  // not reached: the bootstrap group's abort ends the process
  }

 private:
  /// Whether the process talks to a real driver (a fake device in tests has none to wait on:
  /// its collectives are done when they return).
  static bool real_driver() { return cuda_driver_info().available; }

  CuStream stream() const { return current_stream(device_); }

  /// Waits for the stream (under the caller's watchdog scope), then asks NCCL for errors the
  /// communicator met asynchronously.
  void finish(std::string_view what) {
    if (real_driver()) {
      make_cuda_context_current(device_);
      check_cuda(cuda_driver().stream_synchronize(stream()), fmt::format("{} (stream)", what));
    }
    int state = kNcclSuccess;
    check(nccl().api.comm_get_async_error(comm_, &state), "ncclCommGetAsyncError");
    check(state, what);
  }

  Communicator& boot_;
  int device_;
  NcclComm comm_ = nullptr;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

bool nccl_available(std::string* why) {
  const Loaded& l = nccl();
  if (!l.error.empty() && why) *why = l.error;
  return l.error.empty();
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device) {
  std::string why;
  if (!nccl_available(&why)) throw RuntimeError(why);
  return std::make_unique<NcclCommunicator>(bootstrap, device);
}

}  // namespace ein::dist
