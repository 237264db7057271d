// The fake CUDA device's memory (tests/support/fake_device_memory.h).
#include "support/fake_device_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace ein::testing {
namespace {

constexpr unsigned char kFresh = 0xA5;   // what new device memory holds
constexpr unsigned char kCanary = 0xDB;  // the bytes beside an allocation, inside its pages
constexpr size_t kAlignment = 64;

/// One allocation's mapping: [guard page][pad | the allocation | slack][guard page], where the
/// allocation's end rounded up to 64 bytes is the second guard's start.
struct Allocation {
  uintptr_t map = 0;  // the mapping's start: the leading guard page
  size_t map_size = 0;
  uintptr_t body = 0;  // the pages between the guards
  size_t body_size = 0;
  uintptr_t start = 0;  // what allocate_device_memory returned
  size_t nbytes = 0;    // what was asked for
  int opened = 0;       // accesses holding it open now
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> by_map;  // keyed by Allocation::map
  /// The operation that opened memory last (for the fault handler's message).
  std::atomic<const char*> operation{nullptr};
  struct sigaction previous_segv {
  }, previous_bus{};
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives every static tensor that frees into it
  return *r;
}

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

/// The allocation whose mapping holds `address`, or null (the registry's mutex held).
Allocation* find(Registry& r, uintptr_t address) {
  auto it = r.by_map.upper_bound(address);
  if (it == r.by_map.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  return address < a.map + a.map_size ? &a : nullptr;
}

void set_access(const Allocation& a, bool open) {
  if (mprotect(reinterpret_cast<void*>(a.body), a.body_size,
               open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::perror("fake cuda: mprotect on device memory");
    std::abort();
  }
}

/// Stops with a message when a byte beside `a` (open) is not the canary any more.
void check_canaries(const Allocation& a, const std::string& operation) {
  const auto* body = reinterpret_cast<const unsigned char*>(a.body);
  const size_t before = a.start - a.body, after = before + a.nbytes;
  for (size_t i = 0; i < a.body_size; ++i) {
    if (i == before) i = after;
    if (i >= a.body_size || body[i] == kCanary) continue;
    const long long offset = static_cast<long long>(i) - static_cast<long long>(before);
    std::fprintf(stderr,
                 "fake cuda: %s wrote byte %lld of a device allocation of %zu bytes at %p, %s "
                 "(a GPU does not stop it; compute-sanitizer's memcheck reports it)\n",
                 operation.c_str(), offset, a.nbytes, reinterpret_cast<void*>(a.start),
                 offset < 0 ? "before its start" : "past its end");
    std::abort();
  }
}

/// SIGSEGV and SIGBUS: a touch of a guard page, or of an allocation nothing opened, is named and
/// stops the process; any other fault is the previous handler's (restored, the access repeats).
void on_fault(int signal, siginfo_t* info, void*) {
  Registry& r = registry();
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  bool locked = false;
  for (int attempt = 0; attempt < 1000 && !locked; ++attempt)
    locked = r.mutex.try_lock();
  if (locked) {
    const Allocation* a = find(r, address);
    if (a) {
      const long long offset = static_cast<long long>(address) - static_cast<long long>(a->start);
      const char* where =
          address < a->body ? "before its start"
          : address >= a->body + a->body_size
              ? "past its end"
              : "which the host cannot reach: host code read a device pointer, or a "
                "kernel a buffer it was not given";
      const char* operation = r.operation.load();
      char message[768];
      const int n = std::snprintf(
          message, sizeof message,
          "fake cuda: an access to byte %lld of a device allocation of %zu bytes at %p, %s (%s; "
          "a GPU faults or reads another buffer)\n",
          offset, a->nbytes, reinterpret_cast<void*>(a->start), where,
          operation ? operation : "outside any copy, launch or GEMM of the fake device");
      if (n > 0) (void)!write(STDERR_FILENO, message, std::min<size_t>(n, sizeof message - 1));
      std::abort();
    }
    r.mutex.unlock();
  }
  sigaction(signal, signal == SIGSEGV ? &r.previous_segv : &r.previous_bus, nullptr);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &registry().previous_segv);
    sigaction(SIGBUS, &action, &registry().previous_bus);
  });
}

}  // namespace

void* allocate_device_memory(int64_t nbytes) {
  install_fault_handler();
  const size_t page = page_size();
  const auto wanted = static_cast<size_t>(std::max<int64_t>(nbytes, 1));
  const size_t size = (wanted + kAlignment - 1) / kAlignment * kAlignment;
  const size_t body_size = (size + page - 1) / page * page;
  void* map = mmap(nullptr, body_size + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  Allocation a;
  a.map = reinterpret_cast<uintptr_t>(map);
  a.map_size = body_size + 2 * page;
  a.body = a.map + page;
  a.body_size = body_size;
  a.start = a.body + body_size - size;
  a.nbytes = static_cast<size_t>(std::max<int64_t>(nbytes, 0));
  set_access(a, true);
  auto* body = reinterpret_cast<unsigned char*>(a.body);
  std::memset(body, kCanary, body_size);
  std::memset(reinterpret_cast<void*>(a.start), kFresh, a.nbytes);
  set_access(a, false);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.by_map.emplace(a.map, a);
  return reinterpret_cast<void*>(a.start);
}

void free_device_memory(void* ptr) {
  if (!ptr) return;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const Allocation* a = find(r, reinterpret_cast<uintptr_t>(ptr));
  if (!a || a->start != reinterpret_cast<uintptr_t>(ptr)) {
    std::fprintf(stderr, "fake cuda: freeing %p, which is not a device allocation's start\n", ptr);
    std::abort();
  }
  const uintptr_t map = a->map;
  munmap(reinterpret_cast<void*>(map), a->map_size);
  r.by_map.erase(map);
}

DeviceMemoryAccess::DeviceMemoryAccess(std::string operation,
                                       std::initializer_list<const void*> pointers)
    : DeviceMemoryAccess(std::move(operation), std::vector<const void*>(pointers)) {}

DeviceMemoryAccess::DeviceMemoryAccess(std::string operation,
                                       const std::vector<const void*>& pointers)
    : operation_(std::move(operation)) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const void* p : pointers) {
    Allocation* a = p ? find(r, reinterpret_cast<uintptr_t>(p)) : nullptr;
    if (!a) continue;
    if (a->opened++ == 0) set_access(*a, true);
    opened_.push_back(a->map);
  }
  r.operation = operation_.c_str();
}

DeviceMemoryAccess::~DeviceMemoryAccess() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (uintptr_t map : opened_) {
    const auto it = r.by_map.find(map);
    if (it == r.by_map.end()) continue;  // freed while open (only its memory was the host's)
    Allocation& a = it->second;
    check_canaries(a, operation_);
    if (--a.opened == 0) set_access(a, false);
  }
  if (r.operation == operation_.c_str()) r.operation = nullptr;
}

}  // namespace ein::testing

// For the fake NCCL (tests/support/fake_nccl.cpp), a library that finds these in the test
// program, when it has them, to reach device buffers as a GPU's NCCL does.
extern "C" void* ein_fake_device_memory_open(const char* operation, const void* pointer) {
  return new ein::testing::DeviceMemoryAccess(operation, {pointer});
}

extern "C" void ein_fake_device_memory_close(void* access) {
  delete static_cast<ein::testing::DeviceMemoryAccess*>(access);
}
