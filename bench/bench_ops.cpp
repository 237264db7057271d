// Google Benchmark micro-benchmarks of the CPU ops at the sizes of bench/compare_cpu.py:
// a copying rearrange, a mean, a fused map, an f32 -> bf16 cast, two einsums (BLAS), and the host
// overhead of a cached view and of a tiny kernel, and a 402.7 MB host fill. Bytes and FLOPs are
// reported as counters; comparisons with PyTorch and numpy live in compare_cpu.py, which uses
// ein_cpu_timings instead.
//   build-bench/bin/bench_ops --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
#include <cstdint>

#include <benchmark/benchmark.h>
#include <ein/ein.h>

namespace ein {
namespace {

void set_rates(benchmark::State& state, double bytes, double flops) {
  if (bytes > 0) state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  if (flops > 0)
    state.counters["FLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

// x: (b s (h d)) = (8 1024 (8 128)), 32 MiB of f32; the merge of s with d forces a copy.
void BM_RearrangeCopy(benchmark::State& state) {
  const Tensor x = randn({8, 1024, 1024}, DType::f32, cpu(), 1);
  for (auto _ : state)
    benchmark::DoNotOptimize(rearrange(x, "b s (h d) -> b h (s d)", {{"h", 8}}));
  set_rates(state, 2.0 * static_cast<double>(x.nbytes()), 0);
}
BENCHMARK(BM_RearrangeCopy)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Mean(benchmark::State& state) {
  const Tensor x = randn({8, 1024, 1024}, DType::f32, cpu(), 2);
  for (auto _ : state)
    benchmark::DoNotOptimize(reduce(x, "b s d -> b s", "mean"));
  set_rates(state, static_cast<double>(x.nbytes()), 0);
}
BENCHMARK(BM_Mean)->Unit(benchmark::kMillisecond)->UseRealTime();

// x: (b s d) = (16 1024 1024), 64 MiB of f32; one pass reads x and writes the result.
void BM_MapChain(benchmark::State& state) {
  const Tensor x = randn({16, 1024, 1024}, DType::f32, cpu(), 3);
  const Tensor m = randn({16, 1024}, DType::f32, cpu(), 4);
  const Tensor w = randn({1024}, DType::f32, cpu(), 5);
  const Tensor c = randn({1024}, DType::f32, cpu(), 6);
  for (auto _ : state)
    benchmark::DoNotOptimize(
        map("x[b s d], m[b s], w[d], c[d] -> (x - m)**2 * w + c", {x, m, w, c}));
  set_rates(state, 2.0 * static_cast<double>(x.nbytes()), 4.0 * static_cast<double>(x.numel()));
}
BENCHMARK(BM_MapChain)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Gemm(benchmark::State& state) {
  const Tensor x = randn({8, 128, 1024}, DType::f32, cpu(), 7);
  const Tensor w = randn({1024, 1024}, DType::f32, cpu(), 8);
  for (auto _ : state)
    benchmark::DoNotOptimize(einsum("b s d, d f -> b s f", x, w));
  set_rates(state, 0, 2.0 * 8 * 128 * 1024 * 1024);
}
BENCHMARK(BM_Gemm)->Unit(benchmark::kMillisecond)->UseRealTime();

// The weight cast of every --precision bf16 step: an f32 [512, 2048] parameter rounded to bf16
// (runtime/copy.cpp), 4 MiB read and 2 MiB written.
void BM_CastBf16(benchmark::State& state) {
  const Tensor w = randn({512, 2048}, DType::f32, cpu(), 9);
  for (auto _ : state)
    benchmark::DoNotOptimize(w.to(DType::bf16));
  set_rates(state, 1.5 * static_cast<double>(w.nbytes()), 0);
}
BENCHMARK(BM_CastBf16)->Unit(benchmark::kMillisecond)->UseRealTime();

// The global gradient norm of every clipped training step (optim::grad_norm) over the
// byte-level GPT's parameters at D=768, L=2 (14.5 M f32 gradients, 58 MB read).
void BM_GradNorm(benchmark::State& state) {
  std::vector<Tensor> params;
  std::vector<Shape> shapes{{256, 768}, {256, 768}, {768}, {768}};
  for (int layer = 0; layer < 2; ++layer)
    for (Shape s : std::vector<Shape>{{768}, {768}, {768, 2304}, {2304}, {768, 768}, {768},
                                      {768}, {768}, {768, 3072}, {3072}, {3072, 768}, {768}})
      shapes.push_back(s);
  double bytes = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = randn(shapes[i], DType::f32, cpu(), 20 + i).requires_grad_();
    const Tensor g = randn(shapes[i], DType::f32, cpu(), 60 + i);
    if (p.dim() == 1)
      reduce(map("p[n], g[n] -> p * g", {p, g}), "n ->", "sum").backward();
    else
      reduce(map("p[n m], g[n m] -> p * g", {p, g}), "n m ->", "sum").backward();
    bytes += static_cast<double>(g.nbytes());
    params.push_back(p);
  }
  for (auto _ : state)
    benchmark::DoNotOptimize(optim::grad_norm(params));
  set_rates(state, bytes, 0);
}
BENCHMARK(BM_GradNorm)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AttentionScores(benchmark::State& state) {
  const Tensor q = randn({4, 8, 256, 64}, DType::f32, cpu(), 9);
  const Tensor k = randn({4, 8, 256, 64}, DType::f32, cpu(), 10);
  for (auto _ : state)
    benchmark::DoNotOptimize(einsum("b h q d, b h k d -> b h q k", q, k));
  set_rates(state, 0, 2.0 * 4 * 8 * 256 * 256 * 64);
}
BENCHMARK(BM_AttentionScores)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_CompiledViewCall(benchmark::State& state) {
  const Tensor x = randn({2, 16, 64}, DType::f32, cpu(), 11);
  const Op split = compile("b s (h d) -> b h s d", {{"h", 8}});
  for (auto _ : state)
    benchmark::DoNotOptimize(split(x));
}
BENCHMARK(BM_CompiledViewCall);

void BM_SmallMap(benchmark::State& state) {
  const Tensor x = randn({16}, DType::f32, cpu(), 12);
  for (auto _ : state)
    benchmark::DoNotOptimize(map("x[i] -> x * 2 + 1", {x}));
}
BENCHMARK(BM_SmallMap);

// full() of 402.7 MB of f32 on the CPU: the host fill that zeros() on a CUDA tensor paid before
// it became a device kernel (the fused attention's gradients at b h t e = 4 16 4096 128,
// BENCHMARKS.md). Five iterations; the first touches fresh pages unless the allocator kept them.
void BM_FullHostBuffer(benchmark::State& state) {
  for (auto _ : state)
    benchmark::DoNotOptimize(full({100663296}, 0.0, DType::f32, cpu()));
  set_rates(state, 4.0 * 100663296, 0);
}
BENCHMARK(BM_FullHostBuffer)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

}  // namespace
}  // namespace ein

BENCHMARK_MAIN();
