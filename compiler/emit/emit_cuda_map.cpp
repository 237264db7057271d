// The pointwise CUDA strategies (emit_cuda.h): kernels without stages, out[p] = f(loads at p).
//
//   tiled_permute  some loaded input is contiguous along a dim b other than the dim a along
//                  which the first output is contiguous (a transpose): each 256-thread block
//                  walks 32×32 tiles of (a, b); it reads such inputs into shared memory with
//                  threads along b, synchronises, then computes and writes with threads along
//                  a, so both the reads and the writes coalesce (the classic transpose of
//                  Harris, "An Efficient Matrix Transpose in CUDA C/C++", with a 33-wide row
//                  against bank conflicts). Tiles are taken only when a and b have ≥ 8 points.
//   elementwise    everything else: a grid-stride loop over the points; when every buffer
//                  moves by 0 or 1 along the last dim and the sizes allow, a vector path moves
//                  V elements per access (V · the widest element ≤ 16 bytes), taken at run time
//                  when every contiguous pointer is aligned to its vector.
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/emit_cuda_writer.h"

namespace ein::detail {
namespace {

constexpr int kBlock = 256;
constexpr int kTile = 32;

/// Whether input `b` is read through the tile: contiguous along `tb`, strided along `ta`.
bool transposed(const CudaWriter& w, int b, int ta, int tb) {
  const KernelBuffer& buf = w.k.buffers[b];
  return !buf.output && w.loaded(b) && buf.strides[tb] == 1 && buf.strides[ta] != 0 &&
         buf.strides[ta] != 1;
}

/// The tile dims (a: the first output's contiguous dim, b: a transposed input's), or false.
bool tile_dims(const CudaWriter& w, int& ta, int& tb) {
  const Kernel& k = w.k;
  const int rank = static_cast<int>(k.domain.size());
  ta = -1;
  for (const KernelBuffer& buf : k.buffers) {
    if (!buf.output) continue;
    for (int d = 0; d < rank; ++d)
      if (buf.strides[d] == 1) ta = d;
    break;
  }
  if (ta < 0 || k.domain[ta] < 8) return false;
  for (tb = 0; tb < rank; ++tb) {
    if (tb == ta || k.domain[tb] < 8) continue;
    for (size_t b = 0; b < k.buffers.size(); ++b)
      if (transposed(w, static_cast<int>(b), ta, tb)) return true;
  }
  return false;
}

/// Elements per vector access along the last dim, or 1 when the vector path does not apply.
int vector_width(const CudaWriter& w) {
  const Kernel& k = w.k;
  const int rank = static_cast<int>(k.domain.size());
  if (rank == 0) return 1;
  const int last = rank - 1;
  size_t widest = 0;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const KernelBuffer& buf = k.buffers[b];
    if (!buf.output && !w.loaded(static_cast<int>(b))) continue;
    const int64_t s = buf.strides[last];
    if ((s != 0 && s != 1) || (buf.output && s != 1)) return 1;
    if (s == 1) widest = std::max(widest, element_size(buf.dtype));
  }
  if (widest == 0 || widest > 8) return 1;
  const int v = static_cast<int>(16 / widest);
  if (k.domain[last] % v != 0) return 1;
  // Every vector must start on a multiple of v elements of each contiguous buffer.
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const KernelBuffer& buf = k.buffers[b];
    if ((!buf.output && !w.loaded(static_cast<int>(b))) || buf.strides[last] != 1) continue;
    for (int d = 0; d < last; ++d)
      if (buf.strides[d] % v != 0) return 1;
  }
  return v;
}

void emit_elementwise(CudaWriter& w, CudaKernel& out) {
  const Kernel& k = w.k;
  const int rank = static_cast<int>(k.domain.size());
  std::vector<int> all(rank);
  std::iota(all.begin(), all.end(), 0);
  const int64_t total = w.extent(all);
  const int v = vector_width(w);
  out.strategy = CudaStrategy::elementwise;
  out.vector_width = v;
  out.launch = {grid_for(v > 1 ? total / v : total, kBlock), kBlock, 0};
  const std::vector<std::string> names = w.index_names();
  auto contiguous = [&](size_t b) {
    return (k.buffers[b].output || w.loaded(static_cast<int>(b))) &&
           k.buffers[b].strides[rank - 1] == 1;
  };
  if (v > 1) {
    std::string aligned;
    for (size_t b = 0; b < k.buffers.size(); ++b)
      if (contiguous(b))
        aligned += fmt::format("{}ein_aligned(b{}, {})", aligned.empty() ? "" : " && ", b,
                               v * element_size(k.buffers[b].dtype));
    w.open("if (" + aligned + ")");
    w.line(fmt::format("// The vector path: {} consecutive elements per thread and iteration.", v));
    w.open(fmt::format("for ({0} g = blockIdx.x * blockDim.x + threadIdx.x; g < {1}; "
                       "g += gridDim.x * blockDim.x)",
                       w.idx, total / v));
    w.decompose(fmt::format("g * {}", v), all, "rest");
    CudaWriter::Point at = w.direct_point(names);
    at.index[rank - 1] = fmt::format("(i{} + l)", rank - 1);
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      if (!contiguous(b)) continue;
      const std::string type(cuda_storage_type(k.buffers[b].dtype));
      const std::string off = w.offset(static_cast<int>(b), names);
      if (k.buffers[b].output) {
        w.line(fmt::format("ein_vec<{}, {}> y{};", type, v, b));
      } else {
        w.line(fmt::format("const ein_vec<{0}, {1}> x{2} = ein_load_vec<{1}>(b{2} + {3});", type,
                           v, b, off));
        at.load[b] = fmt::format("x{}.v[l]", b);
      }
    }
    w.line("#pragma unroll");
    w.open(fmt::format("for (int l = 0; l < {}; ++l)", v));
    CudaWriter::Memo memo;
    w.store_all(false, at, memo, [](int b) { return fmt::format("y{}.v[l]", b); });
    w.close();
    for (size_t b = 0; b < k.buffers.size(); ++b)
      if (k.buffers[b].output)
        w.line(fmt::format("ein_store_vec<{}>(b{} + {}, y{});", v, b,
                           w.offset(static_cast<int>(b), names), b));
    w.close();
    w.line("return;");
    w.close();
  }
  w.open(fmt::format("for ({} e = blockIdx.x * blockDim.x + threadIdx.x; e < {}; "
                     "e += gridDim.x * blockDim.x)",
                     w.idx, total));
  w.decompose("e", all, "rest");
  CudaWriter::Memo memo;
  w.store_all(false, w.direct_point(names), memo, [&](int b) {
    return fmt::format("b{}[{}]", b, w.offset(b, names));
  });
  w.close();
}

void emit_tiled(CudaWriter& w, CudaKernel& out, int ta, int tb) {
  const Kernel& k = w.k;
  const int rank = static_cast<int>(k.domain.size());
  std::vector<int> others;
  for (int d = 0; d < rank; ++d)
    if (d != ta && d != tb) others.push_back(d);
  const int64_t na = k.domain[ta], nb = k.domain[tb];
  const int64_t tiles_a = (na + kTile - 1) / kTile, tiles_b = (nb + kTile - 1) / kTile;
  const int64_t tiles = w.extent(others) * tiles_a * tiles_b;
  out.strategy = CudaStrategy::tiled_permute;
  out.launch = {grid_for(tiles, 1), kBlock, 0};
  const std::vector<std::string> names = w.index_names();
  std::vector<int> tiled;
  for (size_t b = 0; b < k.buffers.size(); ++b)
    if (transposed(w, static_cast<int>(b), ta, tb)) {
      tiled.push_back(static_cast<int>(b));
      w.line(fmt::format("__shared__ {} t{}[{}][{}];", cuda_storage_type(k.buffers[b].dtype), b,
                         kTile, kTile + 1));
      out.launch.shared_bytes +=
          static_cast<int>(kTile * (kTile + 1) * element_size(k.buffers[b].dtype));
    }
  w.line("const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;");
  w.open(fmt::format("for ({} tile = blockIdx.x; tile < {}; tile += gridDim.x)", w.idx, tiles));
  w.line(fmt::format("{} rest = tile;", w.idx));
  w.line(fmt::format("const {} tb = rest % {};", w.idx, tiles_b));
  w.line(fmt::format("rest /= {};", tiles_b));
  w.line(fmt::format("const {} ta = rest % {};", w.idx, tiles_a));
  w.line(fmt::format("rest /= {};", tiles_a));
  w.decompose("rest", others, "outer");
  const std::string bounds = fmt::format("i{} < {} && i{} < {}", ta, na, tb, nb);
  // Phase 1: threads along b read the transposed inputs into the tiles, coalesced.
  w.open("for (int j = ty; j < 32; j += 8)");
  w.line(fmt::format("const {} i{} = ta * 32 + j;", w.idx, ta));
  w.line(fmt::format("const {} i{} = tb * 32 + tx;", w.idx, tb));
  w.open("if (" + bounds + ")");
  for (int b : tiled)
    w.line(fmt::format("t{}[j][tx] = b{}[{}];", b, b, w.offset(b, names)));
  w.close();
  w.close();
  w.line("__syncthreads();");
  // Phase 2: threads along a compute and write, coalesced; tiled inputs come from the tiles.
  w.open("for (int j = ty; j < 32; j += 8)");
  w.line(fmt::format("const {} i{} = ta * 32 + tx;", w.idx, ta));
  w.line(fmt::format("const {} i{} = tb * 32 + j;", w.idx, tb));
  w.open("if (" + bounds + ")");
  CudaWriter::Point at = w.direct_point(names);
  for (int b : tiled)
    at.load[b] = fmt::format("t{}[tx][j]", b);
  CudaWriter::Memo memo;
  w.store_all(false, at, memo,
              [&](int b) { return fmt::format("b{}[{}]", b, w.offset(b, names)); });
  w.close();
  w.close();
  w.line("__syncthreads();  // the tiles are refilled by the next iteration");
  w.close();
}

}  // namespace

void emit_pointwise(CudaWriter& w, CudaKernel& out) {
  int ta = -1, tb = -1;
  if (tile_dims(w, ta, tb))
    emit_tiled(w, out, ta, tb);
  else
    emit_elementwise(w, out);
}

}  // namespace ein::detail
