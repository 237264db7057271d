// jemalloc's options for ein's executables (ein_malloc in the top-level CMakeLists.txt). jemalloc
// reads this string at start-up; MALLOC_CONF in the environment still overrides it.
//
// muzzy_decay_ms:-1: memory a program frees goes back to the kernel lazily (MADV_FREE, which the
// kernel reclaims only when it needs the pages) and is never unmapped for good (MADV_DONTNEED).
// With jemalloc 5.3's defaults (dirty pages decay over 10 s, then are unmapped at once), the
// byte-level GPT's training step at T L H D B = 128 4 8 256 16 page-faulted ~1,200 fresh pages
// a step on a 2-core Zen 3 (in JIT-compiled code writing its outputs); with this setting, a few
// in a whole run, and less system time (BENCHMARKS.md, "... and jemalloc's decay").
extern "C" {
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables): jemalloc's interface
const char* malloc_conf = "muzzy_decay_ms:-1";
}
