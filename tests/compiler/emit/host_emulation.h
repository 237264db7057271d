// Host emulation of the CUDA features emitted kernels use, so that the test can compile a
// kernel's CUDA C++ with the host C++ compiler and run it on the CPU (force-included before
// the kernel's source; see emulate_test.cpp). It is faithful to the execution model the
// kernels rely on, not to the GPU's arithmetic:
//  - every block runs as blockDim.x real threads (std::thread), so __syncthreads() is a true
//    barrier of the block and a missing barrier is a real race; blocks run one after another
//    (CUDA gives no order between blocks, and the kernels assume none);
//  - __shfl_xor_sync exchanges values among the 32 threads of a warp through a per-warp
//    barrier (all 32 lanes must take part, as the full mask requires);
//  - __syncwarp() is a barrier of the warp's 32 threads;
//  - WMMA (nvcuda::wmma: fragments, load/store/mma_sync) gives every lane of the warp the whole
//    tile, in row-major order: the GPU spreads a fragment over the lanes in a layout the API
//    leaves unspecified, so a kernel that uses only the API (and reads which row an accumulator
//    element holds back from memory) is right under either; store_matrix_sync writes from lane 0
//    alone, so a reader missing its __syncwarp() races as it would on the GPU;
//  - __shared__ variables are function-local statics: one copy, shared by the block's threads
//    (blocks never overlap, so one copy is enough);
//  - a thread that returns stops counting at the barriers (arrive_and_drop), as exited
//    threads do on the GPU;
//  - math is the host's libm (expf, erff, ...) and the 16-bit and fp8 types are the CUDA
//    headers' host implementations: values may differ from the GPU's in the last ulp, so
//    this checks indexing, reductions, synchronisation and conversions, not device libm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <barrier>
#include <cmath>
#include <type_traits>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
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

/// The barriers and shuffle slots of the block being run.
struct Block {
  explicit Block(unsigned threads) : block(threads), slots(threads) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w)
      warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<double> slots;  // one per thread; float and double values pass exactly
};
inline Block* current = nullptr;

}  // namespace ein_emulation

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
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, sizeof d);
  return d;
}
using std::signbit;  // CUDA's math API has it unqualified; <cmath> keeps it in std
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

/// Runs `kernel` as a launch of `grid` blocks of `block` threads.
inline void ein_emulate_launch(unsigned grid, unsigned block, const std::function<void()>& kernel) {
  gridDim = {grid, 1, 1};
  blockDim = {block, 1, 1};
  for (unsigned g = 0; g < grid; ++g) {
    ein_emulation::Block b(block);
    ein_emulation::current = &b;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([&, t, g] {
        threadIdx = {t, 0, 0};
        blockIdx = {g, 0, 0};
        kernel();
        b.block.arrive_and_drop();
        b.warps[t / 32]->arrive_and_drop();
      });
    for (std::thread& th : threads)
      th.join();
    ein_emulation::current = nullptr;
  }
}
