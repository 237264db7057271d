// Cost of resolving a pattern: a cached lookup (pattern text + shapes already seen), the
// same with more operands and sizes, and the uncached parse + sema for comparison.
// Reproduces the figure in BENCHMARKS.md:
//   build/bin/bench_pattern_cache --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <ein/pattern_cache.h>
#include <ein/pattern_parser.h>

namespace ein {
namespace {

ResolveRequest split_heads() {
  ResolveRequest r;
  r.op = PatternOp::rearrange;
  r.shapes = {{32, 512, 768}};
  r.sizes = {{"h", 12}};
  return r;
}

ResolveRequest attention_scores() {
  ResolveRequest r;
  r.op = PatternOp::einsum;
  r.shapes = {{8, 12, 1024, 64}, {8, 12, 1024, 64}};
  return r;
}

void BM_CachedRearrange(benchmark::State& state) {
  PatternCache cache;
  const ResolveRequest req = split_heads();
  cache.resolve("b s (h d) -> b h s d", req);
  for (auto _ : state)
    benchmark::DoNotOptimize(cache.resolve("b s (h d) -> b h s d", req));
}
BENCHMARK(BM_CachedRearrange);

void BM_CachedEinsum(benchmark::State& state) {
  PatternCache cache;
  const ResolveRequest req = attention_scores();
  cache.resolve("b h i d, b h j d -> b h i j", req);
  for (auto _ : state)
    benchmark::DoNotOptimize(cache.resolve("b h i d, b h j d -> b h i j", req));
}
BENCHMARK(BM_CachedEinsum);

void BM_CachedRearrangeThreads(benchmark::State& state) {
  static PatternCache cache;
  const ResolveRequest req = split_heads();
  cache.resolve("b s (h d) -> b h s d", req);
  for (auto _ : state)
    benchmark::DoNotOptimize(cache.resolve("b s (h d) -> b h s d", req));
}
BENCHMARK(BM_CachedRearrangeThreads)->Threads(2);

void BM_UncachedParseAndResolve(benchmark::State& state) {
  const ResolveRequest req = split_heads();
  for (auto _ : state)
    benchmark::DoNotOptimize(resolve_pattern(parse_pattern("b s (h d) -> b h s d"), req));
}
BENCHMARK(BM_UncachedParseAndResolve);

}  // namespace
}  // namespace ein

BENCHMARK_MAIN();
