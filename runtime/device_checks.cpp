#include "runtime/device_checks.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <ein/errors.h>
#include <ein/tensor.h>

namespace ein::detail {
namespace {

std::atomic<int64_t> g_words{1024};
constexpr int64_t kClear = -1;  // ~0 as the kernels' unsigned atomicMin sees it

thread_local DeviceCheckReport t_report;  // the innermost DeviceCheckScope's

struct Check {
  DeviceCheckMessage message;
  DeviceCheckReport report;  // empty: a RuntimeError
};

/// One device's check words and the checks pending in them, in launch order (check i's word
/// is words[i]).
struct DeviceState {
  const DeviceBackend* backend = nullptr;  // the backend the words live on
  Tensor words;
  std::vector<Check> pending;
};

struct Registry {
  // Recursive: reading the words copies to the host, which runs the (then empty) checks again.
  std::recursive_mutex mutex;
  std::map<std::pair<int, int>, DeviceState> devices;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: its tensors may outlive the backends
  return *r;
}

/// `device`'s state, made afresh when its words live on a backend no longer installed (a test
/// replaced it: what was pending there is dropped).
DeviceState& state_of(Registry& r, Device device) {
  DeviceState& s = r.devices[{static_cast<int>(device.kind), device.index}];
  const DeviceBackend* backend = has_backend(device.kind) ? &backend_for(device) : nullptr;
  if (s.backend != backend) s = DeviceState{backend, Tensor(), {}};
  return s;
}

}  // namespace

DeviceCheckScope::DeviceCheckScope(DeviceCheckReport report)
    : previous_(std::exchange(t_report, std::move(report))) {}

DeviceCheckScope::~DeviceCheckScope() {
  t_report = std::move(previous_);
}

void* defer_device_check(Device device, DeviceCheckMessage message) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  DeviceState* s = &state_of(r, device);
  if (s->words.defined() && static_cast<int64_t>(s->pending.size()) == s->words.numel()) {
    run_device_checks(device);
    s = &state_of(r, device);
  }
  if (!s->words.defined())
    s->words = full({g_words.load()}, static_cast<double>(kClear), DType::i64, device);
  void* word = static_cast<int64_t*>(s->words.device_ptr()) + s->pending.size();
  s->pending.push_back({std::move(message), t_report});
  return word;
}

void run_device_checks(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.devices.find({static_cast<int>(device.kind), device.index});
  if (it == r.devices.end() || it->second.pending.empty()) return;
  DeviceState& s = state_of(r, device);
  if (s.pending.empty()) return;
  const std::vector<Check> checks = std::move(s.pending);
  s.pending.clear();
  const auto used = static_cast<int64_t>(checks.size());
  // Every stream's kernels, not only the current one's: a check may come from any.
  backend_for(device).synchronize(device);
  const Tensor range = s.words.slice(0, 0, used);
  const std::vector<int64_t> found = range.to_vector<int64_t>();
  range.fill_(static_cast<double>(kClear));
  for (int64_t i = 0; i < used; ++i) {
    const int64_t position = found[static_cast<size_t>(i)];
    if (position == kClear) continue;
    const Check& check = checks[static_cast<size_t>(i)];
    const std::string message = check.message(position);
    if (check.report) check.report(message);
    throw RuntimeError(message);
  }
}

void run_device_checks() {
  std::vector<Device> devices;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (const auto& [key, s] : r.devices)
      if (!s.pending.empty())
        devices.push_back(Device{static_cast<DeviceKind>(key.first), key.second});
  }
  for (const Device& d : devices)
    run_device_checks(d);
}

int64_t pending_device_checks(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.devices.find({static_cast<int>(device.kind), device.index});
  return it == r.devices.end() ? 0 : static_cast<int64_t>(it->second.pending.size());
}

int64_t set_device_check_words(int64_t words) {
  if (words < 1) throw RuntimeError("set_device_check_words: at least 1 word");
  return g_words.exchange(words);
}

}  // namespace ein::detail
