// Host emulation of the CUDA features emitted kernels use, so that the test can compile a
// kernel's CUDA C++ with the host C++ compiler and run it on the CPU (force-included before
// the kernel's source; see emulate_test.cpp). It is faithful to the execution model the
// kernels rely on, not to the GPU's arithmetic:
//  - every block runs as blockDim.x real threads (std::thread, kept between blocks and launches
//    in the test process's pool), so __syncthreads() is a true barrier of the block and a
//    missing barrier is a real race; blocks run one after another,
//    the last first (CUDA gives no order between blocks: a kernel that counts on block 0 going
//    first is caught);
//  - a launch of more threads a block than the kernel's __launch_bounds__ (or 1024) stops the
//    process with a message, as cuLaunchKernel refuses it;
//  - __shfl_xor_sync exchanges values among the 32 threads of a warp through a per-warp
//    barrier (all 32 lanes must take part, as the full mask requires);
//  - __syncwarp() is a barrier of the warp's 32 threads;
//  - PTX's mma.sync m16n8k16, ldmatrix and cp.async (the kernels' ein_mma_16816,
//    ein_ldmatrix_x4 and ein_cp_async_16) exchange operands among the warp's lanes and give
//    each lane its part in the PTX ISA's fragment layouts; a cp.async's destination reads as
//    NaN until the thread waits for it;
//  - sm_90a's wgmma.mma_async m64nNk16 (the kernels' ein_wgmma, with A in registers and B
//    through a shared-memory matrix descriptor) takes the warpgroup's A registers and decodes
//    B's descriptor (start address, leading and stride byte offsets, 128-byte swizzle) as the
//    PTX ISA's canonical layouts say; B is read, and the results land, at the wait_group that
//    completes its commit group (a thread that ends with a product pending aborts);
//  - WMMA (nvcuda::wmma: fragments, load/store/mma_sync) gives every lane of the warp the whole
//    tile, in row-major order: the GPU spreads a fragment over the lanes in a layout the API
//    leaves unspecified, so a kernel that uses only the API (and reads which row an accumulator
//    element holds back from memory) is right under either; store_matrix_sync writes from lane 0
//    alone, so a reader missing its __syncwarp() races as it would on the GPU;
//  - __shared__ variables are function-local statics: one copy, shared by the block's threads
//    (blocks never overlap, so one copy is enough); a kernel's dynamic shared memory
//    (EIN_DYNAMIC_SHARED) is the launch's bytes, all 0xff (NaN in every float type) when each
//    block starts, followed by a guard that a block must leave as it is;
//  - a thread that returns stops counting at the barriers (arrive_and_drop), as exited
//    threads do on the GPU;
//  - a misaligned access that the GPU faults on stops the process with a message: ldmatrix
//    rows and cp.async's source and destination off 16 bytes here, typed accesses (a 16-byte
//    ein_vec, a uint4) by UBSan's alignment check, which units are compiled with where the
//    host compiler has it (tests/support/host_cuda.cpp);
//  - math is the host's libm (expf, erff, ...) and the 16-bit and fp8 types are the CUDA
//    headers' host implementations: values may differ from the GPU's in the last ulp, so
//    this checks indexing, reductions, synchronisation and conversions, not device libm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)  // (max threads[, min blocks[, max blocks per cluster]])
#define __shared__ static
#define EIN_EMULATED_CUDA 1  // kernels include <mma.h> only when this is not defined

struct EinDim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EinDim3 threadIdx, blockIdx;
inline EinDim3 blockDim, gridDim;

namespace ein_emulation {

/// std::barrier's arrive_and_wait and arrive_and_drop, with waiters that sleep at once on a
/// condition variable. A block's hundreds of threads share the host's few cores; std::barrier's
/// waiters spin and yield before they sleep, and that switching between yielding threads was
/// most of an emulated launch's time.
class Barrier {
 public:
  explicit Barrier(unsigned count) : expected_(count) {}
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const unsigned long long phase = phase_;
    if (++arrived_ == expected_) return complete();
    changed_.wait(lock, [&] { return phase_ != phase; });
  }
  /// Arrives at this phase and leaves the later ones (a thread that returned).
  void arrive_and_drop() {
    std::lock_guard lock(mutex_);
    if (arrived_ == --expected_) complete();
  }

 private:
  void complete() {
    arrived_ = 0;
    ++phase_;
    changed_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  unsigned expected_, arrived_ = 0;
  unsigned long long phase_ = 0;
};

/// The barriers and shuffle slots of the block being run.
struct Block {
  explicit Block(unsigned threads) : block(threads), slots(threads), registers(threads) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w)
      warps.push_back(std::make_unique<Barrier>(std::min(32u, threads - 32 * w)));
    for (unsigned g = 0; g < (threads + 127) / 128; ++g)
      warpgroups.push_back(std::make_unique<Barrier>(std::min(128u, threads - 128 * g)));
  }
  Barrier block;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<std::unique_ptr<Barrier>> warpgroups;  // 4 consecutive warps each
  std::vector<double> slots;  // one per thread; float and double values pass exactly
  std::vector<std::array<uint64_t, 6>> registers;  // one set per thread: PTX's warp-wide operands
};
inline Block* current = nullptr;
/// The launch's dynamic shared memory (1024-byte aligned), and the guard bytes after it.
inline unsigned char* dynamic_shared = nullptr;
constexpr size_t kSharedGuard = 1024;

}  // namespace ein_emulation

/// The kernel's dynamic shared memory (extern __shared__ on a GPU).
#define EIN_DYNAMIC_SHARED(name) unsigned char* const name = ein_emulation::dynamic_shared

inline void __syncthreads() { ein_emulation::current->block.arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  ein_emulation::Block& b = *ein_emulation::current;
  const unsigned t = threadIdx.x, warp = t / 32;
  b.slots[t] = static_cast<double>(v);
  b.warps[warp]->arrive_and_wait();  // every lane has written
  const T other = static_cast<T>(b.slots[warp * 32 + ((t % 32) ^ static_cast<unsigned>(lane_mask))]);
  b.warps[warp]->arrive_and_wait();  // every lane has read before the slots are reused
  return other;
}

inline void __syncwarp(unsigned = 0xffffffffu) {
  ein_emulation::current->warps[threadIdx.x / 32]->arrive_and_wait();
}

// PTX's warp-wide matrix instructions and asynchronous copies as the kernels call them
// (exec/attention_cuda_ptx.cpp): each lane's operands pass through the warp's registers, and
// every lane takes its part of the result in the layouts the PTX ISA documents, written here
// from its tables, not from the kernel's reading of them.
namespace ein_emulation {
/// Stops the process when `p` is not on a multiple of `bytes`, as the GPU faults there
/// ("misaligned address") where the host reads on.
inline void require_aligned(const void* p, uintptr_t bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % bytes == 0) return;
  std::fprintf(stderr,
               "host emulation: %s at %p, not on %u bytes: a misaligned address on the "
               "GPU\n",
               what, p, static_cast<unsigned>(bytes));
  std::abort();
}

/// The warp's lanes' register sets and this lane's index in them.
inline std::array<uint64_t, 6>* warp_registers(unsigned& lane) {
  lane = threadIdx.x % 32;
  return &current->registers[threadIdx.x / 32 * 32];
}
inline uint16_t half_of(uint64_t reg, int which) { return static_cast<uint16_t>(reg >> (16 * which)); }

/// ldmatrix .m8n8 .x4 .b16: lanes 8m..8m+7 give the addresses of matrix m's rows; r[m] gets
/// elements (lane / 4, 2 (lane % 4) + 0 and 1) of matrix m, or of its transpose.
template <bool Trans>
void ldmatrix_x4(unsigned* r, const void* p) {
  unsigned lane;
  std::array<uint64_t, 6>* regs = warp_registers(lane);
  require_aligned(p, 16, "an ldmatrix row");
  regs[lane][0] = reinterpret_cast<uintptr_t>(p);
  __syncwarp();
  for (unsigned m = 0; m < 4; ++m) {
    unsigned value = 0;
    for (unsigned x = 0; x < 2; ++x) {
      const unsigned row = Trans ? 2 * (lane % 4) + x : lane / 4;
      const unsigned col = Trans ? lane / 4 : 2 * (lane % 4) + x;
      const auto* row_at = reinterpret_cast<const uint16_t*>(regs[8 * m + row][0]);
      value |= static_cast<unsigned>(row_at[col]) << (16 * x);
    }
    r[m] = value;
  }
  __syncwarp();
}

/// mma.sync .m16n8k16 .row .col, f32 accumulators: with group = lane / 4 and t = lane % 4,
/// A's element (row, col) is half col % 2 of register (row ≥ 8) + 2 (col ≥ 8) of lane
/// 4 (row % 8) + (col % 8) / 2; B's (k, n) half k % 2 of register k ≥ 8 of lane 4 n + (k % 8) / 2;
/// C's register i holds (group + 8 (i ≥ 2), 2 t + i % 2).
template <class T>
void mma_16816(float* d, const unsigned* a, const unsigned* b) {
  unsigned lane;
  std::array<uint64_t, 6>* regs = warp_registers(lane);
  for (int x = 0; x < 4; ++x) regs[lane][x] = a[x];
  regs[lane][4] = b[0];
  regs[lane][5] = b[1];
  __syncwarp();
  const auto value = [](uint64_t reg, int which) {
    const uint16_t bits = half_of(reg, which);
    T v;
    std::memcpy(&v, &bits, 2);
    return static_cast<float>(v);
  };
  const auto A = [&](int row, int col) {
    return value(regs[4 * (row % 8) + (col % 8) / 2][(row >= 8) + 2 * (col >= 8)], col % 2);
  };
  const auto B = [&](int k, int n) { return value(regs[4 * n + (k % 8) / 2][4 + (k >= 8)], k % 2); };
  float result[4];
  for (int i = 0; i < 4; ++i) {
    const int row = static_cast<int>(lane / 4) + 8 * (i / 2), col = 2 * static_cast<int>(lane % 4) + i % 2;
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum += A(row, k) * B(k, col);
    result[i] = sum;
  }
  __syncwarp();  // every lane has read the operands before they are reused
  for (int i = 0; i < 4; ++i) d[i] = result[i];
}

/// cp.async: the destination holds all-ones bytes (NaN in every float type) from the copy's
/// start until this thread waits, when the copy lands; a kernel that reads a tile before its
/// wait, or starts a copy into a tile another warp still reads, sees NaN.
struct PendingCopy {
  void* dst;
  const void* src;
  bool copy;
};
inline thread_local std::vector<PendingCopy> pending_copies;
}  // namespace ein_emulation

template <class T>
void ein_mma_16816(float* d, const unsigned* a, const unsigned* b) {
  ein_emulation::mma_16816<T>(d, a, b);
}
inline void ein_ldmatrix_x4(unsigned* r, const void* p) { ein_emulation::ldmatrix_x4<false>(r, p); }
inline void ein_ldmatrix_x4_trans(unsigned* r, const void* p) {
  ein_emulation::ldmatrix_x4<true>(r, p);
}
inline void ein_cp_async_16(void* dst, const void* src, bool copy) {
  ein_emulation::require_aligned(dst, 16, "a cp.async destination");
  if (copy) ein_emulation::require_aligned(src, 16, "a cp.async source");
  std::memset(dst, 0xff, 16);
  ein_emulation::pending_copies.push_back({dst, src, copy});
}
inline void ein_cp_async_wait_all() {
  for (const ein_emulation::PendingCopy& c : ein_emulation::pending_copies) {
    if (c.copy) std::memcpy(c.dst, c.src, 16);
    else std::memset(c.dst, 0, 16);
  }
  ein_emulation::pending_copies.clear();
}

// sm_90a's warpgroup MMA as the kernels call it (exec/attention_cuda_wgmma.cpp).
/// A shared-memory matrix descriptor: its 64 bits as the GPU takes them, and the host address
/// that stands for shared address 0 (the tile it was made from, less the start it encodes).
struct ein_desc_t {
  uint64_t bits;
  const unsigned char* window;
};
/// The descriptor of a 128-byte swizzled operand `offset` bytes into `tile`.
inline ein_desc_t ein_desc(const void* tile, unsigned offset, unsigned lbo, unsigned sbo) {
  return {(uint64_t{offset} & 0x3FFFF) >> 4 | uint64_t{lbo >> 4} << 16 |
              uint64_t{sbo >> 4} << 32 | uint64_t{1} << 62,
          static_cast<const unsigned char*>(tile)};
}
inline void ein_fence_proxy_async() {}
inline void ein_wgmma_fence() {}

namespace ein_emulation {
/// B's element (k, n) of a descriptor, from the PTX ISA's canonical layouts of 16-bit elements
/// with 128-byte swizzling (T = 8 elements of 16 bytes), in bytes from the start address:
///  - K-major, ((8,m),(T,2k)):((8T,SBO),(1,T)): n % 8 at 128 bytes, n / 8 at SBO, k contiguous;
///  - MN-major, ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): n % 64 contiguous, n / 64 at LBO, k % 8 at
///    128 bytes, k / 8 at SBO;
/// then Swizzle<3,4,3> on the shared address: bits 4-6 (the 16-byte chunk) ^= bits 7-9.
template <class T, bool NMajor>
float descriptor_element(const ein_desc_t& b, int k, int n) {
  const uint64_t bits = b.bits;
  if (bits >> 62 != 1 || reinterpret_cast<uintptr_t>(b.window) % 1024 != 0) {
    std::fprintf(stderr, "host emulation: wgmma takes 128-byte swizzled operands from a "
                         "1024-byte aligned tile here\n");
    std::abort();
  }
  const uint64_t start = (bits & 0x3FFF) << 4, lbo = (bits >> 16 & 0x3FFF) << 4,
                 sbo = (bits >> 32 & 0x3FFF) << 4;
  const uint64_t offset = NMajor ? (n / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (n % 64) * 2
                                 : (n / 8) * sbo + (n % 8) * 128 + k * 2;
  uint64_t address = start + offset;
  address ^= (address >> 7 & 7) << 4;
  T v;
  std::memcpy(&v, b.window + address, sizeof v);
  return static_cast<float>(v);
}

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
  float (*b_element)(const ein_desc_t&, int, int);
  long long group;  // the commit group it belongs to: the thread's commits before its issue
};
inline thread_local std::vector<PendingProduct> pending_products;
inline thread_local long long committed_groups = 0;
}  // namespace ein_emulation

/// wgmma.commit_group: the products issued since the last commit make a group.
inline void ein_wgmma_commit() { ++ein_emulation::committed_groups; }

/// wgmma.mma_async.sync.aligned.m64nNk16.f32 with A from registers: the warpgroup's 128 threads
/// give A's 64 × 16 elements, warp w rows 16w..16w+15 in mma.sync m16n8k16's A layout (register
/// (row ≥ 8) + 2 (col ≥ 8) of lane 4 (row % 8) + (col % 8) / 2, half col % 2); this thread's
/// d[j][i] is D's (16w + group + 8 (i ≥ 2), 8j + 2 t + i % 2). A is read now; B, and d when
/// accumulating, at the thread's next ein_wgmma_wait, which writes d.
template <class T, int N, bool NMajor>
void ein_emulated_wgmma(float (*d)[4], const unsigned* a, ein_desc_t b, int accumulate) {
  using namespace ein_emulation;
  Block& blk = *current;
  const unsigned t = threadIdx.x, first = t / 128 * 128;
  for (int x = 0; x < 4; ++x) blk.registers[t][x] = a[x];
  blk.warpgroups[t / 128]->arrive_and_wait();
  std::vector<float> whole(64 * 16);
  for (int row = 0; row < 64; ++row)
    for (int col = 0; col < 16; ++col) {
      const int rr = row % 16;
      const unsigned holder = first + 32 * (row / 16) + 4 * (rr % 8) + (col % 8) / 2;
      const uint16_t bits = half_of(blk.registers[holder][(rr >= 8) + 2 * (col >= 8)], col % 2);
      T v;
      std::memcpy(&v, &bits, 2);
      whole[row * 16 + col] = static_cast<float>(v);
    }
  blk.warpgroups[t / 128]->arrive_and_wait();  // every thread has read A before it is reused
  pending_products.push_back({&d[0][0], N, accumulate != 0, std::move(whole), b,
                              &descriptor_element<T, NMajor>, committed_groups});
}

/// wgmma.wait_group N: the products of every group but the last N this thread committed land,
/// in issue order (a chained product accumulates onto the one before it: d is read now, so a
/// kernel that changes an accumulator before its product's wait gets a wrong sum); the others
/// stay pending.
template <int N>
void ein_wgmma_wait() {
  using namespace ein_emulation;
  const unsigned w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  std::vector<PendingProduct> running;
  for (PendingProduct& p : pending_products) {
    if (p.group >= committed_groups - N) {
      running.push_back(std::move(p));
      continue;
    }
    for (int j = 0; j < p.n / 8; ++j)
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * static_cast<int>(w) + static_cast<int>(lane / 4) + 8 * (i / 2);
        const int col = 8 * j + 2 * static_cast<int>(lane % 4) + i % 2;
        float sum = p.accumulate ? p.d[4 * j + i] : 0.0f;
        for (int k = 0; k < 16; ++k) sum += p.a[row * 16 + k] * p.b_element(p.b, k, col);
        p.d[4 * j + i] = sum;
      }
  }
  pending_products = std::move(running);
}

namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K>
struct tile_shape;  // rows × cols of a fragment: A is M × K, B is K × N, C is M × N
template <int M, int N, int K>
struct tile_shape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct tile_shape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct tile_shape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static constexpr int rows = tile_shape<Use, M, N, K>::rows, cols = tile_shape<Use, M, N, K>::cols;
  enum { num_elements = rows * cols };
  T x[num_elements];
};

template <class Use, int M, int N, int K, class T, class L, class V>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  for (T& e : f.x) e = static_cast<T>(v);
}

/// A or B from memory in the fragment's layout: element (r, c) at p[r·ldm + c] (row_major) or
/// p[c·ldm + r] (col_major).
template <class Use, int M, int N, int K, class T, class L>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, L>;
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c)
      f.x[r * F::cols + c] = std::is_same_v<L, col_major> ? p[c * ldm + r] : p[r * ldm + c];
}

template <int M, int N, int K, class T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t l) {
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      f.x[r * N + c] = l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
}

template <int M, int N, int K, class T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t l) {
  if (threadIdx.x % 32 != 0) return;
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      (l == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * N + c];
}

/// d = a·b + c, products and sums in the accumulator's type (d may be c).
template <int M, int N, int K, class T, class LA, class LB, class C>
void mma_sync(fragment<accumulator, M, N, K, C>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b,
              const fragment<accumulator, M, N, K, C>& c) {
  C sum[M * N];
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < N; ++j) {
      C acc = c.x[r * N + j];
      for (int k = 0; k < K; ++k)
        acc += static_cast<C>(static_cast<float>(a.x[r * K + k])) *
               static_cast<C>(static_cast<float>(b.x[k * N + j]));
      sum[r * N + j] = acc;
    }
  for (int i = 0; i < M * N; ++i) d.x[i] = sum[i];
}
}  // namespace nvcuda::wmma

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline long long __double_as_longlong(double d) {
  long long i;
  std::memcpy(&i, &d, sizeof i);
  return i;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, sizeof d);
  return d;
}
/// CUDA's atomicMin on a 64-bit word (the old value), atomic among the block's real threads.
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
  std::atomic_ref<unsigned long long> word(*address);
  unsigned long long old = word.load();
  while (value < old && !word.compare_exchange_weak(old, value)) {
  }
  return old;
}
using std::signbit;  // CUDA's math API has it unqualified; <cmath> keeps it in std
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

namespace ein_emulation {
/// Runs body(context, t) for every t in [0, n) at once, each on a thread of its own, and returns
/// when all have returned: the block's threads. The test process passes its pool of threads,
/// kept between launches (tests/support/host_cuda.cpp); `own_threads` starts and joins threads
/// of its own.
using RunThreads = void (*)(unsigned n, void (*body)(void*, unsigned), void* context);

inline void own_threads(unsigned n, void (*body)(void*, unsigned), void* context) {
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t)
    threads.emplace_back(body, context, t);
  for (std::thread& th : threads)
    th.join();
}
}  // namespace ein_emulation

/// Runs `kernel` (`entry`, whose __launch_bounds__ allow `max_threads` a block) as a launch of
/// `grid` blocks of `block` threads with `shared_bytes` of dynamic shared memory, each block's
/// threads through `run_threads`.
inline void ein_emulate_launch(const char* entry, unsigned max_threads, unsigned grid,
                               unsigned block, unsigned shared_bytes,
                               ein_emulation::RunThreads run_threads,
                               const std::function<void()>& kernel) {
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
  const size_t shared_size = shared_bytes + ein_emulation::kSharedGuard;
  std::unique_ptr<unsigned char, decltype(&std::free)> shared(
      static_cast<unsigned char*>(std::aligned_alloc(1024, (shared_size + 1023) / 1024 * 1024)),
      &std::free);
  ein_emulation::dynamic_shared = shared.get();
  for (unsigned g = grid; g-- > 0;) {  // the last block first
    std::memset(shared.get(), 0xff, shared_size);
    ein_emulation::Block b(block);
    ein_emulation::current = &b;
    auto thread = [&, g](unsigned t) {
      threadIdx = {t, 0, 0};
      blockIdx = {g, 0, 0};
      // A pool's thread starts as a new one would: no copies pending, no commit groups.
      ein_emulation::pending_copies.clear();
      ein_emulation::committed_groups = 0;
      kernel();
      if (!ein_emulation::pending_products.empty()) {
        std::fprintf(stderr,
                     "host emulation: thread %u ended with a wgmma product it never "
                     "waited for\n",
                     t);
        std::abort();
      }
      b.block.arrive_and_drop();
      b.warps[t / 32]->arrive_and_drop();
      b.warpgroups[t / 128]->arrive_and_drop();
    };
    (run_threads ? run_threads : ein_emulation::own_threads)(
        block, [](void* context, unsigned t) { (*static_cast<decltype(thread)*>(context))(t); },
        &thread);
    ein_emulation::current = nullptr;
    for (size_t i = shared_bytes; i < shared_size; ++i)
      if (shared.get()[i] != 0xff) {
        std::fprintf(stderr, "host emulation: a block wrote past its %u bytes of dynamic shared "
                             "memory (byte %zu)\n", shared_bytes, i);
        std::abort();
      }
  }
  ein_emulation::dynamic_shared = nullptr;
}
