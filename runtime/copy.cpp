// Strided copy with dtype conversion: dimension coalescing, a memcpy fast path, a table of
// 11 x 11 templated conversion loops, and oneTBB over outer rows for large tensors.
#include "runtime/copy.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/parallel.h"
#include <ein/scalar_convert.h>

namespace ein {
namespace {

// Element types in DType enum order.
using ElementTypes = std::tuple<double, float, Half, BFloat16, Float8E4M3, Float8E5M2, int64_t,
                                int32_t, int8_t, uint8_t, bool>;

// Copies n elements; steps are in bytes.
using RunFn = void (*)(char* dst, int64_t dst_step, const char* src, int64_t src_step, int64_t n);

template <class D, class S>
void convert_run(char* dst, int64_t dst_step, const char* src, int64_t src_step, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<D*>(dst + i * dst_step) =
        convert<D>(*reinterpret_cast<const S*>(src + i * src_step));
}

// f32 <-> bf16, the conversions of every bf16 training step (weight casts, attention
// operands): inline bit arithmetic without a branch, which the compiler vectorises when both
// sides are contiguous, bit-identical to the generic encoder (round to nearest, ties to even:
// add 0x7fff plus the lowest kept bit, keep the upper half; overflow rounds to ±inf; a NaN
// becomes the quiet NaN 0x7fc0 with its sign, as the encoder makes it). With a branch to the
// encoder for NaNs the loop stayed scalar: a [768, 3072] weight cast took 2.1 ms on two threads.
inline uint16_t bf16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

template <>
void convert_run<BFloat16, float>(char* dst, int64_t dst_step, const char* src, int64_t src_step,
                                  int64_t n) {
  if (dst_step == sizeof(BFloat16) && src_step == sizeof(float)) {
    auto* d = reinterpret_cast<uint16_t*>(dst);
    const auto* x = reinterpret_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i)
      d[i] = bf16_bits(x[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    reinterpret_cast<BFloat16*>(dst + i * dst_step)->bits =
        bf16_bits(*reinterpret_cast<const float*>(src + i * src_step));
}

template <>
void convert_run<float, BFloat16>(char* dst, int64_t dst_step, const char* src, int64_t src_step,
                                  int64_t n) {
  if (dst_step == sizeof(float) && src_step == sizeof(BFloat16)) {
    auto* d = reinterpret_cast<float*>(dst);
    const auto* x = reinterpret_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i)
      d[i] = std::bit_cast<float>(static_cast<uint32_t>(x[i]) << 16);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<float*>(dst + i * dst_step) = std::bit_cast<float>(
        static_cast<uint32_t>(reinterpret_cast<const BFloat16*>(src + i * src_step)->bits) << 16);
}

template <size_t... D, size_t... S>
constexpr auto make_table(std::index_sequence<D...>, std::index_sequence<S...> s) {
  std::array<std::array<RunFn, sizeof...(S)>, sizeof...(D)> table{};
  auto row = [&]<size_t d>(std::integral_constant<size_t, d>) {
    ((table[d][S] = &convert_run<std::tuple_element_t<d, ElementTypes>,
                                 std::tuple_element_t<S, ElementTypes>>),
     ...);
  };
  (row(std::integral_constant<size_t, D>{}), ...);
  (void)s;
  return table;
}

constexpr auto kConvert =
    make_table(std::make_index_sequence<kDTypeCount>{}, std::make_index_sequence<kDTypeCount>{});

// Same dtype: moves bytes of one element size; unit steps on both sides become memcpy.
template <size_t kBytes>
void move_run(char* dst, int64_t dst_step, const char* src, int64_t src_step, int64_t n) {
  if (dst_step == static_cast<int64_t>(kBytes) && src_step == static_cast<int64_t>(kBytes)) {
    std::memcpy(dst, src, kBytes * static_cast<size_t>(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * dst_step, src + i * src_step, kBytes);
}

RunFn pick_run(DType dst, DType src) {
  if (dst == src) {
    switch (element_size(dst)) {
      case 1:
        return &move_run<1>;
      case 2:
        return &move_run<2>;
      case 4:
        return &move_run<4>;
      case 8:
        return &move_run<8>;
      default:
        break;
    }
  }
  return kConvert[static_cast<size_t>(dst)][static_cast<size_t>(src)];
}

struct Dim {
  int64_t size;
  int64_t dst_stride;  // bytes
  int64_t src_stride;  // bytes
};

// Steps 1-3 of copy_strided: drop size-1 dims, order, coalesce. Returns false when empty.
bool prepare_dims(const Shape& sizes, const StridedBuffer& dst, const StridedBuffer& src,
                  std::vector<Dim>& dims) {
  const auto dsz = static_cast<int64_t>(element_size(dst.dtype));
  const auto ssz = static_cast<int64_t>(element_size(src.dtype));
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return false;
    if (sizes[d] != 1) dims.push_back({sizes[d], dst.strides[d] * dsz, src.strides[d] * ssz});
  }
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return std::llabs(a.dst_stride) > std::llabs(b.dst_stride);
  });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      if (outer.dst_stride == d.size * d.dst_stride && outer.src_stride == d.size * d.src_stride) {
        outer = {outer.size * d.size, d.dst_stride, d.src_stride};
        continue;
      }
    }
    merged.push_back(d);
  }
  dims = std::move(merged);
  return true;
}

// Up to this many elements a copy runs on the calling thread. At 2^20 the weight casts of a
// bf16 step ([512, 2048] f32 -> bf16, exactly 2^20 elements) ran on one thread: 0.76-1.23 ms
// against 0.35-0.41 ms on two (bench_ops --benchmark_filter=CastBf16).
constexpr int64_t kParallelThreshold = int64_t{1} << 18;
// Elements per parallel task: large enough to amortise scheduling, small enough to balance.
constexpr int64_t kTaskElements = int64_t{1} << 16;
// Tile edge for transpose-like copies: 32 x 32 elements of up to 8 bytes fit in L1 twice.
constexpr int64_t kTile = 32;

}  // namespace

void copy_strided(const Shape& sizes, const StridedBuffer& dst, const StridedBuffer& src) {
  std::vector<Dim> dims;
  if (!prepare_dims(sizes, dst, src, dims)) return;
  char* const dst_base = static_cast<char*>(dst.data);
  const char* const src_base = static_cast<const char*>(src.data);
  const RunFn run = pick_run(dst.dtype, src.dtype);
  if (dims.empty()) {
    run(dst_base, 0, src_base, 0, 1);
    return;
  }
  const Dim inner = dims.back();
  dims.pop_back();
  int64_t rows = 1;
  for (const Dim& d : dims)
    rows *= d.size;
  const int64_t numel = rows * inner.size;

  if (rows == 1) {
    // One long run (a contiguous tensor, typically): split the run itself.
    const int64_t grain = numel > kParallelThreshold ? kTaskElements : numel;
    parallel_for(0, inner.size, grain, [&](int64_t lo, int64_t hi) {
      run(dst_base + lo * inner.dst_stride, inner.dst_stride, src_base + lo * inner.src_stride,
          inner.src_stride, hi - lo);
    });
    return;
  }

  // A transpose-like pair (the next-inner dim walks src more densely than the inner one):
  // copy the two innermost dims in square tiles so each src cache line is used fully.
  std::optional<Dim> tiled;
  if (std::llabs(dims.back().src_stride) < std::llabs(inner.src_stride) &&
      dims.back().size >= kTile && inner.size >= kTile) {
    tiled = dims.back();
    dims.pop_back();
    rows /= tiled->size;
  }
  // Byte offsets of outer row `r` by div/mod over the outer dims.
  auto row_offsets = [&](int64_t r) {
    int64_t dst_off = 0, src_off = 0;
    for (size_t d = dims.size(); d-- > 0;) {
      const int64_t i = r % dims[d].size;
      r /= dims[d].size;
      dst_off += i * dims[d].dst_stride;
      src_off += i * dims[d].src_stride;
    }
    return std::pair{dst_off, src_off};
  };
  if (tiled) {
    // Parallel over (outer row, band of kTile rows of the tiled dim), so a plain 2-d
    // transpose is split too.
    const int64_t bands = (tiled->size + kTile - 1) / kTile;
    const int64_t band_elements = kTile * inner.size;
    const int64_t grain = numel > kParallelThreshold
                              ? std::max<int64_t>(1, kTaskElements / band_elements)
                              : rows * bands;
    parallel_for(0, rows * bands, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const auto [dst_off, src_off] = row_offsets(t / bands);
        const int64_t i0 = (t % bands) * kTile;
        const int64_t i1 = std::min(i0 + kTile, tiled->size);
        for (int64_t j0 = 0; j0 < inner.size; j0 += kTile)
          for (int64_t i = i0; i < i1; ++i)
            run(dst_base + dst_off + i * tiled->dst_stride + j0 * inner.dst_stride,
                inner.dst_stride,
                src_base + src_off + i * tiled->src_stride + j0 * inner.src_stride,
                inner.src_stride, std::min(kTile, inner.size - j0));
      }
    });
    return;
  }
  const int64_t grain =
      numel > kParallelThreshold ? std::max<int64_t>(1, kTaskElements / inner.size) : rows;
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    // An odometer over the outer dims, started at row `lo` once per chunk.
    std::vector<int64_t> index(dims.size());
    auto [dst_off, src_off] = row_offsets(lo);
    int64_t rest = lo;
    for (size_t d = dims.size(); d-- > 0;) {
      index[d] = rest % dims[d].size;
      rest /= dims[d].size;
    }
    for (int64_t r = lo; r < hi; ++r) {
      run(dst_base + dst_off, inner.dst_stride, src_base + src_off, inner.src_stride, inner.size);
      for (size_t d = dims.size(); d-- > 0;) {
        dst_off += dims[d].dst_stride;
        src_off += dims[d].src_stride;
        if (++index[d] < dims[d].size) break;
        dst_off -= dims[d].size * dims[d].dst_stride;
        src_off -= dims[d].size * dims[d].src_stride;
        index[d] = 0;
      }
    }
  });
}

}  // namespace ein
