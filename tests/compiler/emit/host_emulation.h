// Host emulation of the CUDA features emitted kernels use, so that the test can compile a
// kernel's CUDA C++ with the host C++ compiler and run it on the CPU (force-included before
// the kernel's source; see emulate_test.cpp). It is faithful to the execution model the
// kernels rely on, not to the GPU's arithmetic:
//  - every block runs as blockDim.x threads with a stack each, and __syncthreads() is a true
//    barrier of the block: fibers that the launching thread switches between at the barriers,
//    thread 0 first and each until it waits, so a thread that reads what a later one writes
//    without a barrier between reads the old value; under the race check
//    (scripts/racecheck.sh), ThreadSanitizer sees only the orderings the barriers give, so it
//    reports any missing barrier, whichever thread ran first;
//  - a barrier that some of the threads it counts never reach, so that every thread left
//    waits, stops the process with a message (a GPU hangs there);
//  - blocks run one after another, the last first (CUDA gives no order between blocks: a
//    kernel that counts on block 0 going first is caught); under the race check TSan sees
//    them unordered, so two blocks writing one element, or one reading what another writes,
//    are reported;
//  - a launch of more threads a block than the kernel's __launch_bounds__ (or 1024) stops the
//    process with a message, as cuLaunchKernel refuses it;
//  - __shfl_xor_sync exchanges values among the 32 threads of a warp through a per-warp
//    barrier (all 32 lanes must take part, as the full mask requires); under the race check it
//    orders no memory accesses, as on a GPU, and no more do ldmatrix, mma.sync or wgmma below;
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
//
// This header is what a kernel's unit sees: the CUDA headers, the names CUDA C++ gives a kernel,
// and declarations. What runs the blocks (their threads and barriers, the warps' registers, the
// pending copies and products, the launch) is host_emulation_runtime.cpp, which
// tests/support/host_cuda.cpp compiles once into a shared library that every kernel's library
// links to. Compiled into each kernel, with the headers it needs, it was about four fifths of
// every kernel's compile time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

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
  unsigned x, y, z;
};
// Defined once, in the runtime: a kernel's library reads the values the launch set.
extern thread_local EinDim3 threadIdx, blockIdx;
extern EinDim3 blockDim, gridDim;

namespace ein_emulation {

/// Prints "host emulation: " and `message` and stops the process.
[[noreturn]] void fail(const char* message);

/// Stops the process when `p` is not on a multiple of `bytes`, as the GPU faults there
/// ("misaligned address") where the host reads on.
void require_aligned(const void* p, uintptr_t bytes, const char* what);

/// The launch's dynamic shared memory (1024-byte aligned), followed by guard bytes.
extern unsigned char* dynamic_shared;

void sync_block();
void sync_warp();
/// The value lane (this lane ^ lane_mask) of the warp gave; float and double values pass exactly.
double shfl_xor(double v, int lane_mask);

/// A 16-bit value's float, for the element type the kernel names.
template <class T>
float bits_to_float(uint16_t bits) {
  T v;
  std::memcpy(&v, &bits, 2);
  return static_cast<float>(v);
}

void ldmatrix_x4(unsigned* r, const void* p, bool trans);
void mma_16816(float* d, const unsigned* a, const unsigned* b, float (*element)(uint16_t));
void cp_async_16(void* dst, const void* src, bool copy);
void cp_async_wait_all();

}  // namespace ein_emulation

/// The kernel's dynamic shared memory (extern __shared__ on a GPU).
#define EIN_DYNAMIC_SHARED(name) unsigned char* const name = ein_emulation::dynamic_shared

inline void __syncthreads() {
  ein_emulation::sync_block();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  ein_emulation::sync_warp();
}

template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  return static_cast<T>(ein_emulation::shfl_xor(static_cast<double>(v), lane_mask));
}

// PTX's warp-wide matrix instructions and asynchronous copies as the kernels call them
// (exec/attention_cuda_ptx.cpp): each lane's operands pass through the warp's registers, and
// every lane takes its part of the result in the layouts the PTX ISA documents, written in the
// runtime from its tables, not from the kernel's reading of them. A cp.async's destination holds
// all-ones bytes (NaN in every float type) from the copy's start until this thread waits, when
// the copy lands; a kernel that reads a tile before its wait, or starts a copy into a tile
// another warp still reads, sees NaN.
template <class T>
void ein_mma_16816(float* d, const unsigned* a, const unsigned* b) {
  ein_emulation::mma_16816(d, a, b, &ein_emulation::bits_to_float<T>);
}
inline void ein_ldmatrix_x4(unsigned* r, const void* p) {
  ein_emulation::ldmatrix_x4(r, p, false);
}
inline void ein_ldmatrix_x4_trans(unsigned* r, const void* p) {
  ein_emulation::ldmatrix_x4(r, p, true);
}
inline void ein_cp_async_16(void* dst, const void* src, bool copy) {
  ein_emulation::cp_async_16(dst, src, copy);
}
inline void ein_cp_async_wait_all() {
  ein_emulation::cp_async_wait_all();
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
  if (bits >> 62 != 1 || reinterpret_cast<uintptr_t>(b.window) % 1024 != 0)
    fail("wgmma takes 128-byte swizzled operands from a 1024-byte aligned tile here");
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

using DescriptorElement = float (*)(const ein_desc_t&, int k, int n);
/// Issues this thread's part of a wgmma: `d` holds its n / 2 accumulators.
void wgmma(float* d, int n, const unsigned* a, ein_desc_t b, bool accumulate,
           float (*a_element)(uint16_t), DescriptorElement b_element);
void wgmma_commit();
void wgmma_wait(int groups_left);
}  // namespace ein_emulation

/// wgmma.commit_group: the products issued since the last commit make a group.
inline void ein_wgmma_commit() {
  ein_emulation::wgmma_commit();
}

/// wgmma.mma_async.sync.aligned.m64nNk16.f32 with A from registers: the warpgroup's 128 threads
/// give A's 64 × 16 elements, warp w rows 16w..16w+15 in mma.sync m16n8k16's A layout (register
/// (row ≥ 8) + 2 (col ≥ 8) of lane 4 (row % 8) + (col % 8) / 2, half col % 2); this thread's
/// d[j][i] is D's (16w + group + 8 (i ≥ 2), 8j + 2 t + i % 2). A is read now; B, and d when
/// accumulating, at the thread's next ein_wgmma_wait, which writes d.
template <class T, int N, bool NMajor>
void ein_emulated_wgmma(float (*d)[4], const unsigned* a, ein_desc_t b, int accumulate) {
  ein_emulation::wgmma(&d[0][0], N, a, b, accumulate != 0, &ein_emulation::bits_to_float<T>,
                       &ein_emulation::descriptor_element<T, NMajor>);
}

/// wgmma.wait_group N: the products of every group but the last N this thread committed land,
/// in issue order (a chained product accumulates onto the one before it: d is read now, so a
/// kernel that changes an accumulator before its product's wait gets a wrong sum); the others
/// stay pending.
template <int N>
void ein_wgmma_wait() {
  ein_emulation::wgmma_wait(N);
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
/// CUDA's atomicMin on a 64-bit word (the old value): an atomic access, as ThreadSanitizer sees it.
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
  unsigned long long old = __atomic_load_n(address, __ATOMIC_SEQ_CST);
  while (value < old && !__atomic_compare_exchange_n(address, &old, value, true, __ATOMIC_SEQ_CST,
                                                     __ATOMIC_SEQ_CST)) {
  }
  return old;
}
using std::signbit;  // CUDA's math API has it unqualified; <cmath> keeps it in std
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

/// Runs `kernel(args)` (`entry`, whose __launch_bounds__ allow `max_threads` a block) as a launch
/// of `grid` blocks of `block` threads with `shared_bytes` of dynamic shared memory; each block's
/// threads are fibers on the calling thread.
void ein_emulate_launch(const char* entry, unsigned max_threads, unsigned grid, unsigned block,
                        unsigned shared_bytes, void (*kernel)(void* const* args),
                        void* const* args);
