// The reduction CUDA strategies (emit_cuda.h): kernels with stages over the trailing reduced
// dims R, per point p of the parallel dims P (kernel_ir.h's semantics: stages, then the full
// stores over the row, then the row stores).
//
//   row_warp / row_block  when some input or full output is contiguous along R's last dim, or
//        nothing is contiguous along P's last dim: a group of threads shares a row (one warp
//        for rows of ≤ 1024 points, 8 rows per block; else one 512-thread block). Each thread
//        takes points lane, lane + T, ... of the row; each stage combines them in a register,
//        then across the group (warp shuffles; for a block, then one value per warp through
//        shared memory), so every thread holds the stage's result for the next stage and the
//        stores. When the thread's points of the row's inputs
//        and of the last stage's value fit in 64 registers (32 in a 512-thread block), the row is
//        read once into registers and kept there ("on chip") for every stage and store, and the
//        last stage's value (softmax's exp(x − max)) is kept too, so softmax reads x once, computes
//        exp once and writes y once.
//   column  otherwise (rows along a strided dim, e.g. 'n c -> c'): one thread per row, the
//        stages as serial loops; adjacent threads take adjacent rows, so their loads coalesce.
// A sum in an f32 kernel whose thread adds more than kF32Terms points accumulates them in a
// double (emit_mlir.cpp, "Accumulators": 10^5 values of 0.1 in one f32 chain came out 1.4e-4
// off); the loops are memory-bound, and the thread's result is rounded to f32 before the group
// combines it (a tree of at most 512 values).
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/emit/emit_cuda_writer.h"

namespace ein::detail {
namespace {

constexpr int kWarpRowMax = 1024;  // longest row one warp takes
constexpr int kRowBlock = 512;     // threads per row in row_block
constexpr int kRowsPerWarpBlock = 8;
// Registers per thread for the row kept on chip (points per thread × (row inputs + the stashed
// value)), at most: a quarter of what __launch_bounds__ leaves each thread (255 at 256
// threads, 128 at 512), so the stages' own values still fit without spilling.
constexpr int kOnChipWarpValues = 64;
constexpr int kOnChipBlockValues = 32;
constexpr int64_t kF32Terms = 64;

/// Declares stage `s`'s accumulator, in a double when `terms` values of an f32 sum go in it.
bool open_accumulator(CudaWriter& w, size_t s, int64_t terms) {
  const KernelStage& stage = w.k.stages[s];
  const bool wide = w.k.compute == DType::f32 && stage.combine == Combine::sum && terms > kF32Terms;
  if (wide)
    w.line(fmt::format("double d{} = 0.0;", s));
  else
    w.line(fmt::format("{} a{} = {};", w.ct, s, w.literal(combine_identity(stage.combine))));
  return wide;
}

/// Adds `v` to stage `s`'s accumulator.
void accumulate(CudaWriter& w, size_t s, bool wide, const std::string& v) {
  if (wide)
    w.line(fmt::format("d{} += (double)({});", s, v));
  else
    w.line(fmt::format("a{} = {};", s, w.combine(w.k.stages[s].combine, fmt::format("a{}", s), v)));
}

/// Stage `s`'s accumulator as `a<s>` in the compute type.
void close_accumulator(CudaWriter& w, size_t s, bool wide) {
  if (wide) w.line(fmt::format("{0} a{1} = ({0})d{1};", w.ct, s));
}

struct RowPlan {
  std::vector<int> pdims, rdims;
  int64_t rows = 0, row = 0;  // points of P and of R
  int threads = 0;            // per row
  int rows_per_block = 1;
  int64_t items = 0;          // points of the row per thread
  bool on_chip = false;
  std::vector<int> cached;    // the inputs kept in registers
  int stash = -1;             // the node kept in registers with them (the last stage's value)

  /// Whether the threads' points overrun the row, so that each must check its point is in it:
  /// not when they cover it exactly (softmax over 512: 16 a lane), where the check would be
  /// code for NVRTC to prove away on every unrolled point.
  bool ragged() const { return items * threads != row; }
};

/// Whether node `target`'s value is needed to compute node `i`.
bool depends_on(const Kernel& k, int i, int target) {
  std::vector<char> seen(k.nodes.size(), 0);
  std::vector<int> todo = {i};
  while (!todo.empty()) {
    const int n = todo.back();
    todo.pop_back();
    if (n < 0 || seen[n]) continue;
    if (n == target) return true;
    seen[n] = 1;
    todo.insert(todo.end(), {k.nodes[n].a, k.nodes[n].b, k.nodes[n].c});
  }
  return false;
}

bool use_columns(const CudaWriter& w, int p) {
  const Kernel& k = w.k;
  const int last = static_cast<int>(k.domain.size()) - 1;
  bool along_row = false, along_p = false;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const KernelBuffer& buf = k.buffers[b];
    if (!buf.output && !w.loaded(static_cast<int>(b))) continue;
    if (!k.row_buffer(static_cast<int>(b)) && buf.strides[last] == 1) along_row = true;
    if (p > 0 && buf.strides[p - 1] == 1) along_p = true;
  }
  return !along_row && along_p;
}

/// Opens the loop over this thread's points of the row and declares their R indices.
void open_row_points(CudaWriter& w, const RowPlan& plan) {
  if (plan.on_chip) {
    w.line("#pragma unroll");
    w.open(fmt::format("for (int it = 0; it < {}; ++it)", plan.items));
    w.line(fmt::format("const {} r = lane + it * {};", w.idx, plan.threads));
    if (plan.ragged()) w.open(fmt::format("if (r < {})", plan.row));
  } else {
    w.open(fmt::format("for ({} r = lane; r < {}; r += {})", w.idx, plan.row, plan.threads));
  }
  w.decompose("r", plan.rdims, "rest_r");
}

void close_row_points(CudaWriter& w, const RowPlan& plan) {
  w.close();
  if (plan.on_chip && plan.ragged()) w.close();
}

/// A point of the row: cached inputs from their registers, the rest from memory.
CudaWriter::Point row_point(const CudaWriter& w, const RowPlan& plan) {
  CudaWriter::Point at = w.direct_point(w.index_names());
  if (plan.on_chip)
    for (int b : plan.cached)
      at.load[b] = fmt::format("c{}[it]", b);
  return at;
}

void emit_rows(CudaWriter& w, CudaKernel& out, RowPlan plan) {
  const Kernel& k = w.k;
  const bool warp = plan.row <= kWarpRowMax;
  plan.threads = warp ? 32 : kRowBlock;
  plan.rows_per_block = warp ? kRowsPerWarpBlock : 1;
  plan.items = (plan.row + plan.threads - 1) / plan.threads;
  for (size_t b = 0; b < k.buffers.size(); ++b)
    if (!k.buffers[b].output && w.loaded(static_cast<int>(b)) &&
        !k.row_buffer(static_cast<int>(b)))
      plan.cached.push_back(static_cast<int>(b));
  plan.on_chip = plan.items > 0 && !plan.cached.empty() &&
                 static_cast<int64_t>(plan.cached.size() + 1) * plan.items <=
                     (warp ? kOnChipWarpValues : kOnChipBlockValues);
  bool full_stores = false, row_stores = false;
  for (const KernelStore& st : k.stores)
    (w.is_row_store(st) ? row_stores : full_stores) = true;
  if (plan.on_chip && !k.stages.empty()) {
    const int e = k.stages.back().value;
    const ScalarOp op = k.nodes[e].op;
    const bool leaf = scalar_op_arity(op) == 0;
    for (const KernelStore& st : k.stores)
      if (!leaf && !w.is_row_store(st) && depends_on(k, st.value, e)) plan.stash = e;
  }
  const bool work = plan.rows > 0 && (plan.row > 0 || row_stores);
  out.strategy = warp ? CudaStrategy::row_warp : CudaStrategy::row_block;
  out.row_on_chip = plan.on_chip;
  out.launch = {work ? grid_for(plan.rows, plan.rows_per_block) : 0,
                plan.threads * plan.rows_per_block, 0};

  const int warps = kRowBlock / 32;
  if (!warp) {
    w.line(fmt::format("__shared__ {} scratch[{}];", w.ct, warps));
    out.launch.shared_bytes = warps * static_cast<int>(element_size(k.compute));
    w.line("const int lane = threadIdx.x;");
    w.open(fmt::format("for ({} row = blockIdx.x; row < {}; row += gridDim.x)", w.idx, plan.rows));
  } else {
    w.line("const int lane = threadIdx.x & 31;");
    w.open(fmt::format("for ({0} row = blockIdx.x * {1} + (threadIdx.x >> 5); row < {2}; "
                       "row += gridDim.x * {1})",
                       w.idx, plan.rows_per_block, plan.rows));
  }
  w.decompose("row", plan.pdims, "rest_p");
  if (plan.on_chip) {
    w.line("// The row's inputs, read once and kept in registers for every stage and store.");
    for (int b : plan.cached)
      w.line(fmt::format("{} c{}[{}];", cuda_storage_type(k.buffers[b].dtype), b, plan.items));
    open_row_points(w, plan);
    for (int b : plan.cached)
      w.line(fmt::format("c{}[it] = b{}[{}];", b, b, w.offset(b, w.index_names())));
    close_row_points(w, plan);
  }
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const KernelStage& stage = k.stages[s];
    const bool wide = open_accumulator(w, s, plan.items);
    const bool stashed = stage.value == plan.stash && s + 1 == k.stages.size();
    if (stashed) w.line(fmt::format("{} e[{}];", w.ct, plan.items));
    open_row_points(w, plan);
    CudaWriter::Memo memo;
    const std::string v = w.value(stage.value, row_point(w, plan), memo);
    accumulate(w, s, wide, v);
    if (stashed) w.line("e[it] = " + v + ";");
    close_row_points(w, plan);
    close_accumulator(w, s, wide);
    const std::string_view op = CudaWriter::combine_functor(stage.combine);
    if (warp)
      w.line(fmt::format("a{0} = ein_warp_reduce(a{0}, {1}());", s, op));
    else
      w.line(fmt::format("a{0} = ein_block_reduce<{1}>(a{0}, {2}(), scratch);", s, warps, op));
  }
  const std::vector<std::string> names = w.index_names();
  auto target = [&](int b) { return fmt::format("b{}[{}]", b, w.offset(b, names)); };
  if (full_stores) {
    open_row_points(w, plan);
    CudaWriter::Memo memo;
    if (plan.stash >= 0) memo[plan.stash] = "e[it]";
    w.store_all(false, row_point(w, plan), memo, target);
    close_row_points(w, plan);
  }
  if (row_stores) {
    w.open("if (lane == 0)");
    CudaWriter::Memo memo;
    w.store_all(true, w.direct_point(names), memo, target);
    w.close();
  }
  w.close();
}

/// Nested loops over the R dims (constant bounds), declaring their indices.
void open_r_loops(CudaWriter& w, const RowPlan& plan) {
  for (int d : plan.rdims)
    w.open(fmt::format("for ({0} i{1} = 0; i{1} < {2}; ++i{1})", w.idx, d, w.k.domain[d]));
}

void close_r_loops(CudaWriter& w, const RowPlan& plan) {
  for (size_t i = 0; i < plan.rdims.size(); ++i)
    w.close();
}

void emit_columns(CudaWriter& w, CudaKernel& out, const RowPlan& plan) {
  const Kernel& k = w.k;
  constexpr int kBlock = 256;
  bool full_stores = false, row_stores = false;
  for (const KernelStore& st : k.stores)
    (w.is_row_store(st) ? row_stores : full_stores) = true;
  const bool work = plan.rows > 0 && (plan.row > 0 || row_stores);
  out.strategy = CudaStrategy::column;
  out.launch = {work ? grid_for(plan.rows, kBlock) : 0, kBlock, 0};
  const std::vector<std::string> names = w.index_names();
  auto target = [&](int b) { return fmt::format("b{}[{}]", b, w.offset(b, names)); };
  w.open(fmt::format("for ({} row = blockIdx.x * blockDim.x + threadIdx.x; row < {}; "
                     "row += gridDim.x * blockDim.x)",
                     w.idx, plan.rows));
  w.decompose("row", plan.pdims, "rest_p");
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const bool wide = open_accumulator(w, s, plan.row);
    open_r_loops(w, plan);
    CudaWriter::Memo memo;
    const std::string v = w.value(k.stages[s].value, w.direct_point(names), memo);
    accumulate(w, s, wide, v);
    close_r_loops(w, plan);
    close_accumulator(w, s, wide);
  }
  if (full_stores) {
    open_r_loops(w, plan);
    CudaWriter::Memo memo;
    w.store_all(false, w.direct_point(names), memo, target);
    close_r_loops(w, plan);
  }
  if (row_stores) {
    CudaWriter::Memo memo;
    w.store_all(true, w.direct_point(names), memo, target);
  }
  w.close();
}

}  // namespace

void emit_reduction(CudaWriter& w, CudaKernel& out) {
  const Kernel& k = w.k;
  const int rank = static_cast<int>(k.domain.size()), p = k.parallel_dims();
  RowPlan plan;
  for (int d = 0; d < rank; ++d)
    (d < p ? plan.pdims : plan.rdims).push_back(d);
  plan.rows = w.extent(plan.pdims);
  plan.row = w.extent(plan.rdims);
  if (use_columns(w, p))
    emit_columns(w, out, plan);
  else
    emit_rows(w, out, std::move(plan));
}

}  // namespace ein::detail
