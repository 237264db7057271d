// The host emulation's runtime: what runs an emulated kernel's blocks (host_emulation.h says what
// it is faithful to). Not built by CMake: tests/support/host_cuda.cpp compiles it at test time
// with the flags of the kernels' units (ThreadSanitizer's too, under the race check), into a
// shared library that every kernel's library links to.
//
// A block's threads are fibers: user-level contexts, each with a stack of its own, that the
// launching thread runs one at a time, switching at the barriers. A block's hundreds of threads
// as real threads on the host's few cores spent most of their time in the kernel's scheduler,
// waking and switching at every barrier.
//
// Under ThreadSanitizer (the race check) each fiber is a TSan fiber of its own, and TSan is told
// of exactly the orderings a GPU gives, no more: switches between fibers order nothing
// (__tsan_switch_to_fiber_no_sync); a barrier orders every arrival before every departure of the
// same phase; the launching thread's writes before a block (its inputs) come before the block's
// threads, and every block's accesses before what the launcher does after the whole grid. The
// scheduler's own state (which fiber runs, the barriers' counts, threadIdx and blockIdx, which the
// launcher writes for each fiber) is hidden from TSan: it is what orders the fibers on the host,
// not something a kernel may rely on. A read of shared or global memory that no barrier orders
// after another thread's write is then reported, whichever thread ran first.
//
// Blocks are unordered too, as on a GPU: one block's threads are other TSan fibers than the
// next block's, and nothing of one block is made to happen before another, so two blocks that
// write the same element of global memory (or one that reads what another writes) are reported.
// The blocks still run one after the other, on the same memory for their shared arrays: before
// each block, TSan's record of that memory is wiped (a fresh mapping over it, which TSan's mmap
// interceptor takes as new memory) with the contents kept, for the kernel library's writable data
// (its __shared__ statics) and the dynamic shared memory. TSan's fibers cost memory and every
// barrier's orderings cost time in proportion to their number, so they are reused: the blocks
// of a launch take turns over two sets of fibers, and a block is ordered after the one two
// blocks earlier, whose fibers it reuses, but not after the one just before it: each block is
// checked against the ones run just before and just after it.
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "host_emulation.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();  // exported by TSan's runtime, not in its header
extern "C" void __tsan_ignore_thread_end();
#define EIN_UNINSTRUMENTED __attribute__((no_sanitize("thread")))
#else
#define EIN_UNINSTRUMENTED
#endif

thread_local EinDim3 threadIdx{}, blockIdx{};
EinDim3 blockDim{}, gridDim{};

namespace ein_emulation {
namespace {

/// What ThreadSanitizer is told, under the race check (see the top of this file); nothing
/// otherwise.
namespace tsan {
#if defined(__SANITIZE_THREAD__)
constexpr bool watching = true;
/// Every access this fiber or thread makes to memory while one lives is hidden from TSan.
struct Unwatched {
  Unwatched() { __tsan_ignore_thread_begin(); }
  ~Unwatched() { __tsan_ignore_thread_end(); }
  Unwatched(const Unwatched&) = delete;
  Unwatched& operator=(const Unwatched&) = delete;
};
/// Everything the caller did so far happens before what a later acquire(`sync`) follows.
inline void release(void* sync) {
  __tsan_release(sync);
}
inline void acquire(void* sync) {
  __tsan_acquire(sync);
}
inline void* create_fiber() {
  return __tsan_create_fiber(0);
}
inline void* current_fiber() {
  return __tsan_get_current_fiber();
}
/// Called just before the switch: what ran before it orders nothing after it.
inline void switch_to(void* fiber) {
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
}
#else
constexpr bool watching = false;
struct Unwatched {
  Unwatched() {}  // user-provided: a guard that is never read is not an unused variable
};
inline void release(void*) {}
inline void acquire(void*) {}
inline void* create_fiber() {
  return nullptr;
}
inline void* current_fiber() {
  return nullptr;
}
inline void switch_to(void*) {}
#endif

/// Wipes TSan's record of the whole pages over [begin, end), keeping their contents: a fresh
/// mapping there, which TSan's mmap interceptor takes as new memory (and, as the caller is
/// unwatched, as memory nobody has accessed yet). Under the race check only.
void forget(unsigned char* begin, unsigned char* end) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  auto* first = reinterpret_cast<unsigned char*>(reinterpret_cast<uintptr_t>(begin) / page * page);
  auto* last =
      reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(end) + page - 1) / page * page);
  if (!watching || first == last) return;
  static std::vector<unsigned char> kept;  // launches run one at a time
  Unwatched scheduler;
  kept.assign(first, last);
  if (::mmap(first, static_cast<size_t>(last - first), PROT_READ | PROT_WRITE,
             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
    fail("could not map fresh pages over a block's shared memory");
  std::memcpy(first, kept.data(), kept.size());
}
}  // namespace tsan

struct ThreadState;

/// The block's threads as fibers (see the top of this file).
class Fibers {
 public:
  /// Runs body(context, t) for every t in [0, n), each on a fiber of its own (fibers first to
  /// first + n - 1 of the kept ones), from the first to the last and then round the ones not
  /// done, each until it waits or returns; returns when all have returned. Stops the process
  /// when every fiber left waits and none can go on.
  static void run(unsigned n, unsigned first, void (*body)(void*, unsigned), void* context);
  /// After the last block of a launch: what every block did happens before what the launcher
  /// does next (as a kernel's end orders it before the host's next call).
  static void join() { tsan::acquire(&block_end_); }
  /// Back to the launching thread, which goes on with the next fiber: from a fiber that waits.
  static void yield();
  /// Something a waiting fiber may be waiting for happened (an arrival at a barrier).
  static void progress() { ++events_; }

 private:
  static constexpr size_t kStack = size_t{1} << 20;  // bytes of a fiber's stack, less a guard page
  struct Fiber {
    ucontext_t context;
    unsigned char* stack;  // the guard page (no access), then the stack
    unsigned index;
    bool done;
    EinDim3 thread_idx, block_idx;  // this fiber's, while another runs
    void* tsan;                     // its TSan fiber, under the race check
    ThreadState* state;             // its copies and products in flight (kept, as the fiber)
  };
  // Not instrumented: what they read and write is the scheduler's, and they leave TSan's record
  // of the fiber's calls as they found it, though start() never returns (TSan's fiber is kept,
  // and the fiber starts again at the next block).
  EIN_UNINSTRUMENTED static void start();
  EIN_UNINSTRUMENTED static void switch_to(ucontext_t* from, ucontext_t* to, void* tsan_fiber);

  inline static std::vector<std::unique_ptr<Fiber>> fibers_;  // kept, with their stacks
  inline static ucontext_t launcher_;
  inline static void* launcher_tsan_ = nullptr;
  // TSan's orderings from the launcher to a block's fibers and from them, all blocks, back to it
  inline static char block_start_ = 0, block_end_ = 0;
  inline static Fiber* current_ = nullptr;
  inline static void (*body_)(void*, unsigned) = nullptr;
  inline static void* context_ = nullptr;
  inline static unsigned long long events_ = 0;
};

/// std::barrier's arrive_and_wait and arrive_and_drop among the fibers: a waiting fiber lets the
/// next one run until the phase changes. For TSan, every arrival at a phase (its release into the
/// phase's sync object) happens before every departure from it (an acquire of that object). Two
/// objects alternate: no thread can arrive at phase p + 2 before every thread has left phase p.
class Barrier {
 public:
  explicit Barrier(unsigned count) : expected_(count) {}
  /// For the next block: `count` threads, none arrived (its sync objects keep what they hold).
  void reset(unsigned count) {
    tsan::Unwatched scheduler;
    expected_ = count;
    arrived_ = 0;
  }
  void arrive_and_wait() {
    void* const sync = phase_sync();
    tsan::release(sync);
    exchange();
    tsan::acquire(sync);
  }
  /// Waits for every thread as arrive_and_wait() does, ordering no memory for TSan: where the
  /// threads of a warp converge for a collective instruction (a shuffle, ldmatrix, mma.sync,
  /// wgmma), which exchanges registers but, unlike __syncwarp(), orders no memory accesses.
  void exchange() {
    tsan::Unwatched scheduler;
    Fibers::progress();
    const unsigned long long phase = phase_;
    if (++arrived_ == expected_)
      complete();
    else
      while (phase_ == phase)
        Fibers::yield();
  }
  /// Arrives at this phase and leaves the later ones (a thread that returned).
  void arrive_and_drop() {
    tsan::release(phase_sync());
    tsan::Unwatched scheduler;
    Fibers::progress();
    if (arrived_ == --expected_) complete();
  }

 private:
  void complete() {
    arrived_ = 0;
    ++phase_;
  }
  void* phase_sync() {
    tsan::Unwatched scheduler;
    return &sync_[phase_ % 2];
  }
  unsigned expected_, arrived_ = 0;
  unsigned long long phase_ = 0;
  char sync_[2] = {};
};

using Registers = std::array<uint64_t, 6>;  // one thread's: PTX's warp-wide operands

/// The barriers and shuffle slots of the block being run.
struct Block {
  explicit Block(unsigned threads) : block(threads), slots(threads), registers(threads) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w)
      warps.push_back(std::make_unique<Barrier>(std::min(32u, threads - 32 * w)));
    for (unsigned g = 0; g < (threads + 127) / 128; ++g)
      warpgroups.push_back(std::make_unique<Barrier>(std::min(128u, threads - 128 * g)));
  }
  /// For another block of the same size.
  void reset() {
    const auto threads = static_cast<unsigned>(slots.size());
    block.reset(threads);
    for (unsigned w = 0; w < warps.size(); ++w)
      warps[w]->reset(std::min(32u, threads - 32 * w));
    for (unsigned g = 0; g < warpgroups.size(); ++g)
      warpgroups[g]->reset(std::min(128u, threads - 128 * g));
  }
  Barrier block;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<std::unique_ptr<Barrier>> warpgroups;  // 4 consecutive warps each
  std::vector<double> slots;                         // one per thread
  std::vector<Registers> registers;                  // one set per thread
  unsigned index = 0;                                // its blockIdx.x
};
Block* current = nullptr;
constexpr size_t kSharedGuard = 1024;
/// Sets of fibers (and blocks) a launch's blocks take turns over, under the race check: TSan's
/// fibers cost about 0.8 MB each, and each barrier's orderings cost time in proportion to how
/// many there are.
constexpr unsigned kRacecheckWindow = 2;

/// The writable data of the library that holds `code` (its __shared__ statics among them),
/// without the part made read-only after relocation, as [begin, end) ranges. For the race
/// check, whose launches wipe TSan's record of it before each block.
std::vector<std::pair<unsigned char*, unsigned char*>> writable_data(void* code) {
  struct Search {
    uintptr_t code;
    std::vector<std::pair<unsigned char*, unsigned char*>> ranges;
  } search{reinterpret_cast<uintptr_t>(code), {}};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& s = *static_cast<Search*>(data);
        bool holds = false;
        uintptr_t relro_begin = 0, relro_end = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& h = info->dlpi_phdr[i];
          const uintptr_t begin = info->dlpi_addr + h.p_vaddr, end = begin + h.p_memsz;
          if (h.p_type == PT_LOAD && (h.p_flags & PF_X) && s.code >= begin && s.code < end)
            holds = true;
          if (h.p_type == PT_GNU_RELRO) relro_begin = begin, relro_end = end;
        }
        if (!holds) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& h = info->dlpi_phdr[i];
          if (h.p_type != PT_LOAD || !(h.p_flags & PF_W)) continue;
          uintptr_t begin = info->dlpi_addr + h.p_vaddr;
          const uintptr_t end = begin + h.p_memsz;
          if (begin >= relro_begin && begin < relro_end) begin = relro_end;
          if (begin < end)
            s.ranges.emplace_back(reinterpret_cast<unsigned char*>(begin),
                                  reinterpret_cast<unsigned char*>(end));
        }
        return 1;
      },
      &search);
  if (search.ranges.empty()) fail("the race check found no writable data in the kernel's library");
  return search.ranges;
}

struct PendingCopy {
  void* dst;
  const void* src;
  bool copy;
};

/// A product this thread issued and has not waited for: A as the warpgroup gave it (read at the
/// issue, as the registers may change after it only once the product is done), B's descriptor
/// (read at the wait: a kernel that overwrites the tile before its wait sees the new values,
/// as the tensor cores might), and what the product writes.
struct PendingProduct {
  float* d;  // this thread's N / 2 accumulators
  int n;
  bool accumulate;
  std::vector<float> a;  // A's 64 × 16 elements, row-major
  ein_desc_t b;
  DescriptorElement b_element;
  long long group;  // the commit group it belongs to: the thread's commits before its issue
};

/// What a GPU thread keeps beyond its registers: its copies and products in flight.
struct ThreadState {
  std::vector<PendingCopy> pending_copies;
  std::vector<PendingProduct> pending_products;
  long long committed_groups = 0;
};
ThreadState* fiber_state = nullptr;  // the running fiber's
ThreadState& self() {
  tsan::Unwatched scheduler;
  return *fiber_state;
}

/// The warp's lanes' register sets and this lane's index in them.
Registers* warp_registers(unsigned& lane) {
  lane = threadIdx.x % 32;
  return &current->registers[threadIdx.x / 32 * 32];
}
uint16_t half_of(uint64_t reg, int which) {
  return static_cast<uint16_t>(reg >> (16 * which));
}

void Fibers::run(unsigned n, unsigned first, void (*body)(void*, unsigned), void* context) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  while (fibers_.size() < first + n) {
    void* at = ::mmap(nullptr, page + kStack, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (at == MAP_FAILED || ::mprotect(at, page, PROT_NONE) != 0)
      fail("no memory for a fiber's stack");
    fibers_.push_back(std::make_unique<Fiber>());
    fibers_.back()->stack = static_cast<unsigned char*>(at);
    fibers_.back()->tsan = tsan::create_fiber();
    fibers_.back()->state = new ThreadState;
  }
  body_ = body;
  context_ = context;
  // What the launcher does from here is the scheduler's (the fibers' own accesses are watched:
  // TSan's ignoring is a fiber's own).
  tsan::Unwatched scheduler;
  launcher_tsan_ = tsan::current_fiber();
  const auto fiber = [&](unsigned t) -> Fiber& { return *fibers_[first + t]; };
  for (unsigned t = 0; t < n; ++t) {
    Fiber& f = fiber(t);
    f.index = t;
    f.done = false;
    f.state->pending_copies.clear();  // the block before ended with its products waited for
    f.state->committed_groups = 0;
    f.thread_idx = f.block_idx = {0, 0, 0};
    if (::getcontext(&f.context) != 0) fail("getcontext failed");
    f.context.uc_stack.ss_sp = f.stack + page;
    f.context.uc_stack.ss_size = kStack;
    f.context.uc_link = nullptr;  // start() never returns
    ::makecontext(&f.context, &Fibers::start, 0);
  }
  tsan::release(&block_start_);
  for (unsigned live = n; live > 0;) {
    const unsigned long long before = events_;
    const unsigned live_before = live;
    for (unsigned t = 0; t < n; ++t) {
      Fiber& f = fiber(t);
      if (f.done) continue;
      current_ = &f;
      fiber_state = f.state;
      threadIdx = f.thread_idx;
      blockIdx = f.block_idx;
      switch_to(&launcher_, &f.context, f.tsan);
      f.thread_idx = threadIdx;
      f.block_idx = blockIdx;
      current_ = nullptr;
      fiber_state = nullptr;
      if (f.done) --live;
    }
    if (live > 0 && live == live_before && events_ == before)
      fail(
          "every thread of the block left waits at a barrier that the others never reach (a "
          "__syncthreads() or __syncwarp() that not every thread of the block or warp calls): "
          "a GPU hangs there");
  }
}

void Fibers::start() {
  tsan::acquire(&block_start_);
  Fiber* f = current_;
  body_(context_, f->index);
  tsan::release(&block_end_);
  f->done = true;
  switch_to(&f->context, &launcher_, launcher_tsan_);
  fail("a fiber that returned was resumed");
}

void Fibers::yield() {
  tsan::Unwatched scheduler;
  switch_to(&current_->context, &launcher_, launcher_tsan_);
}

void Fibers::switch_to(ucontext_t* from, ucontext_t* to, void* tsan_fiber) {
  tsan::switch_to(tsan_fiber);
  if (::swapcontext(from, to) != 0) fail("swapcontext failed");
}

}  // namespace

unsigned char* dynamic_shared = nullptr;

void fail(const char* message) {
  std::fprintf(stderr, "host emulation: %s\n", message);
  std::abort();
}

void require_aligned(const void* p, uintptr_t bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  std::fprintf(stderr,
               "host emulation: %s at %p, not on %u bytes: a misaligned address on the "
               "GPU\n",
               what, p, static_cast<unsigned>(bytes));
  std::abort();
}

void sync_block() {
  current->block.arrive_and_wait();
}
Barrier* current_warp() {
  tsan::Unwatched scheduler;
  return current->warps[threadIdx.x / 32].get();
}
void sync_warp() {
  current_warp()->arrive_and_wait();
}

// The warp-wide instructions below exchange registers among the lanes: through the block's
// slots and register sets, unwatched, at barriers that order no memory for TSan (exchange()), as
// the instructions order none on a GPU; what they read of memory (ldmatrix's rows) is watched.

double shfl_xor(double v, int lane_mask) {
  tsan::Unwatched registers;
  Block& b = *current;
  const unsigned t = threadIdx.x, warp = t / 32;
  b.slots[t] = v;
  b.warps[warp]->exchange();  // every lane has written
  const double other = b.slots[warp * 32 + ((t % 32) ^ static_cast<unsigned>(lane_mask))];
  b.warps[warp]->exchange();  // every lane has read before the slots are reused
  return other;
}

/// ldmatrix .m8n8 .x4 .b16: lanes 8m..8m+7 give the addresses of matrix m's rows; r[m] gets
/// elements (lane / 4, 2 (lane % 4) + 0 and 1) of matrix m, or of its transpose.
void ldmatrix_x4(unsigned* r, const void* p, bool trans) {
  unsigned lane;
  Registers* regs = warp_registers(lane);
  Barrier& warp = *current_warp();
  require_aligned(p, 16, "an ldmatrix row");
  {
    tsan::Unwatched registers;
    regs[lane][0] = reinterpret_cast<uintptr_t>(p);
  }
  warp.exchange();
  for (unsigned m = 0; m < 4; ++m) {
    unsigned value = 0;
    for (unsigned x = 0; x < 2; ++x) {
      const unsigned row = trans ? 2 * (lane % 4) + x : lane / 4;
      const unsigned col = trans ? lane / 4 : 2 * (lane % 4) + x;
      const uint16_t* row_at;
      {
        tsan::Unwatched registers;
        row_at = reinterpret_cast<const uint16_t*>(regs[8 * m + row][0]);
      }
      value |= static_cast<unsigned>(row_at[col]) << (16 * x);
    }
    r[m] = value;
  }
  warp.exchange();
}

/// mma.sync .m16n8k16 .row .col, f32 accumulators: with group = lane / 4 and t = lane % 4,
/// A's element (row, col) is half col % 2 of register (row ≥ 8) + 2 (col ≥ 8) of lane
/// 4 (row % 8) + (col % 8) / 2; B's (k, n) half k % 2 of register k ≥ 8 of lane 4 n + (k % 8) / 2;
/// C's register i holds (group + 8 (i ≥ 2), 2 t + i % 2).
void mma_16816(float* d, const unsigned* a, const unsigned* b, float (*element)(uint16_t)) {
  tsan::Unwatched registers;
  unsigned lane;
  Registers* regs = warp_registers(lane);
  for (int x = 0; x < 4; ++x)
    regs[lane][x] = a[x];
  regs[lane][4] = b[0];
  regs[lane][5] = b[1];
  current_warp()->exchange();
  const auto value = [&](uint64_t reg, int which) { return element(half_of(reg, which)); };
  const auto A = [&](int row, int col) {
    return value(regs[4 * (row % 8) + (col % 8) / 2][(row >= 8) + 2 * (col >= 8)], col % 2);
  };
  const auto B = [&](int k, int n) {
    return value(regs[4 * n + (k % 8) / 2][4 + (k >= 8)], k % 2);
  };
  float result[4];
  for (int i = 0; i < 4; ++i) {
    const int row = static_cast<int>(lane / 4) + 8 * (i / 2),
              col = 2 * static_cast<int>(lane % 4) + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k)
      sum += A(row, k) * B(k, col);
    result[i] = sum;
  }
  current_warp()->exchange();  // every lane has read the operands before they are reused
  for (int i = 0; i < 4; ++i)
    d[i] = result[i];
}

void cp_async_16(void* dst, const void* src, bool copy) {
  require_aligned(dst, 16, "a cp.async destination");
  if (copy) require_aligned(src, 16, "a cp.async source");
  std::memset(dst, 0xff, 16);
  self().pending_copies.push_back({dst, src, copy});
}

void cp_async_wait_all() {
  std::vector<PendingCopy>& pending_copies = self().pending_copies;
  for (const PendingCopy& c : pending_copies) {
    if (c.copy)
      std::memcpy(c.dst, c.src, 16);
    else
      std::memset(c.dst, 0, 16);
  }
  pending_copies.clear();
}

void wgmma(float* d, int n, const unsigned* a, ein_desc_t b, bool accumulate,
           float (*a_element)(uint16_t), DescriptorElement b_element) {
  tsan::Unwatched registers;
  Block& blk = *current;
  const unsigned t = threadIdx.x, first = t / 128 * 128;
  for (int x = 0; x < 4; ++x)
    blk.registers[t][x] = a[x];
  blk.warpgroups[t / 128]->exchange();
  std::vector<float> whole(64 * 16);
  for (int row = 0; row < 64; ++row)
    for (int col = 0; col < 16; ++col) {
      const int rr = row % 16;
      const unsigned holder = first + 32 * (row / 16) + 4 * (rr % 8) + (col % 8) / 2;
      whole[row * 16 + col] =
          a_element(half_of(blk.registers[holder][(rr >= 8) + 2 * (col >= 8)], col % 2));
    }
  blk.warpgroups[t / 128]->exchange();  // every thread has read A before it is reused
  ThreadState& me = self();
  me.pending_products.push_back(
      {d, n, accumulate, std::move(whole), b, b_element, me.committed_groups});
}

void wgmma_commit() {
  ++self().committed_groups;
}

void wgmma_wait(int groups_left) {
  const unsigned w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  ThreadState& me = self();
  std::vector<PendingProduct> running;
  for (PendingProduct& p : me.pending_products) {
    if (p.group >= me.committed_groups - groups_left) {
      running.push_back(std::move(p));
      continue;
    }
    for (int j = 0; j < p.n / 8; ++j)
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * static_cast<int>(w) + static_cast<int>(lane / 4) + 8 * (i / 2);
        const int col = 8 * j + 2 * static_cast<int>(lane % 4) + i % 2;
        float sum = p.accumulate ? p.d[4 * j + i] : 0.0f;
        for (int k = 0; k < 16; ++k)
          sum += p.a[row * 16 + k] * p.b_element(p.b, k, col);
        p.d[4 * j + i] = sum;
      }
  }
  me.pending_products = std::move(running);
}

}  // namespace ein_emulation

void ein_emulate_launch(const char* entry, unsigned max_threads, unsigned grid, unsigned block,
                        unsigned shared_bytes, void (*kernel)(void* const* args),
                        void* const* args) {
  using namespace ein_emulation;
  // One launch at a time: launches share the block being run, the grid's size and the fibers.
  // Host threads launching at once run their kernels one after the other, a valid schedule.
  static std::mutex launches;
  std::lock_guard one_at_a_time(launches);
  max_threads = std::min(max_threads, 1024u);
  if (block == 0 || block > max_threads) {
    std::fprintf(stderr,
                 "host emulation: %s launched with blocks of %u threads, where its "
                 "__launch_bounds__ allow 1 to %u: a GPU refuses the launch\n",
                 entry, block, max_threads);
    std::abort();
  }
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  const size_t shared_size = shared_bytes + kSharedGuard;
  // its own pages, which the race check maps afresh for each block
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t mapped = (shared_size + page - 1) / page * page;
  struct Pages {
    void* at;
    size_t size;
    ~Pages() { ::munmap(at, size); }
  } const pages{::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                mapped};
  if (pages.at == MAP_FAILED) fail("no memory for a block's dynamic shared memory");
  auto* const shared = static_cast<unsigned char*>(pages.at);
  dynamic_shared = shared;
  const std::vector<std::pair<unsigned char*, unsigned char*>> statics =
      tsan::watching ? writable_data(reinterpret_cast<void*>(kernel))
                     : std::vector<std::pair<unsigned char*, unsigned char*>>{};
  // The blocks take turns over `window` sets of fibers and blocks (see the top of this file).
  const unsigned window = tsan::watching ? kRacecheckWindow : 1u;
  std::vector<std::unique_ptr<Block>> blocks;
  // One for the whole launch: what a block's threads read of it was written before any block.
  auto thread = [&](unsigned t) {
    Block* b;
    {
      tsan::Unwatched scheduler;
      b = current;
      threadIdx = {t, 0, 0};
      blockIdx = {b->index, 0, 0};
    }
    kernel(args);
    if (!self().pending_products.empty()) {
      std::fprintf(stderr,
                   "host emulation: thread %u ended with a wgmma product it never waited for\n", t);
      std::abort();
    }
    b->block.arrive_and_drop();
    b->warps[t / 32]->arrive_and_drop();
    b->warpgroups[t / 128]->arrive_and_drop();
  };
  for (unsigned g = grid, turn = 0; g-- > 0; ++turn) {  // the last block first
    const unsigned slot = turn % window;
    {
      tsan::Unwatched scheduler;
      if (blocks.size() <= slot)
        blocks.push_back(std::make_unique<Block>(block));
      else
        blocks[slot]->reset();
      current = blocks[slot].get();
      current->index = g;
      tsan::forget(shared, shared + mapped);
      for (const auto& [begin, end] : statics)
        tsan::forget(begin, end);
      std::memset(shared, 0xff, shared_size);
    }
    Fibers::run(
        block, slot * block,
        [](void* context, unsigned t) { (*static_cast<decltype(thread)*>(context))(t); }, &thread);
    tsan::Unwatched scheduler;
    current = nullptr;
    for (size_t i = shared_bytes; i < shared_size; ++i)
      if (shared[i] != 0xff) {
        std::fprintf(stderr,
                     "host emulation: a block wrote past its %u bytes of dynamic shared "
                     "memory (byte %zu)\n",
                     shared_bytes, i);
        std::abort();
      }
  }
  Fibers::join();
  blocks.clear();
  dynamic_shared = nullptr;
}
